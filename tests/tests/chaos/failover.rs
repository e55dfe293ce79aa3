//! Scenario `failover`: PostgreSQL as production runs it, a primary streaming to a standby, both
//! clusters of the test's own (`initdb`), behind one address (a TCP forwarder the test moves, as
//! a managed service moves its DNS name or VIP). `settle serve` and two workers drain a steady
//! stream of deliveries; mid-stream the primary is stopped at once (`pg_ctl stop -m immediate`),
//! the standby promoted and the address moved. Run with a synchronous standby (no acknowledged
//! delivery may be lost) and an asynchronous one, whose replication stream (it too goes through
//! a forwarder the test controls) is cut a moment before the primary stops, so that the
//! database loses what it acknowledged meanwhile: counted, and for a Stripe source with the
//! feed, booked again by the feed's next windows. Every delivery not answered 2xx is sent
//! again, as a provider does; one answered 2xx never is.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use providers::stripe::fake::FakeStripe;
use serde_json::json;
use tests::app::{
    AppOptions, FAST_WORKERS, STANDARD_SECRET, STRIPE_API_KEY, STRIPE_SECRET, charge, config_toml,
};
use tests::process::{Listen, Scratch, free_port, run_settle, spawn_settle};
use tests::sign::{now, standard_headers};
use tests::stripe::Txn;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::{report, scale, verify, wait_ready, wait_until};

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// Runs a PostgreSQL program as the `postgres` user (the server refuses to run as root).
fn as_postgres(program: &str, args: &[&str]) -> std::process::Output {
    let root = std::env::var("USER").map(|u| u == "root").unwrap_or(true);
    let path = format!("{BIN}/{program}");
    let mut command = match root {
        true => {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--", &path]);
            command
        }
        false => std::process::Command::new(&path),
    };
    let output = command.args(args).output().expect(program);
    assert!(
        output.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// One PostgreSQL cluster of the test's own, stopped when dropped.
struct Cluster {
    dir: PathBuf,
    port: u16,
}

impl Cluster {
    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn start(&self) {
        let log = self.dir.join("server.log").display().to_string();
        as_postgres("pg_ctl", &["-D", &self.data(), "-l", &log, "-w", "start"]);
    }

    fn stop_immediately(&self) {
        as_postgres(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    fn promote(&self) {
        as_postgres("pg_ctl", &["-D", &self.data(), "-w", "promote"]);
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{BIN}/pg_ctl")])
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A directory the `postgres` user owns.
fn postgres_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "settle-failover-{name}-{:016x}",
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let _ = std::process::Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(&dir)
        .status();
    dir
}

/// A primary (streaming to `standby`, synchronously when `synchronous`) and its standby,
/// both started and the standby streaming through the returned relay (an [`Address`]: moving
/// it away cuts the replication stream).
async fn primary_and_standby(synchronous: bool) -> (Cluster, Cluster, Address) {
    let primary = Cluster {
        dir: postgres_dir("primary"),
        port: free_port(),
    };
    as_postgres(
        "initdb",
        &[
            "-D",
            &primary.data(),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        ],
    );
    let conf = format!(
        "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{dir}'\n\
         wal_level = replica\nmax_wal_senders = 4\nmax_connections = 100\n\
         synchronous_commit = on\nsynchronous_standby_names = '{names}'\n",
        port = primary.port,
        dir = primary.dir.display(),
        names = if synchronous { "standby" } else { "" },
    );
    append(&Path::new(&primary.data()).join("postgresql.conf"), &conf);
    append(
        &Path::new(&primary.data()).join("pg_hba.conf"),
        "host replication all 127.0.0.1/32 trust\n",
    );
    primary.start();
    let standby = Cluster {
        dir: postgres_dir("standby"),
        port: free_port(),
    };
    as_postgres(
        "pg_basebackup",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &primary.port.to_string(),
            "-U",
            "postgres",
            "-D",
            &standby.data(),
            "-R",
            "-X",
            "stream",
        ],
    );
    // The base backup copied the primary's settings: once promoted, the standby must not wait
    // for a synchronous standby of its own (it has none).
    let conf = format!(
        "port = {port}\nunix_socket_directories = '{dir}'\ncluster_name = 'standby'\n\
         synchronous_standby_names = ''\n",
        port = standby.port,
        dir = standby.dir.display(),
    );
    append(&Path::new(&standby.data()).join("postgresql.conf"), &conf);
    // It streams through a relay (`-R` wrote the primary's own address into the auto file,
    // which a later line there overrides).
    let relay = Address::new(primary.port).await;
    append(
        &Path::new(&standby.data()).join("postgresql.auto.conf"),
        &format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=standby'\n",
            relay.port
        ),
    );
    standby.start();
    let pool = sqlx::PgPool::connect(&primary.url("postgres"))
        .await
        .expect("primary");
    let want = if synchronous { "sync" } else { "async" };
    wait_until(
        &pool,
        "the standby to stream",
        Duration::from_secs(60),
        &format!(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_replication
               WHERE application_name = 'standby' AND state = 'streaming' AND sync_state = '{want}')"
        ),
    )
    .await;
    pool.close().await;
    (primary, standby, relay)
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open");
    file.write_all(text.as_bytes()).expect("append");
}

/// The one address settle knows: forwards each connection to the port `target` holds; moving
/// it closes every forwarded connection (the old primary's are gone anyway).
struct Address {
    port: u16,
    target: Arc<AtomicU16>,
    connections: Arc<tokio::sync::Mutex<JoinSet<()>>>,
    _accepting: tokio::task::JoinHandle<()>,
}

impl Address {
    async fn new(target: u16) -> Address {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let target = Arc::new(AtomicU16::new(target));
        let connections = Arc::new(tokio::sync::Mutex::new(JoinSet::new()));
        let accepting = {
            let (target, connections) = (target.clone(), connections.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let port = target.load(Ordering::SeqCst);
                    connections.lock().await.spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                }
            })
        };
        Address {
            port,
            target,
            connections,
            _accepting: accepting,
        }
    }

    async fn move_to(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        self.connections.lock().await.abort_all();
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_synchronous_standby_loses_no_acknowledged_delivery() {
    let measured = failover(true).await;
    assert_eq!(measured.lost, 0, "a synchronous standby has every commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_an_asynchronous_standby_loses_what_it_never_received_and_the_feed_books_it_again()
 {
    let measured = failover(false).await;
    assert!(
        measured.lost > 0,
        "the stream was cut {} acknowledgements before the stop: the standby missed them",
        measured.acknowledged_while_cut
    );
    // What was acknowledged just before the cut may not have reached the standby yet either
    // (its replication lag); nothing acknowledged after the stop can be lost.
    assert!(
        measured.lost <= measured.acknowledged_before_stop,
        "only what was acknowledged before the stop is lost: {} lost, {} acknowledged before",
        measured.lost,
        measured.acknowledged_before_stop
    );
}

/// What one run measured.
struct Measured {
    /// Deliveries answered 2xx while the replication stream was cut (none when synchronous:
    /// it is never cut).
    acknowledged_while_cut: usize,
    /// Deliveries answered 2xx before the primary stopped.
    acknowledged_before_stop: usize,
    /// Deliveries answered 2xx that the promoted database does not hold.
    lost: usize,
}

/// The Stripe source whose feed books money with no webhook, from `fake`.
const FEED: &str = "stripe-fo";

/// Adds `count` balance transactions to `fake`, a few every 100 ms, created as they are added.
async fn money_moving(fake: Arc<FakeStripe>, count: usize) {
    for batch in 0..count.div_ceil(10) {
        let created = chrono::Utc::now().timestamp();
        for i in batch * 10..((batch + 1) * 10).min(count) {
            let id = format!("txn_fo_{i}");
            let mut transaction = Txn::charge(&id, "", 700 + (i % 50) as i64 * 10, 50);
            transaction["source"] = serde_json::Value::Null;
            transaction["created"] = json!(created);
            fake.add_transaction(None, transaction);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Entries the feed booked for the transactions of [`money_moving`].
async fn movements_booked(url: &str) -> i64 {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let booked = sqlx::query_scalar(
        "SELECT count(*) FROM journal_entries WHERE movement_id LIKE 'txn_fo_%'",
    )
    .fetch_one(&pool)
    .await
    .expect("movements");
    pool.close().await;
    booked
}

async fn failover(synchronous: bool) -> Measured {
    let events = scale(600, 5_000);
    let movements = scale(300, 2_000);
    let (primary, standby, relay) = primary_and_standby(synchronous).await;
    let address = Address::new(primary.port).await;
    let admin = sqlx::PgPool::connect(&address.url("postgres"))
        .await
        .expect("admin");
    sqlx::query("CREATE DATABASE settle")
        .execute(&admin)
        .await
        .expect("create database");
    admin.close().await;
    let url = address.url("settle");
    let scratch = Scratch::new();
    let fake = Arc::new(FakeStripe::start(STRIPE_API_KEY).await.expect("fake"));
    let options = AppOptions {
        workers: format!("{FAST_WORKERS}\nconcurrency = 16"),
        extra: format!(
            r#"
            [[sources]]
            name = "{FEED}"
            provider = "stripe"
            secrets = ["{STRIPE_SECRET}"]
            livemode = false
            api_key = "{STRIPE_API_KEY}"
            api_base = "{base}"
            feed_every_secs = 1
            "#,
            base = fake.url()
        ),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&url, &options));
    let listen = Listen::new();
    let _serve = spawn_settle(&scratch, "serve", &config, &url, &listen.args("serve"), &[]);
    wait_ready(&listen.ops_base()).await;
    // The workers connect as a worker's runtime role (README.md, Database roles), granted on the
    // primary (roles reach the standby with everything else); `serve` is the owner.
    let (granted, output) = run_settle(&config, &url, &["db", "grant-roles"]).await;
    assert!(granted, "grant-roles: {output}");
    let owner = sqlx::PgPool::connect(&url).await.expect("connect");
    sqlx::query("CREATE ROLE settle_t_worker LOGIN IN ROLE settle_worker")
        .execute(&owner)
        .await
        .expect("the workers' login role");
    owner.close().await;
    let worker_url = tests::db::as_role(&url, "settle_worker");
    let _workers: Vec<_> = (0..2)
        .map(|i| {
            spawn_settle(
                &scratch,
                &format!("worker-{i}"),
                &config,
                &worker_url,
                &["worker"],
                &[("SETTLE_MIGRATE_ON_START", "false")],
            )
        })
        .collect();

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let base = listen.base();
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    // The sender: each delivery sent until it is answered 2xx (a provider's retries), eight at
    // a time, paced so the failover falls in the middle of the stream.
    let sender = {
        let (http, base, acknowledged) = (http.clone(), base.clone(), acknowledged.clone());
        tokio::spawn(async move {
            let statuses: Vec<usize> = futures::stream::iter(0..events)
                .map(|i| {
                    let (http, base, acknowledged) =
                        (http.clone(), base.clone(), acknowledged.clone());
                    async move {
                        let id = format!("fo_{i}");
                        let body = charge(&format!("ch_fo_{i}"), "10.00", "0.30", "9.70");
                        let mut tries = 0;
                        loop {
                            tries += 1;
                            let mut request = http
                                .post(format!("{base}/webhooks/std"))
                                .header("content-type", "application/json")
                                .body(body.clone());
                            for (name, value) in
                                standard_headers(STANDARD_SECRET, &id, now(), body.as_bytes())
                            {
                                request = request.header(name, value);
                            }
                            if request.send().await.is_ok_and(|r| r.status().is_success()) {
                                acknowledged.fetch_add(1, Ordering::SeqCst);
                                return tries;
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                })
                .buffer_unordered(8)
                .collect()
                .await;
            statuses
        })
    };
    let money = tokio::spawn(money_moving(fake.clone(), movements));
    // The failover, once a third of the deliveries are acknowledged. An asynchronous standby
    // first loses its stream (a network partition between the two): what the primary commits
    // from then on, it never receives.
    while acknowledged.load(Ordering::SeqCst) < events / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let acknowledged_before = acknowledged.load(Ordering::SeqCst);
    let mut acknowledged_while_cut = 0;
    if !synchronous {
        relay.move_to(free_port()).await;
        while acknowledged.load(Ordering::SeqCst) < acknowledged_before + events / 10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The feed's windows posted meanwhile are lost too.
        tokio::time::sleep(Duration::from_secs(2)).await;
        acknowledged_while_cut = acknowledged.load(Ordering::SeqCst) - acknowledged_before;
    }
    let movements_on_primary = movements_booked(&address.url("settle")).await;
    primary.stop_immediately();
    let stopped_at = started.elapsed();
    standby.promote();
    let movements_on_promoted = movements_booked(&standby.url("settle")).await;
    address.move_to(standby.port).await;
    let moved_at = started.elapsed();
    let tries = tokio::time::timeout(Duration::from_secs(300), sender)
        .await
        .expect("every delivery acknowledged in time")
        .expect("sender");
    let resent = tries.iter().filter(|&&t| t > 1).count();

    let pool = sqlx::PgPool::connect(&standby.url("settle"))
        .await
        .expect("the promoted database");
    // Every delivery was acknowledged once; those the database lost are missing for good (the
    // provider will not send them again).
    let held: i64 =
        sqlx::query_scalar("SELECT count(*) FROM settlement_events WHERE source = 'std'")
            .fetch_one(&pool)
            .await
            .expect("events");
    wait_until(
        &pool,
        "every recorded delivery to post",
        Duration::from_secs(300),
        "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded' AND source = 'std')",
    )
    .await;
    // The feed lists again from the promoted database's own cursor: what the primary booked
    // and the standby never received is booked again, once.
    money.await.expect("money");
    let all = i64::try_from(movements).expect("count");
    wait_until(
        &pool,
        "every movement booked by the feed",
        Duration::from_secs(300),
        &format!(
            "SELECT count(DISTINCT movement_id) = {all} FROM journal_entries WHERE movement_id LIKE 'txn_fo_%'"
        ),
    )
    .await;
    let (booked, distinct): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT movement_id) FROM journal_entries WHERE movement_id LIKE 'txn_fo_%'",
    )
    .fetch_one(&pool)
    .await
    .expect("movements");
    assert_eq!((booked, distinct), (all, all), "every movement booked once");
    let (posted, entries, dead): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM settlement_events WHERE source = 'std' AND status = 'posted'),
                (SELECT count(*) FROM journal_entries j JOIN settlement_events e ON e.id = j.event_id
                 WHERE e.source = 'std'),
                (SELECT count(*) FROM dead_letters)",
    )
    .fetch_one(&pool)
    .await
    .expect("counts");
    let lost = events - usize::try_from(held).expect("count");
    assert_eq!(posted, held, "every delivery held posted");
    assert_eq!(entries, held, "one entry each, never two");
    assert_eq!(dead, 0, "an outage dead-letters nothing");
    let (equal, balance) = tests::process::run_settle(
        &config,
        &standby.url("settle"),
        &["reconcile", "balance", FEED],
    )
    .await;
    assert!(equal, "the feed's books equal Stripe's balance:\n{balance}");
    verify(&config, &standby.url("settle")).await;
    pool.close().await;
    report(
        &format!(
            "failover_{}",
            if synchronous {
                "synchronous"
            } else {
                "asynchronous"
            }
        ),
        json!({"events": events, "acknowledged_before_failover": acknowledged_before,
               "primary_stopped_at_ms": stopped_at.as_millis() as u64,
               "address_moved_at_ms": moved_at.as_millis() as u64,
               "deliveries_sent_again": resent,
               "acknowledged_while_the_stream_was_cut": acknowledged_while_cut,
               "lost_by_the_database": lost, "movements": movements,
               "movements_booked_on_the_primary_at_the_stop": movements_on_primary,
               "movements_booked_in_the_promoted_database_at_promotion": movements_on_promoted,
               "movements_the_database_lost_and_the_feed_booked_again": movements_on_primary - movements_on_promoted,
               "entries": entries, "dead_letters": dead, "verify": "passed"}),
    );
    Measured {
        acknowledged_while_cut,
        acknowledged_before_stop: acknowledged_before + acknowledged_while_cut,
        lost,
    }
}
