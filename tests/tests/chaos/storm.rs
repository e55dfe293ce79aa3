//! Scenario 1, Redelivery storm: every event delivered three times at once, once to each of three
//! `settle ingress` processes, ~64 requests in flight → each event recorded once, one job each,
//! one entry each.

use futures::StreamExt;
use serde_json::{Value, json};
use tests::TestDb;
use tests::app::{AppOptions, FAST_WORKERS, STANDARD_SECRET, charge, config_toml};
use tests::process::{Listen, Scratch, spawn_settle};
use tests::sign::{now, standard_headers};

use crate::{counts, report, scale, verify, wait_ready, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_storm_across_three_ingresses_records_and_posts_each_event_once() {
    let events = scale(600, 10_000);
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
    let mut bases = Vec::new();
    let mut ingresses = Vec::new();
    for i in 0..3 {
        let listen = Listen::new();
        ingresses.push(spawn_settle(
            &scratch,
            &format!("ingress-{i}"),
            &config,
            &ingress_url,
            &listen.args("ingress"),
            &no_migration,
        ));
        wait_ready(&listen.ops_base()).await;
        bases.push(listen.base());
    }

    let http = reqwest::Client::new();
    let bases = &bases;
    let http = &http;
    // 21 events at a time, each sent to the three ingresses at once: 63 requests in flight.
    let answers: Vec<(u16, String)> = futures::stream::iter(0..events)
        .map(|i| async move {
            let id = format!("storm_{i}");
            let body = charge(&format!("ch_storm_{i}"), "10.00", "0.30", "9.70");
            let headers = standard_headers(STANDARD_SECRET, &id, now(), body.as_bytes());
            let sends = bases.iter().map(|base| {
                let mut request = http
                    .post(format!("{base}/webhooks/std"))
                    .header("content-type", "application/json")
                    .body(body.clone());
                for (name, value) in &headers {
                    request = request.header(name.as_str(), value.as_str());
                }
                async move {
                    let response = request.send().await.expect("sent");
                    let status = response.status().as_u16();
                    let json: Value = response.json().await.unwrap_or(Value::Null);
                    (status, json["status"].as_str().unwrap_or("").to_owned())
                }
            });
            futures::future::join_all(sends).await
        })
        .buffer_unordered(21)
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    let not_ok = answers.iter().filter(|(status, _)| *status != 200).count();
    let recorded = answers.iter().filter(|(_, s)| s == "recorded").count();
    let duplicate = answers.iter().filter(|(_, s)| s == "duplicate").count();
    assert_eq!(not_ok, 0, "every answer is 200");
    assert_eq!((recorded, duplicate), (events, 2 * events));

    let pool = db.pool().await;
    // Counted before the drain: once workers run, finished rows are pruned.
    let queued: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM apalis.jobs WHERE job_type = 'settle::PostSettlement'",
    )
    .fetch_one(&pool)
    .await
    .expect("jobs");
    assert_eq!(
        queued,
        i64::try_from(events).expect("count"),
        "one queue row per event, never two"
    );
    let mut workers: Vec<_> = (0..2)
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
    wait_until(
        &pool,
        "every event to post",
        std::time::Duration::from_secs(600),
        "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded')",
    )
    .await;
    let (stored, jobs, entries, posted, dead) = counts(&pool).await;
    let expected = i64::try_from(events).expect("count");
    assert_eq!(
        (stored, jobs, entries, posted, dead),
        (expected, expected, expected, expected, 0)
    );
    verify(&config, &db.url).await;
    for worker in &mut workers {
        worker.start_kill().expect("kill");
    }
    report(
        "storm",
        json!({"events": events, "deliveries": answers.len(), "answers_200": answers.len() - not_ok,
               "recorded": recorded, "duplicate": duplicate, "stored": stored, "jobs": jobs,
               "entries": entries, "dead_letters": dead, "verify": "passed"}),
    );
}
