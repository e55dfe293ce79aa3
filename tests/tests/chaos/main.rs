//! The chaos suite: settle's guarantees (ARCHITECTURE.md, Invariants) under faults, with the real binaries against
//! the real PostgreSQL. Every scenario is scripted and deterministic in what it sends (event ids
//! and bodies are fixed; the fault schedule is fixed in time), and ends with `settle verify` and
//! exact counts.
//!
//! Each scenario runs at a short scale in every test run and at the full scale with
//! `CHAOS_SCALE=full` (see RELIABILITY.md); each writes what it measured to
//! `target/chaos/<scenario>.json`.

mod abusive;
mod connections;
mod failover;
mod hostile;
mod kill;
mod poison;
mod provider_faults;
mod restart;
mod slow;
mod storm;
mod sweep;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

/// `short` in ordinary runs, `full` with `CHAOS_SCALE=full`.
pub fn scale(short: usize, full: usize) -> usize {
    if std::env::var("CHAOS_SCALE").is_ok_and(|s| s == "full") {
        full
    } else {
        short
    }
}

/// Prints a scenario's measurements and writes them to `target/chaos/<scenario>.json`.
pub fn report(scenario: &str, measured: Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/chaos");
    let _ = std::fs::create_dir_all(&dir);
    let text = serde_json::to_string_pretty(&measured).expect("json");
    let _ = std::fs::write(dir.join(format!("{scenario}.json")), &text);
    println!("{scenario}: {text}");
}

/// Waits until `base`/readyz answers 200.
pub async fn wait_ready(base: &str) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        assert!(Instant::now() < deadline, "{base} did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `sql` (one boolean) on `pool` until true; panics with `what` after `timeout`.
pub async fn wait_until(pool: &sqlx::PgPool, what: &str, timeout: Duration, sql: &str) {
    let deadline = Instant::now() + timeout;
    loop {
        let done: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(pool)
            .await
            .unwrap_or(false);
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `(events, distinct jobs that ran, entries, posted events, dead letters)` of a store.
pub async fn counts(pool: &sqlx::PgPool) -> (i64, i64, i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM settlement_events),
                (SELECT count(DISTINCT job_id) FROM job_attempts),
                (SELECT count(*) FROM journal_entries),
                (SELECT count(*) FROM settlement_events WHERE status = 'posted'),
                (SELECT count(*) FROM dead_letters)",
    )
    .fetch_one(pool)
    .await
    .expect("counts")
}

/// `settle verify` over the database at `url`, with the configuration at `config`.
pub async fn verify(config: &Path, url: &str) {
    let (ok, report) = tests::process::run_settle(config, url, &["verify"]).await;
    assert!(ok, "settle verify failed:\n{report}");
}
