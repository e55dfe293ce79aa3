//! Scenario 4, PostgreSQL restart: under a steady load, the database server stops at once (`pg_ctl stop
//! -m immediate`, as a crash would) for a few seconds and starts again → the ingress answered
//! 503 and `/readyz` said so while it could not commit, every 2xx'd event is in the store, the
//! same settle process resumed posting, and after re-sending every non-2xx delivery the store
//! holds exactly the expected events. The server is a cluster of the test's own (initdb in a
//! scratch directory, its own port): the machine's shared server is never stopped.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ops::loadgen::LoadOptions;
use serde_json::json;
use tests::app::{AppOptions, FAST_WORKERS, STANDARD_SECRET, config_toml};
use tests::process::{Listen, Scratch, free_port, spawn_settle};

use crate::{counts, report, scale, verify, wait_ready};

/// A PostgreSQL cluster in a scratch directory, run as `postgres` when the tests run as root
/// (PostgreSQL refuses to run as root); stopped when dropped.
struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    scratch: Scratch,
}

impl Cluster {
    fn start() -> Cluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's binaries in /usr/lib/postgresql")
            .flatten()
            .map(|version| version.path().join("bin"))
            .find(|bin| bin.join("initdb").exists())
            .expect("initdb");
        let scratch = Scratch::new();
        let _ = Command::new("chmod")
            .arg("a+rwx")
            .arg(&scratch.dir)
            .status();
        let cluster = Cluster {
            data: scratch.dir.join("data"),
            port: free_port(),
            bin,
            scratch,
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data_str(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        cluster.pg_ctl_start();
        cluster
    }

    fn data_str(&self) -> String {
        self.data.display().to_string()
    }

    fn run(&self, program: &str, args: &[&str]) {
        let as_root = std::env::var("USER").map(|u| u == "root").unwrap_or(true);
        let program = self.bin.join(program);
        let mut command = if as_root {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            .current_dir(&self.scratch.dir)
            .output()
            .expect("run a PostgreSQL program");
        assert!(
            output.status.success(),
            "{} {args:?}: {}",
            program.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port,
            self.scratch.dir.display()
        );
        let log = self.scratch.dir.join("postgres.txt").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data_str(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "start",
            ],
        );
    }

    /// Stops the server at once: no checkpoint, connections cut (crash recovery on start).
    fn stop_immediately(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data_str(), "-m", "immediate", "-w", "stop"],
        );
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data_str(), "-m", "immediate", "stop"])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_crash_under_load_loses_no_acknowledged_event() {
    let events = scale(3_000, 6_000);
    let rate = 300;
    let cluster = Cluster::start();
    let url = cluster.url();
    let scratch = Scratch::new();
    let options = AppOptions {
        workers: FAST_WORKERS.to_owned(),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&url, &options));
    let listen = Listen::new();
    let mut serve = spawn_settle(&scratch, "serve", &config, &url, &listen.args("serve"), &[]);
    let base = listen.base();
    wait_ready(&listen.ops_base()).await;

    // Watch /readyz every 100 ms for the whole run.
    let watching = Arc::new(AtomicBool::new(true));
    let not_ready = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (watching, not_ready, ops) = (watching.clone(), not_ready.clone(), listen.ops_base());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            while watching.load(Ordering::SeqCst) {
                let ready = http
                    .get(format!("{ops}/readyz"))
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                    .map(|r| r.status().as_u16());
                if !matches!(ready, Ok(200)) {
                    not_ready.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let load = LoadOptions {
        url: base.clone(),
        source: "std".into(),
        provider: "standard".into(),
        secret: STANDARD_SECRET.into(),
        concurrency: 32,
        rate,
        count: events,
        duration_secs: None,
        redelivery_percent: 5,
        concurrent_duplicate_percent: 0,
        conflict_percent: 0,
        prefix: Some("crash".into()),
        resend_rounds: 120,
    };
    let running = tokio::spawn(ops::loadgen::run(load.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let down_at = Instant::now();
    cluster.stop_immediately();
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.pg_ctl_start();
    let down_ms = down_at.elapsed().as_millis();
    let loaded = running.await.expect("load task").expect("load");
    assert_eq!(
        loaded.unanswered, 0,
        "every delivery got a definite answer: {:?}",
        loaded.answers
    );
    let unavailable: usize = loaded
        .answers
        .iter()
        .filter(|(answer, _)| answer.starts_with("503"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        unavailable > 0,
        "the ingress answered 503 while the database was down: {:?}",
        loaded.answers
    );
    let store = ledger::Store::connect(&url, &ledger::StoreOptions::default())
        .await
        .expect("store");
    ops::loadgen::verify(&store, &load, &loaded)
        .await
        .expect("every 2xx'd event is in the store, exactly once");
    store.close().await;

    // The same process, never restarted, posts everything.
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    let ready_again = Instant::now();
    crate::wait_until(
        &pool,
        "every event to post after the restart",
        Duration::from_secs(300),
        "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded')",
    )
    .await;
    assert!(
        serve.try_wait().expect("poll").is_none(),
        "settle serve kept running"
    );
    watching.store(false, Ordering::SeqCst);
    watcher.await.expect("watcher");
    let not_ready = not_ready.load(Ordering::SeqCst);
    assert!(not_ready > 0, "/readyz reported the outage");
    wait_ready(&listen.ops_base()).await;
    let (stored, jobs, entries, posted, dead) = counts(&pool).await;
    let expected = i64::try_from(events).expect("count");
    assert_eq!(
        (stored, jobs, entries, posted, dead),
        (expected, expected, expected, expected, 0)
    );
    pool.close().await;
    verify(&config, &url).await;
    serve.start_kill().expect("stop serve");
    report(
        "postgres_restart",
        json!({"events": events, "rate_per_sec": rate, "down_ms": down_ms,
               "answers": loaded.answers, "answered_503": unavailable,
               "readyz_not_ready_polls": not_ready, "stored": stored, "entries": entries,
               "posted": posted, "dead_letters": dead,
               "drained_after_load_ms": ready_again.elapsed().as_millis(),
               "serve_restarted": false, "verify": "passed"}),
    );
}
