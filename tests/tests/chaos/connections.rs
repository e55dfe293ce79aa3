//! Scenario 5, Connection kills: every second, `pg_terminate_backend` on every connection settle holds,
//! while an ingress takes a load (with redeliveries and racing duplicates) and two workers drain
//! it → every acknowledged event stored once, every event posted once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use ops::loadgen::LoadOptions;
use serde_json::json;
use tests::TestDb;
use tests::app::{AppOptions, FAST_WORKERS, STANDARD_SECRET, config_toml};
use tests::process::{Listen, Scratch, spawn_settle};

use crate::{counts, report, scale, verify, wait_ready, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_every_settle_connection_every_second_loses_and_doubles_nothing() {
    let events = scale(400, 2_000);
    let db = TestDb::create().await;
    let scratch = Scratch::new();
    let options = AppOptions {
        workers: format!("{FAST_WORKERS}\nconcurrency = 16"),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    // Each process connects as its runtime role (README.md, Database roles), which may not
    // migrate: the owner migrated and granted them.
    db.grant_runtime_roles().await;
    let ingress_url = tests::db::as_role(&db.url, "settle_ingress");
    let worker_url = tests::db::as_role(&db.url, "settle_worker");
    let no_migration = [("SETTLE_MIGRATE_ON_START", "false")];
    let listen = Listen::new();
    let _ingress = spawn_settle(
        &scratch,
        "ingress",
        &config,
        &ingress_url,
        &listen.args("ingress"),
        &no_migration,
    );
    let base = listen.base();
    wait_ready(&listen.ops_base()).await;
    let _workers: Vec<_> = (0..2)
        .map(|i| {
            spawn_settle(
                &scratch,
                &format!("worker-{i}"),
                &config,
                &worker_url,
                &["worker"],
                &no_migration,
            )
        })
        .collect();

    let pool = db.pool().await;
    let stop = Arc::new(AtomicBool::new(false));
    let terminated = Arc::new(AtomicI64::new(0));
    let killer = {
        let (pool, stop, terminated, name) = (
            pool.clone(),
            stop.clone(),
            terminated.clone(),
            db.name.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let killed: i64 = sqlx::query_scalar(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
                     WHERE datname = $1 AND application_name = 'settle'",
                )
                .bind(&name)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
                terminated.fetch_add(killed, Ordering::SeqCst);
            }
        })
    };

    let load = LoadOptions {
        url: base.clone(),
        source: "std".into(),
        provider: "standard".into(),
        secret: STANDARD_SECRET.into(),
        concurrency: 32,
        rate: 0,
        count: events,
        duration_secs: None,
        redelivery_percent: 10,
        concurrent_duplicate_percent: 5,
        conflict_percent: 0,
        prefix: Some("conn".into()),
        resend_rounds: 60,
    };
    let loaded = ops::loadgen::run(load.clone()).await.expect("load");
    assert_eq!(
        loaded.unanswered, 0,
        "every delivery got a definite answer: {:?}",
        loaded.answers
    );
    let store = ledger::Store::connect(&db.url, &ledger::StoreOptions::default())
        .await
        .expect("store");
    ops::loadgen::verify(&store, &load, &loaded)
        .await
        .expect("the store holds exactly the acknowledged events");
    store.close().await;

    wait_until(
        &pool,
        "every event to post",
        Duration::from_secs(600),
        "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded')",
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    killer.await.expect("killer");
    let (stored, jobs, entries, posted, dead) = counts(&pool).await;
    let expected = i64::try_from(events).expect("count");
    assert_eq!(
        (stored, jobs, entries, posted, dead),
        (expected, expected, expected, expected, 0)
    );
    let terminated = terminated.load(Ordering::SeqCst);
    assert!(terminated > 0, "connections were terminated during the run");
    verify(&config, &db.url).await;
    let refused: usize = loaded
        .answers
        .iter()
        .filter(|(answer, _)| !answer.starts_with("200"))
        .map(|(_, n)| n)
        .sum();
    report(
        "connection_kills",
        json!({"events": events, "deliveries": loaded.deliveries, "answers": loaded.answers,
               "not_2xx_then_resent": refused, "connections_terminated": terminated,
               "stored": stored, "entries": entries, "posted": posted, "dead_letters": dead,
               "verify": "passed"}),
    );
}
