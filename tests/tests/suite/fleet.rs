//! The worker fleet as real `settle worker` processes on one PostgreSQL database: killed,
//! poisoned and stopped, it loses nothing and posts nothing twice.

use std::time::{Duration, Instant};

use futures::StreamExt;
use ops::Role;
use tests::TestApp;
use tests::app::{AppOptions, FAST_WORKERS, charge, config_toml, spawn};
use tests::process::{Scratch, run_settle, spawn_settle};
use tokio::process::Child;

/// Records `count` distinct charge events through the ingress, 32 at a time.
async fn record_charges(app: &TestApp, prefix: &str, count: usize) {
    let statuses: Vec<u16> = futures::stream::iter(0..count)
        .map(|i| async move {
            let body = charge(&format!("ch_{prefix}{i}"), "10.00", "0.30", "9.70");
            app.post_standard(&format!("{prefix}{i}"), &body)
                .await
                .status()
                .as_u16()
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|&s| s == 200),
        "every delivery recorded"
    );
}

struct Fleet<'a> {
    scratch: &'a Scratch,
    config: std::path::PathBuf,
    url: String,
    env: Vec<(&'static str, String)>,
    members: Vec<Child>,
    starts: usize,
}

impl<'a> Fleet<'a> {
    fn new(
        scratch: &'a Scratch,
        app: &TestApp,
        workers: &str,
        env: Vec<(&'static str, String)>,
    ) -> Self {
        let options = AppOptions {
            workers: workers.to_owned(),
            ..AppOptions::default()
        };
        let config = scratch.write("settle.toml", &config_toml(&app.database_url(), &options));
        Fleet {
            scratch,
            config,
            url: app.database_url().clone(),
            env,
            members: Vec::new(),
            starts: 0,
        }
    }

    fn spawn_worker(&mut self) -> Child {
        self.starts += 1;
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        spawn_settle(
            self.scratch,
            &format!("worker-{}", self.starts),
            &self.config,
            &self.url,
            &["worker"],
            &env,
        )
    }

    fn start(&mut self, count: usize) {
        for _ in 0..count {
            let child = self.spawn_worker();
            self.members.push(child);
        }
    }

    /// Restarts members that exited (a poisoned worker aborts itself).
    fn revive(&mut self) -> usize {
        let mut revived = 0;
        for i in 0..self.members.len() {
            if self.members[i].try_wait().ok().flatten().is_some() {
                self.members[i] = self.spawn_worker();
                revived += 1;
            }
        }
        revived
    }

    async fn kill_and_restart(&mut self, index: usize) {
        let member = &mut self.members[index];
        member.start_kill().expect("SIGKILL");
        member.wait().await.expect("reaped");
        self.members[index] = self.spawn_worker();
    }
}

async fn settled(app: &TestApp) -> bool {
    sqlx::query_scalar(
        "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded')",
    )
    .fetch_one(app.pg())
    .await
    .expect("settled query")
}

#[tokio::test]
async fn three_workers_drain_2000_events_while_one_is_killed_every_two_seconds() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "evt_", 2_000).await;
    let scratch = Scratch::new();
    let mut fleet = Fleet::new(
        &scratch,
        &app,
        &format!("{FAST_WORKERS}\nconcurrency = 8"),
        vec![],
    );
    fleet.start(3);

    let deadline = Instant::now() + Duration::from_secs(300);
    let mut kills = 0;
    while !settled(&app).await {
        assert!(
            Instant::now() < deadline,
            "fleet did not drain; logs:\n{}",
            tail(&scratch.logs())
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        fleet.kill_and_restart(kills % 3).await;
        kills += 1;
    }

    let (posted, entries, dead, died): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM settlement_events WHERE status = 'posted'),
                (SELECT count(*) FROM journal_entries),
                (SELECT count(*) FROM dead_letters),
                (SELECT count(*) FROM job_attempts WHERE outcome = 'died')",
    )
    .fetch_one(app.pg())
    .await
    .expect("counts");
    assert_eq!(
        (posted, entries, dead),
        (2_000, 2_000, 0),
        "0 lost, 0 duplicated ({kills} kills, {died} died attempts)"
    );
    let (ok, report) = run_settle(&fleet.config, &app.database_url(), &["verify"]).await;
    assert!(ok, "settle verify failed:\n{report}");
    assert!(kills >= 1, "at least one worker was killed mid-drain");
}

#[tokio::test]
async fn a_job_that_kills_its_worker_every_time_is_dead_lettered_and_others_keep_posting() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "poison_", 1).await;
    record_charges(&app, "evt_", 300).await;
    let scratch = Scratch::new();
    let env = vec![(workers::chaos::ABORT_PREFIX_ENV, "poison_".to_owned())];
    let mut fleet = Fleet::new(
        &scratch,
        &app,
        &format!("{FAST_WORKERS}\nattempts_max = 3\nconcurrency = 4"),
        env,
    );
    fleet.start(2);

    let deadline = Instant::now() + Duration::from_secs(180);
    let mut revived = 0;
    while !settled(&app).await {
        assert!(
            Instant::now() < deadline,
            "did not settle; logs:\n{}",
            tail(&scratch.logs())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        revived += fleet.revive();
    }
    assert_eq!(
        app.event_state("poison_0").await,
        ("abandoned".into(), Some("worker_died".into()))
    );
    let (class, attempts): (String, i32) =
        sqlx::query_as("SELECT error_class, attempts FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id WHERE e.external_id = 'poison_0'")
            .fetch_one(app.pg())
            .await
            .expect("dead letter");
    assert_eq!((class.as_str(), attempts), ("exhausted", 3));
    assert!(
        revived >= 3,
        "the poison killed a worker on each of its attempts ({revived} restarts)"
    );
    let posted: i64 =
        sqlx::query_scalar("SELECT count(*) FROM settlement_events WHERE status = 'posted'")
            .fetch_one(app.pg())
            .await
            .expect("posted");
    assert_eq!(posted, 300, "every other event posted");

    // Wait past every retry horizon (backoff_max 1 s, orphan window 2 s): the poison stays put.
    let attempts_before = poison_attempts(&app).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    fleet.revive();
    assert_eq!(
        poison_attempts(&app).await,
        attempts_before,
        "nothing runs a dead letter again"
    );
    assert_eq!(app.event_state("poison_0").await.0, "abandoned");
    let (ok, report) = run_settle(&fleet.config, &app.database_url(), &["verify"]).await;
    assert!(ok, "settle verify failed:\n{report}");
}

async fn poison_attempts(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id WHERE e.external_id = 'poison_0'",
    )
    .fetch_one(app.pg())
    .await
    .expect("attempts")
}

#[tokio::test]
async fn sigterm_lets_a_worker_finish_and_exit_zero() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record_charges(&app, "evt_", 50).await;
    let scratch = Scratch::new();
    let mut fleet = Fleet::new(&scratch, &app, FAST_WORKERS, vec![]);
    fleet.start(1);
    app.wait_settled(60).await;
    let mut worker = fleet.members.remove(0);
    let pid = worker.id().expect("pid").to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill");
    assert!(killed.success());
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
}

fn tail(logs: &str) -> String {
    let lines: Vec<&str> = logs.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
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
    let pooled = pooler.url_for(&app.database_url());
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
            ("WORKER_DATABASE_URL", &app.database_url()),
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
