//! Scenario 6, Slow database: a posting transaction that stays open far longer than the heartbeat (its
//! worker frozen mid-transaction) → the fleet rescues the job, the second runner waits on the
//! event's lock, and once the first commits it finds the event posted: one entry, never two.

use std::time::Duration;

use ops::Role;
use serde_json::json;
use tests::app::{AppOptions, FAST_WORKERS, spawn};
use tests::fleet::{Fleet, record_charges};
use tests::process::Scratch;

use crate::{counts, report, verify, wait_until};

async fn signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let status = tokio::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .await
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posting_held_open_past_the_heartbeat_is_not_posted_twice() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "slow_", 1).await;
    let db = app.pg_db().name.clone();
    let scratch = Scratch::new();
    // Locks wait up to a minute, so the slowness is the database's, not a lock timeout.
    let mut fleet = Fleet::new(
        &scratch,
        &app,
        &format!("{FAST_WORKERS}\nlock_timeout_ms = 60000"),
        vec![],
    );

    // The journal is held by someone else: the first runner's posting blocks inside its
    // transaction, holding the event's row lock.
    let mut blocker = app.pg().begin().await.expect("begin");
    sqlx::query("LOCK TABLE journal_entries IN EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("lock the journal");
    fleet.start(1);
    let first_backend_sql = format!(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = '{db}'
           AND application_name = 'settle' AND wait_event_type = 'Lock'
           AND query LIKE '%INSERT INTO journal_entries%')"
    );
    wait_until(
        app.pg(),
        "the first posting to block",
        Duration::from_secs(60),
        &first_backend_sql,
    )
    .await;
    let first_backend: i32 = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'settle'
           AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO journal_entries%'",
    )
    .bind(&db)
    .fetch_one(app.pg())
    .await
    .expect("the blocked backend");
    let first_runner: String = sqlx::query_scalar("SELECT lock_by FROM apalis.jobs")
        .fetch_one(app.pg())
        .await
        .expect("the first runner");
    // Freeze the first worker: its heartbeat stops, its transaction stays open.
    signal(&fleet.members[0], "-STOP").await;
    fleet.start(1);
    // The second worker rescues the job once the heartbeat lapses, and waits on the event lock.
    wait_until(
        app.pg(),
        "the second runner to wait on the event's lock",
        Duration::from_secs(60),
        &format!(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = '{db}'
               AND application_name = 'settle' AND wait_event_type = 'Lock' AND pid <> {first_backend}
               AND query LIKE '%settle_start_attempt%')"
        ),
    )
    .await;
    let second_runner: Option<String> = sqlx::query_scalar("SELECT lock_by FROM apalis.jobs")
        .fetch_one(app.pg())
        .await
        .expect("the second runner");
    assert!(
        second_runner.is_some_and(|runner| runner != first_runner),
        "the job was handed to the second worker"
    );

    // The journal frees up; the first worker wakes and commits; the second finds it posted.
    blocker.commit().await.expect("unlock");
    signal(&fleet.members[0], "-CONT").await;
    app.wait_settled(60).await;
    wait_until(
        app.pg(),
        "the job to finish",
        Duration::from_secs(60),
        "SELECT NOT EXISTS (SELECT 1 FROM apalis.jobs WHERE status NOT IN ('Done', 'Killed'))",
    )
    .await;
    let (stored, _, entries, posted, dead) = counts(app.pg()).await;
    assert_eq!((stored, entries, posted, dead), (1, 1, 1, 0), "posted once");
    let (attempts, posted_attempts): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE outcome = 'posted') FROM job_attempts",
    )
    .fetch_one(app.pg())
    .await
    .expect("attempts");
    assert_eq!(
        (attempts, posted_attempts),
        (1, 1),
        "the second runner found the event posted and started no attempt"
    );
    verify(&fleet.config, &app.database_url()).await;
    report(
        "slow_database",
        json!({"entries": entries, "attempts": attempts, "second_runner": "waited on the event lock, then found it posted",
               "verify": "passed"}),
    );
}
