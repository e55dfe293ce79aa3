//! The worker fleet as real `settle worker` processes on one PostgreSQL database: stopped, cut off
//! or misconfigured, it loses nothing and says what is wrong. (Killed and poisoned fleets are the
//! chaos suite's: `tests/tests/chaos`.)

use std::time::Duration;

use ops::Role;
use tests::app::{AppOptions, FAST_WORKERS, config_toml, spawn};
use tests::fleet::{Fleet, record_charges, tail};
use tests::process::{Scratch, spawn_settle};

/// SIGTERM while postings are in flight (blocked inside their transactions on a journal lock
/// someone else holds): the worker stops fetching, finishes those postings once the lock is
/// gone, and exits 0 with no attempt left open; a later worker posts the rest.
#[tokio::test]
async fn sigterm_lets_a_worker_finish_its_in_flight_jobs_and_exit_zero() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "evt_", 50).await;
    let scratch = Scratch::new();
    let workers = format!("{FAST_WORKERS}\nlock_timeout_ms = 60000")
        .replace("drain_timeout_secs = 5", "drain_timeout_secs = 30");
    let mut fleet = Fleet::new(&scratch, &app, &workers, vec![]);
    let mut blocker = app.pg().begin().await.expect("begin");
    sqlx::query("LOCK TABLE journal_entries IN EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("lock the journal");
    fleet.start(1);
    app.wait_for(
        "a posting to block inside its transaction",
        60,
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
           AND application_name = 'settle' AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO journal_entries%')",
    )
    .await;
    let mut worker = fleet.members.remove(0);
    tests::process::sigterm(&worker);
    // The worker is draining, not gone: it waits for its postings.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        worker.try_wait().expect("status").is_none(),
        "exited before its jobs finished"
    );
    blocker.commit().await.expect("unlock");
    let status = tokio::time::timeout(Duration::from_secs(30), worker.wait())
        .await
        .expect("exits within the drain timeout")
        .expect("status");
    assert!(
        status.success(),
        "exit status {status:?}; logs:\n{}",
        tail(&scratch.logs())
    );
    assert!(scratch.logs().contains("workers stopped"));
    let (open, posted): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE finished_at IS NULL), count(*) FILTER (WHERE outcome = 'posted')
         FROM job_attempts",
    )
    .fetch_one(app.pg())
    .await
    .expect("attempts");
    assert_eq!(open, 0, "every started attempt finished before the exit");
    assert!(posted >= 1, "the in-flight postings committed");
    assert_eq!(app.count("journal_entries").await, posted);
    fleet.start(1);
    app.wait_settled(60).await;
    assert_eq!(app.count("journal_entries").await, 50);
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn a_worker_behind_a_transaction_pooler_refuses_to_start_with_a_clear_message() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    let pooler = tests::process::TransactionPooler::start().await;
    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &config_toml(&app.database_url(), &AppOptions::default()),
    );
    // The worker connects as its runtime role, as a fleet's worker does.
    let direct = tests::db::as_role(&app.database_url(), "settle_worker");
    let pooled = pooler.url_for(&direct);
    let mut worker = spawn_settle(
        &scratch,
        "worker",
        &config,
        &pooled,
        &["worker"],
        &[("SETTLE_MIGRATE_ON_START", "false")],
    );
    let status = tokio::time::timeout(Duration::from_secs(30), worker.wait())
        .await
        .expect("the worker exits at start")
        .expect("status");
    assert!(
        !status.success(),
        "a worker must not run on a transaction pooler"
    );
    let logs = scratch.logs();
    assert!(
        logs.contains("workers need a session-mode database connection"),
        "{logs}"
    );
    assert!(
        logs.contains("WORKER_DATABASE_URL"),
        "the message says what to do"
    );

    // With WORKER_DATABASE_URL pointing at a session connection, the same worker runs.
    let mut worker = spawn_settle(
        &scratch,
        "worker-direct",
        &config,
        &pooled,
        &["worker"],
        &[
            ("SETTLE_MIGRATE_ON_START", "false"),
            ("WORKER_DATABASE_URL", &direct),
        ],
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        worker.try_wait().expect("poll").is_none(),
        "runs with a session connection:\n{}",
        tail(&scratch.logs())
    );
    worker.start_kill().expect("kill");
}

#[tokio::test]
async fn a_worker_rides_out_a_database_outage_without_a_tight_restart_loop() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "before_", 20).await;
    let scratch = Scratch::new();
    let mut fleet = Fleet::new(&scratch, &app, FAST_WORKERS, vec![]);
    fleet.start(1);
    app.wait_settled(60).await;
    let pid = fleet.members[0].id();

    app.pg_db().set_reachable(false).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    app.pg_db().set_reachable(true).await;

    record_charges(&app, "after_", 20).await;
    app.wait_settled(60).await;
    assert_eq!(
        fleet.members[0].id(),
        pid,
        "the same process, never restarted from outside"
    );
    assert!(
        fleet.members[0].try_wait().expect("poll").is_none(),
        "still running"
    );
    let restarts = scratch.logs().matches("restarting").count();
    assert!(
        (1..=8).contains(&restarts),
        "the worker restarted with backoff during a 6 s outage ({restarts} restarts):\n{}",
        tail(&scratch.logs())
    );
    let posted: i64 =
        sqlx::query_scalar("SELECT count(*) FROM settlement_events WHERE status = 'posted'")
            .fetch_one(app.pg())
            .await
            .expect("posted");
    assert_eq!(posted, 40);
}
