//! Scenario 7, Hostile inputs at volume: the whole hostile matrix (`tests::hostile`), many times each,
//! while a signed load runs against the same `settle serve` → every hostile delivery gets its
//! exact status and code, nothing of theirs is written, the load is stored exactly, and no
//! secret reaches the logs.

use futures::StreamExt;
use ops::loadgen::LoadOptions;
use serde_json::json;
use tests::TestDb;
use tests::app::{AppOptions, FAST_WORKERS, STANDARD_SECRET, config_toml};
use tests::hostile;
use tests::process::{Listen, Scratch, spawn_settle};

use crate::{counts, report, scale, verify, wait_ready, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hostile_matrix_at_volume_under_load_writes_nothing_and_leaks_nothing() {
    let each = scale(10, 100);
    let events = scale(1_000, 5_000);
    let db = TestDb::create().await;
    let scratch = Scratch::new();
    let options = AppOptions {
        extra: hostile::config_extra(),
        workers: FAST_WORKERS.to_owned(),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    let listen = Listen::new();
    let _serve = spawn_settle(
        &scratch,
        "serve",
        &config,
        &db.url,
        &listen.args("serve"),
        &[("RUST_LOG", "debug")],
    );
    let base = listen.base();
    wait_ready(&listen.ops_base()).await;

    let load = LoadOptions {
        url: base.clone(),
        source: "std".into(),
        provider: "standard".into(),
        secret: STANDARD_SECRET.into(),
        concurrency: 16,
        rate: 0,
        count: events,
        duration_secs: None,
        redelivery_percent: 10,
        concurrent_duplicate_percent: 5,
        conflict_percent: 0,
        prefix: Some("calm".into()),
        resend_rounds: 5,
    };
    let running = tokio::spawn(ops::loadgen::run(load.clone()));

    // Each round signs its cases afresh: a case's timestamp is only hostile relative to now.
    let cases = hostile::all_cases().len();
    let http = reqwest::Client::new();
    let (http, base_ref) = (&http, &base);
    let wrong: Vec<String> = futures::stream::iter((0..each).flat_map(|_| hostile::all_cases()))
        .map(|case| async move {
            let (status, body) = hostile::send(http, base_ref, &case).await;
            (status == case.status && body["error"] == case.code)
                .then_some(())
                .map_or_else(
                    || Some(format!("{}: {status} {body}", case.name)),
                    |()| None,
                )
        })
        .buffer_unordered(16)
        .filter_map(|wrong| async move { wrong })
        .collect()
        .await;
    assert!(
        wrong.is_empty(),
        "hostile deliveries answered wrongly: {wrong:?}"
    );

    let loaded = running.await.expect("load task").expect("load");
    assert_eq!(loaded.unanswered, 0, "{:?}", loaded.answers);
    let store = ledger::Store::connect(&db.url, &ledger::StoreOptions::default())
        .await
        .expect("store");
    ops::loadgen::verify(&store, &load, &loaded)
        .await
        .expect("the load is stored exactly");
    store.close().await;
    let pool = db.pool().await;
    wait_until(
        &pool,
        "the load to post",
        std::time::Duration::from_secs(300),
        "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded')",
    )
    .await;
    let (stored, _, entries, _, dead) = counts(&pool).await;
    let expected = i64::try_from(events).expect("count");
    let foreign: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM settlement_events WHERE external_id NOT LIKE 'calm-%')
              + (SELECT count(*) FROM event_conflicts)",
    )
    .fetch_one(&pool)
    .await
    .expect("foreign rows");
    assert_eq!(
        (stored, entries, dead, foreign),
        (expected, expected, 0, 0),
        "only the load was written"
    );
    let logs = scratch.logs();
    assert!(
        logs.contains("delivery refused"),
        "the refusals were logged"
    );
    for secret in hostile::secrets() {
        assert!(
            !logs.to_lowercase().contains(&secret.to_lowercase()),
            "a secret appeared in the logs"
        );
    }
    verify(&config, &db.url).await;
    report(
        "hostile_at_volume",
        json!({"cases": cases, "each": each, "hostile_deliveries": cases * each,
               "answered_exactly": cases * each - wrong.len(), "load_events": events,
               "load_answers": loaded.answers, "stored": stored, "foreign_rows": foreign,
               "verify": "passed"}),
    );
}
