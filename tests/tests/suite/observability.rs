//! Seeing the system: `/metrics` after a scripted run, request ids, readiness.

use std::collections::BTreeMap;

use ops::Role;
use serde_json::json;
use tests::app::{AppOptions, STANDARD_SECRET_UNKNOWN, charge, spawn, spawn_app};
use tests::sign::{now, standard_headers};

/// `name{labels} value` lines of a Prometheus text page, by series.
async fn scrape(app: &tests::TestApp) -> BTreeMap<String, i64> {
    let text = app.metrics_page().await;
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            // Every series read here is a count; sums and bucket bounds are skipped.
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn delta(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>, series: &str) -> i64 {
    after.get(series).copied().unwrap_or(0) - before.get(series).copied().unwrap_or(0)
}

#[tokio::test]
async fn metrics_count_a_scripted_run() {
    let app = spawn_app().await;
    let before = scrape(&app).await;

    let good = charge("ch_1", "100.00", "3.20", "96.80");
    for (id, body) in [
        ("msg_1", good.clone()),
        ("msg_2", charge("ch_2", "10.00", "0.30", "9.70")),
        ("msg_1", good.clone()),
        ("msg_1", charge("ch_1", "100.01", "3.20", "96.81")),
        (
            "msg_3",
            json!({"type": "invoice.paid", "data": {}}).to_string(),
        ),
        ("msg_4", charge("ch_4", "10.00", "0.30", "9.00")),
    ] {
        app.post_standard(id, &body).await;
    }
    let forged = standard_headers(STANDARD_SECRET_UNKNOWN, "msg_5", now(), good.as_bytes());
    app.post("/webhooks/std", &forged, &good).await;
    app.post("/webhooks/nope", &forged, &good).await;
    app.wait_settled(30).await;
    // apalis acknowledges finished jobs in batches, a moment after the posting committed.
    app.wait_for(
        "every job acknowledged",
        30,
        "SELECT count(*) = 0 FROM apalis.jobs WHERE status IN ('Pending', 'Queued', 'Running')",
    )
    .await;
    // The store's gauges are read at most every few seconds, however often /metrics is
    // scraped: wait for the read after the run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let after = loop {
        let after = scrape(&app).await;
        if after.get("settle_conflicts_open") == Some(&1) || std::time::Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };

    let deliveries = |outcome: &str, reason: &str| {
        delta(
            &before,
            &after,
            &format!(
                "settle_deliveries_total{{source=\"std\",outcome=\"{outcome}\",reason=\"{reason}\"}}"
            ),
        )
    };
    assert_eq!(deliveries("recorded", ""), 2);
    assert_eq!(deliveries("invalid", ""), 1);
    assert_eq!(deliveries("duplicate", ""), 1);
    assert_eq!(deliveries("conflict", ""), 1);
    assert_eq!(deliveries("ignored", "not_settlement"), 1);
    assert_eq!(deliveries("rejected", "invalid_signature"), 1);
    assert_eq!(
        delta(
            &before,
            &after,
            "settle_deliveries_total{source=\"unknown\",outcome=\"rejected\",reason=\"unknown_source\"}"
        ),
        1
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "settle_ingress_request_duration_seconds_count{source=\"std\"}"
        ),
        7
    );
    assert_eq!(
        delta(&before, &after, "settle_jobs_total{outcome=\"posted\"}"),
        2
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "settle_jobs_total{outcome=\"dead_lettered\"}"
        ),
        1
    );
    assert_eq!(
        delta(&before, &after, "settle_job_attempts_started_total"),
        3
    );
    assert_eq!(
        delta(&before, &after, "settle_posting_lag_seconds_count"),
        2
    );
    assert_eq!(
        after.get("settle_dead_letters_open{error_class=\"permanent\"}"),
        Some(&1)
    );
    assert_eq!(
        after.get("settle_dead_letters_open{error_class=\"exhausted\"}"),
        Some(&0)
    );
    assert_eq!(after.get("settle_conflicts_open"), Some(&1));
    assert_eq!(after.get("settle_queue_depth"), Some(&0));
    assert_eq!(after.get("settle_workers_running"), Some(&1));
    assert_eq!(after.get("settle_database_up"), Some(&1));
}

/// A fleet's processes with a listener each connect as their own database role; each reports its
/// database up. The ingress's role may read none of the backlog the console reports (dead
/// letters, the journal's suspense lines, pauses): its page says whether the database answers,
/// and no more. (A worker process serves no HTTP.)
#[tokio::test]
async fn every_process_on_its_own_database_role_reports_its_database_up() {
    for role in [Role::Ingress, Role::Console] {
        let app = spawn(AppOptions {
            role,
            ..AppOptions::default()
        })
        .await;
        let page = scrape(&app).await;
        assert_eq!(
            page.get("settle_database_up"),
            Some(&1),
            "{role:?}: {page:?}"
        );
        let backlog = page.contains_key("settle_dead_letters_open{error_class=\"permanent\"}");
        assert_eq!(backlog, role != Role::Ingress, "{role:?}: {page:?}");
        app.stop().await;
    }
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = spawn_app().await;
    let response = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    let generated = response
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert!(
        generated.as_ref().is_some_and(|id| id.len() == 26),
        "a ULID: {generated:?}"
    );
    // Ready once the workers run (a moment after start): database, migrations, workers.
    let mut ready = None;
    for _ in 0..100 {
        let response = app
            .http
            .get(app.url("/readyz"))
            .header("x-request-id", "trace-42")
            .send()
            .await
            .expect("readyz");
        assert_eq!(
            response
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok()),
            Some("trace-42")
        );
        if response.status().as_u16() == 200 {
            ready = Some(response);
            break;
        }
        let body: serde_json::Value = response.json().await.expect("json");
        assert_eq!(
            body["error"], "workers_not_running",
            "only the workers may still be starting"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ready.is_some(), "ready within 10 s");
    let response = app
        .http
        .get(app.url("/healthz"))
        .header("x-request-id", "bad id with spaces")
        .send()
        .await
        .expect("healthz");
    assert_ne!(
        response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("bad id with spaces")
    );
}

#[tokio::test]
async fn a_source_with_an_expectation_exposes_when_it_was_last_heard_from() {
    let db = tests::TestDb::create().await;
    let toml = tests::app::config_toml(&db.url, &tests::app::AppOptions::default()).replacen(
        "provider = \"standard\"",
        "provider = \"standard\"\n        expect_delivery_within_secs = 3600",
        1,
    );
    let config = ops::Config::from_toml(&toml).expect("configuration");
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs_f64();
    let app = ops::App::build(&config, ops::Role::Ingress)
        .await
        .expect("builds");
    let ops_base = format!("http://{}", app.ops_addr().expect("bound"));
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(app.run(shutdown.clone()));
    let page = reqwest::get(format!("{ops_base}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("page");
    let value = |name: &str| -> f64 {
        page.lines()
            .find(|line| line.starts_with(&format!("{name}{{source=\"std\"}}")))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} for std in:\n{page}"))
    };
    assert_eq!(value("settle_source_expected_within_seconds"), 3600.0);
    // Set when the process starts listening for it (silence since start counts).
    assert!(value("settle_source_last_delivery_timestamp_seconds") >= started.floor());
    assert!(
        !page.contains("settle_source_expected_within_seconds{source=\"stripe\"}"),
        "no expectation, no gauge"
    );
    shutdown.cancel();
}
