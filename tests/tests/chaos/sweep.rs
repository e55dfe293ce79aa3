//! Scenario: a crash mid-sweep. A backfill of a Stripe source's history, drained by three
//! `settle worker` processes, all SIGKILLed and restarted three times, each time the moment a
//! window has posted part of its listing and not the rest →
//! every balance transaction booked exactly once, the opening balance making the books equal to
//! Stripe's balance, coverage complete, every event terminal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use ops::Role;
use providers::stripe::fake::{FakeStripe, RateLimits};
use serde_json::json;
use tests::app::{AppOptions, FAST_WORKERS, STRIPE_API_KEY, STRIPE_SECRET, spawn};
use tests::fleet::{Fleet, settled, tail};
use tests::process::{Scratch, run_settle};
use tests::stripe::Txn;

use crate::{report, scale, verify};

const SOURCE: &str = "stripe-sweep";

/// The `i`-th balance transaction, created at `created`: charges with Stripe's fee, refunds and
/// Stripe fees (no webhook names the last two).
fn transaction(i: usize, created: i64) -> serde_json::Value {
    let id = format!("txn_sweep_{i}");
    let source = format!("src_{i}");
    let mut transaction = match i % 10 {
        0..=6 => Txn::charge(&id, &source, 1_000 + (i % 89) as i64 * 10, 59),
        7 | 8 => Txn {
            id: &id,
            category: "refund",
            transaction_type: "refund",
            amount: -400,
            fees: &[],
            currency: "usd",
            source: &source,
            exchange_rate: None,
        }
        .value(),
        _ => Txn::stripe_fee(&id, -25),
    };
    transaction["created"] = json!(created);
    transaction
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_drained_while_workers_are_sigkilled_books_every_movement_once() {
    let transactions = scale(4_000, 40_000);
    let fake = Arc::new(FakeStripe::start(STRIPE_API_KEY).await.expect("fake"));
    fake.enforce(RateLimits {
        per_sec: 25,
        endpoint_per_sec: 25,
    });
    // Every page takes a while, so a window's listing takes seconds.
    fake.set_latency(Duration::from_millis(50));
    let now = Utc::now().timestamp();
    let day = 86_400;
    // Before the backfill's first day: only in Stripe's balance (the opening).
    for i in 0..20 {
        fake.add_transaction(None, transaction(i, now - 10 * day + i as i64));
    }
    // Three days of history.
    for i in 20..transactions {
        let created = now - 3 * day + ((i - 20) as i64 * 3 * day) / transactions as i64;
        fake.add_transaction(None, transaction(i, created));
    }
    let source = format!(
        r#"
        [[sources]]
        name = "{SOURCE}"
        provider = "stripe"
        secrets = ["{STRIPE_SECRET}"]
        livemode = false
        api_key = "{STRIPE_API_KEY}"
        api_base = "{base}"
        "#,
        base = fake.url(),
    );
    let app = spawn(AppOptions {
        role: Role::Ingress,
        extra: source.clone(),
        stripe: Some(fake.clone()),
        ..AppOptions::default()
    })
    .await;
    let scratch = Scratch::new();
    let options = AppOptions {
        extra: source,
        workers: format!("{FAST_WORKERS}\nconcurrency = 4"),
        stripe: Some(fake.clone()),
        ..AppOptions::default()
    };
    let mut fleet = Fleet::with_options(&scratch, &app, &options, vec![]);
    let since = (Utc::now() - chrono::TimeDelta::days(4))
        .date_naive()
        .to_string();
    let (ok, output) = run_settle(
        &fleet.config,
        &app.database_url(),
        &["backfill", SOURCE, "--since", &since, "--no-wait"],
    )
    .await;
    assert!(ok, "{output}");
    fleet.start(3);

    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    // Three times, the moment a window's attempt (begun since the last kill) has posted part of
    // its listing and not the rest, every worker is SIGKILLed and started again.
    let mut kills = 0;
    let mut last_kill = Utc::now() - chrono::TimeDelta::hours(1);
    let mut polls = 0;
    // Just before the look that found the drain done: the feed's own windows keep opening after.
    let mut drained_at;
    loop {
        let (opened, partial): (bool, bool) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM settlement_events
                            WHERE external_id = 'opening' AND status = 'posted'),
                    EXISTS (SELECT 1 FROM settlement_events e
                            JOIN job_attempts a ON a.job_id = e.job_id
                            WHERE e.external_id LIKE 'backfill:%' AND e.status = 'recorded'
                              AND a.finished_at IS NULL AND a.started_at > $1
                              AND EXISTS (SELECT 1 FROM journal_entries j WHERE j.event_id = e.id))",
        )
        .bind(last_kill)
        .fetch_one(app.pg())
        .await
        .expect("progress");
        drained_at = Utc::now();
        if opened && settled(&app).await {
            break;
        }
        if partial && kills < 3 {
            for member in 0..3 {
                fleet.kill_and_restart(member).await;
            }
            kills += 1;
            last_kill = Utc::now();
        }
        if Instant::now() >= deadline {
            let statuses: Vec<(String, String, i64)> = sqlx::query_as(
                "SELECT split_part(external_id, ':', 1), status, count(*) FROM settlement_events
                 GROUP BY 1, 2 ORDER BY 1, 2",
            )
            .fetch_all(app.pg())
            .await
            .unwrap_or_default();
            panic!(
                "the backfill did not drain ({kills} kills); events {statuses:?}; logs:\n{}",
                tail(&scratch.logs())
            );
        }
        polls += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let drained_ms = started.elapsed().as_millis();

    let (entries, distinct): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT movement_id) FROM journal_entries
         WHERE movement_id LIKE 'txn_sweep_%'",
    )
    .fetch_one(app.pg())
    .await
    .expect("entries");
    let expected = i64::try_from(transactions - 20).expect("count");
    assert_eq!(
        (entries, distinct),
        (expected, expected),
        "every transaction since the first day booked once ({kills} kills)"
    );
    // Kills landed inside windows: attempts of backfill windows died with their worker, and
    // their successors found what they had posted already posted.
    let died_windows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.job_id = a.job_id
         WHERE a.outcome = 'died' AND e.external_id LIKE 'backfill:%'",
    )
    .fetch_one(app.pg())
    .await
    .expect("died attempts");
    assert!(kills >= 1, "no kill landed inside a window");
    assert!(
        died_windows >= kills,
        "each kill ended a window's attempt part way ({kills} kills, {died_windows} died)"
    );
    // An attempt begun before the drain was seen done is not left open (a window of the feed
    // opened since may be running).
    let (open, dead): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job_attempts WHERE finished_at IS NULL AND started_at < $1),
                (SELECT count(*) FROM dead_letters)",
    )
    .bind(drained_at)
    .fetch_one(app.pg())
    .await
    .expect("attempts");
    let open_now: Vec<(String, String)> = sqlx::query_as(
        "SELECT e.external_id, a.started_at::text FROM job_attempts a
         JOIN settlement_events e ON e.id = a.event_id WHERE a.finished_at IS NULL",
    )
    .fetch_all(app.pg())
    .await
    .expect("open attempts");
    assert_eq!(
        (open, dead),
        (0, 0),
        "no attempt left open, nothing dead-lettered (drained at {drained_at}; open now: {open_now:?})"
    );

    let (equal, balance) = run_settle(
        &fleet.config,
        &app.database_url(),
        &["reconcile", "balance", SOURCE],
    )
    .await;
    assert!(equal, "the books equal Stripe's balance:\n{balance}");
    let yesterday = (Utc::now() - chrono::TimeDelta::days(1))
        .date_naive()
        .to_string();
    let (complete, coverage) = run_settle(
        &fleet.config,
        &app.database_url(),
        &[
            "reconcile",
            "coverage",
            SOURCE,
            "--from",
            &since,
            "--to",
            &yesterday,
        ],
    )
    .await;
    assert!(complete, "coverage is complete:\n{coverage}");
    verify(&fleet.config, &app.database_url()).await;
    report(
        "sweep_sigkill",
        json!({"transactions": transactions, "workers": 3, "kills": kills,
               "drained_ms": drained_ms, "entries": entries, "polls": polls,
               "window_attempts_died": died_windows, "requests": fake.requests(),
               "answered_429": fake.rate_limited(), "verify": "passed"}),
    );
}
