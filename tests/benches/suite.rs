//! The benchmark suite, in one go on this machine: `cargo bench --workspace --bench suite`
//! (`--workspace` so the bench and the `settle` binary it starts share one feature resolution).
//!
//! 1. Ingress: recorded deliveries/s and latency at 1, 8, 32 and 64 senders against a release
//!    `settle ingress`, beside pgbench running the same SQL (the event insert and its job insert
//!    in one statement) at the same client counts.
//! 2. Drain: backlogs of 20,000 and 200,000 events written through a `settle ingress`, drained
//!    by one and by two `settle worker` processes at the product's defaults, with the rate of
//!    each tenth of the backlog, beside graphile-worker 0.17's default drain of as many no-op
//!    jobs; on this machine's cluster and on a cluster the benchmark starts itself with
//!    production settings (autovacuum, fsync and synchronous commit on). Also the bare apalis
//!    queue draining no-op jobs at the same batch and concurrency.
//! 3. End to end at a steady 200 deliveries/s: recorded -> posted latency.
//! 4. Peak RSS of the settle processes, and the ingress and drain figures on SQLite.
//! 5. Stripe: a backlog of real-shaped `charge.succeeded` events written through the ingress,
//!    drained by one `settle worker` at the product's defaults fetching each balance
//!    transaction from a fake Stripe API that answers in 0 ms and in 50 ms.
//!
//! 6. Adyen: one settlement details report. 7. Stripe's feed: a backfill and a steady stream
//!    against a fake Stripe API enforcing Stripe's rate limits. Finance reads over a seeded journal
//!    of a large merchant's size (`BENCH_PARTS=finance`).
//!
//! `settle verify` runs on every store a benchmark filled. Results go to
//! `target/bench/results.json` and to stdout.

use std::path::Path;
use std::time::{Duration, Instant};

use ops::loadgen::LoadOptions;
use providers::stripe::fake::RateLimits;
use serde_json::{Value, json};
use tests::TestDb;
use tests::app::{AppOptions, STANDARD_SECRET, config_toml};
use tests::db::SqliteFile;
use tests::process::{Listen, Scratch, spawn_settle};
use tokio::process::Child;

const BACKLOG: i64 = 50_000;

fn load(url: &str, concurrency: usize, count: usize, rate: u32) -> LoadOptions {
    LoadOptions {
        url: url.to_owned(),
        source: "std".into(),
        provider: "standard".into(),
        secret: STANDARD_SECRET.into(),
        concurrency,
        rate,
        count,
        duration_secs: None,
        redelivery_percent: 0,
        concurrent_duplicate_percent: 0,
        conflict_percent: 0,
        prefix: None,
        resend_rounds: 0,
    }
}

/// Peak resident set of a process, in KiB (`VmHWM`).
fn peak_rss_kib(child: &Child) -> i64 {
    let Some(pid) = child.id() else { return 0 };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .and_then(|line| {
            line.split_whitespace()
                .nth(1)
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

async fn wait_ready(base: &str) {
    let http = reqwest::Client::new();
    for _ in 0..600 {
        if http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("settle did not become ready at {base}");
}

fn bench_config(scratch: &Scratch, url: &str, extra: &str, workers: &str) -> std::path::PathBuf {
    let options = AppOptions {
        extra: extra.to_owned(),
        workers: workers.to_owned(),
        ..AppOptions::default()
    };
    scratch.write("settle.toml", &config_toml(url, &options))
}

/// `settle verify` (the binary) on the store a benchmark filled; the suite stops if it fails.
async fn verify(url: &str) -> bool {
    let scratch = Scratch::new();
    let config = bench_config(&scratch, url, "migrate_on_start = false", "");
    let (ok, report) = tests::process::run_settle(&config, url, &["verify"]).await;
    assert!(ok, "settle verify failed on {url}:\n{report}");
    println!("  settle verify: every invariant holds");
    ok
}

/// Waits until `url` holds `entries` journal entries, looking every 200 ms over one connection
/// (a connection per look would cost the machine a backend start and a TLS handshake each).
async fn wait_for_entries(url: &str, entries: i64, timeout: Duration) {
    enum Pool {
        Pg(sqlx::PgPool),
        Sqlite(sqlx::SqlitePool),
    }
    const SQL: &str = "SELECT count(*) FROM journal_entries";
    let pool = if url.starts_with("sqlite") {
        Pool::Sqlite(sqlx::SqlitePool::connect(url).await.expect("sqlite"))
    } else {
        let options = sqlx::postgres::PgPoolOptions::new().max_connections(1);
        Pool::Pg(options.connect(url).await.expect("pg"))
    };
    let deadline = Instant::now() + timeout;
    loop {
        let n: i64 = match &pool {
            Pool::Pg(pool) => sqlx::query_scalar(SQL).fetch_one(pool).await,
            Pool::Sqlite(pool) => sqlx::query_scalar(SQL).fetch_one(pool).await,
        }
        .expect("count");
        if n >= entries {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "posting stalled at {n} of {entries}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match pool {
        Pool::Pg(pool) => pool.close().await,
        Pool::Sqlite(pool) => pool.close().await,
    }
}

/// 1 (and 4 on `url`): the ingress at each concurrency; returns rows and the peak RSS.
async fn ingress(url: &str, levels: &[(usize, usize)]) -> (Vec<Value>, i64) {
    let scratch = Scratch::new();
    // The product's default pool (`connections_max = 16`): on two cores more backends only
    // contend (measured: 64 connections gave ~12 % fewer deliveries/s at 32 senders).
    let config = bench_config(&scratch, url, "", "");
    let listen = Listen::new();
    let role = if url.starts_with("sqlite") {
        "serve"
    } else {
        "ingress"
    };
    let process = spawn_settle(&scratch, "ingress", &config, url, &listen.args(role), &[]);
    let base = listen.base();
    wait_ready(&listen.ops_base()).await;
    let mut rows = Vec::new();
    for &(concurrency, deliveries) in levels {
        let report = ops::loadgen::run(load(&base, concurrency, deliveries, 0))
            .await
            .expect("load");
        assert_eq!(
            report.count("200 recorded"),
            deliveries,
            "{:?}",
            report.answers
        );
        rows.push(
            json!({"senders": concurrency, "per_sec": report.throughput_per_sec,
            "p50_ms": ms(report.latency_us_p50), "p95_ms": ms(report.latency_us_p95),
            "p99_ms": ms(report.latency_us_p99), "max_ms": ms(report.latency_us_max)}),
        );
        println!(
            "  ingress {concurrency:>2} senders: {:>6}/s  p50 {}  p95 {}  p99 {}  max {}",
            report.throughput_per_sec,
            ms(report.latency_us_p50),
            ms(report.latency_us_p95),
            ms(report.latency_us_p99),
            ms(report.latency_us_max)
        );
    }
    let rss = peak_rss_kib(&process);
    drop(process);
    (rows, rss)
}

fn ms(us: u64) -> String {
    format!("{}.{:02}", us / 1000, us % 1000 / 10)
}

/// pgbench running the ingress' statement (with its own job type, so no worker takes them).
fn pgbench(db: &TestDb, scratch: &Scratch, clients: usize) -> i64 {
    let script = scratch.write(
        "ingress.sql",
        r#"WITH new_event AS (
    INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint, facts, validation_error, payload, job_id)
    VALUES ('pgbench', 'e' || nextval('pgbench_ids'), 'recorded', 'charge_settled', 'ch_pgbench', repeat('a', 64),
            '{"kind":"charge_settled","movement_id":"ch_pgbench","occurred_at":"2026-11-30T11:59:00Z","currency":"USD","gross":"10.00","fee":"0.30","net":"9.70"}'::jsonb,
            NULL, '{"type":"settlement.charge_settled","data":{"movement_id":"ch_pgbench","currency":"USD","gross":"10.00"}}',
            md5(random()::text))
    ON CONFLICT (source, external_id) DO NOTHING
    RETURNING id, job_id
), new_job AS (
    INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
    SELECT job_id, 'bench::pgbench', convert_to(json_build_object('event_id', id)::text, 'UTF8'), 'Pending', 0, 1000000, now()
    FROM new_event
)
SELECT id FROM new_event;
"#,
    );
    let output = std::process::Command::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-T",
            "10",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
        ])
        .arg(format!("-c{clients}"))
        .arg(format!("-j{}", clients.min(4)))
        .arg("-f")
        .arg(&script)
        .arg(&db.name)
        .output()
        .expect("pgbench");
    let text = String::from_utf8_lossy(&output.stdout);
    let tps = text
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|t| t.split('.').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    println!("  pgbench {clients:>2} clients: {tps:>6}/s");
    tps
}

/// Fills the store with `BACKLOG` recorded events and their jobs, as the ingress writes them.
async fn backlog(url: &str) {
    let store = ledger::Store::connect(url, &ledger::StoreOptions::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store.close().await;
    let facts = r#"'{"kind":"charge_settled","movement_id":"ch_' || n || '","occurred_at":"2026-11-30T11:59:00Z","currency":"USD","gross":"10.00","fee":"0.30","net":"9.70","payout_id":"po_1"}'"#;
    if url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(url).await.expect("sqlite");
        let sql = format!(
            "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {BACKLOG})
             INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint, facts, payload, job_id, received_at, status_changed_at)
             SELECT 'std', 'b' || n, 'recorded', 'charge_settled', 'ch_' || n, printf('%064d', n), {facts}, '{{}}', '0' || printf('%025d', n),
                    strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'), strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') FROM s;
             INSERT INTO Jobs (job, id, job_type, status, attempts, max_attempts, run_at, priority)
             SELECT CAST(json_object('event_id', id) AS BLOB), job_id, 'settle::PostSettlement', 'Pending', 0, 1000000,
                    CAST(strftime('%s', 'now') AS INTEGER), 0 FROM settlement_events;"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .expect("sqlite backlog");
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(url).await.expect("pg");
        let sql = format!(
            "INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint, facts, payload, job_id)
             SELECT 'std', 'b' || n, 'recorded', 'charge_settled', 'ch_' || n, lpad(n::text, 64, '0'), ({facts})::jsonb, '{{}}', apalis.generate_ulid()
             FROM generate_series(1, {BACKLOG}) n;
             INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
             SELECT job_id, 'settle::PostSettlement', convert_to(json_build_object('event_id', id)::text, 'UTF8'), 'Pending', 0, 1000000, now()
             FROM settlement_events;
             ANALYZE settlement_events;
             ANALYZE apalis.jobs;"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .expect("pg backlog");
        pool.close().await;
    }
}

/// 2: drains the backlog with `processes` worker processes (or `serve` on SQLite); postings/s.
async fn drain(url: &str, processes: usize, workers: &str) -> (i64, i64) {
    backlog(url).await;
    let scratch = Scratch::new();
    let config = bench_config(&scratch, url, "migrate_on_start = false", workers);
    let started = Instant::now();
    let mut fleet = Vec::new();
    for i in 0..processes {
        let args: Vec<String> = if url.starts_with("sqlite") {
            Listen::new()
                .args("serve")
                .iter()
                .map(|arg| arg.to_string())
                .collect()
        } else {
            vec!["worker".into()]
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fleet.push(spawn_settle(
            &scratch,
            &format!("worker-{i}"),
            &config,
            url,
            &args,
            &[],
        ));
    }
    wait_for_entries(url, BACKLOG, Duration::from_secs(900)).await;
    let elapsed = started.elapsed();
    let rss = fleet.iter().map(peak_rss_kib).max().unwrap_or(0);
    drop(fleet);
    let per_sec = (BACKLOG as u128 * 1000 / elapsed.as_millis().max(1)) as i64;
    println!(
        "  drain {processes} process(es): {per_sec}/s ({} ms), peak RSS {} MiB",
        elapsed.as_millis(),
        rss / 1024
    );
    (per_sec, rss)
}

/// Writes `events` standard events through a `settle ingress` (32 senders), as a backlog
/// arrives after an outage; answers the recorded deliveries per second.
async fn backlog_through_ingress(url: &str, events: usize) -> i64 {
    let scratch = Scratch::new();
    let config = bench_config(&scratch, url, "", "");
    let listen = Listen::new();
    let ingress = spawn_settle(
        &scratch,
        "ingress",
        &config,
        url,
        &listen.args("ingress"),
        &[],
    );
    let base = listen.base();
    wait_ready(&listen.ops_base()).await;
    let report = ops::loadgen::run(load(&base, 32, events, 0))
        .await
        .expect("load");
    assert_eq!(report.count("200 recorded"), events, "{:?}", report.answers);
    drop(ingress);
    report.throughput_per_sec as i64
}

/// One drain, watched: the whole rate (from the processes' start), the time to the first
/// posting (start-up), and the rate of each tenth of the backlog (from the first posting, so
/// start-up does not weigh on the first tenth).
struct DrainRun {
    per_sec: i64,
    elapsed_ms: u128,
    startup_ms: u128,
    tenths: Vec<i64>,
}

impl DrainRun {
    fn last_over_first(&self) -> i64 {
        match (self.tenths.first(), self.tenths.last()) {
            (Some(&first), Some(&last)) if first > 0 => last * 100 / first,
            _ => 0,
        }
    }
}

/// Drains `url`'s backlog of `events` with `processes` `settle worker` processes at the
/// product's defaults (an empty `[workers]` table), noting when each tenth of it was posted
/// (the journal's id sequence, read every 100 ms over one connection; ids are taken as entries
/// are written, a moment before their commit).
async fn drain_measured(url: &str, events: usize, processes: usize) -> DrainRun {
    let scratch = Scratch::new();
    let config = bench_config(&scratch, url, "migrate_on_start = false", "");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("pg");
    let started = Instant::now();
    let fleet: Vec<Child> = (0..processes)
        .map(|i| {
            spawn_settle(
                &scratch,
                &format!("worker-{i}"),
                &config,
                url,
                &["worker"],
                &[],
            )
        })
        .collect();
    let tenth = (events / 10).max(1) as i64;
    let mut first: Option<Duration> = None;
    let mut crossed = Vec::with_capacity(10);
    let deadline = started + Duration::from_secs(1800);
    while crossed.len() < 10 {
        let written: i64 = sqlx::query_scalar(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM journal_entries_id_seq",
        )
        .fetch_one(&pool)
        .await
        .expect("sequence");
        if written > 0 && first.is_none() {
            first = Some(started.elapsed());
        }
        while crossed.len() < 10 && written >= tenth * (crossed.len() as i64 + 1) {
            crossed.push(started.elapsed());
        }
        assert!(
            Instant::now() < deadline,
            "the drain stalled at {written} of {events}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pool.close().await;
    wait_for_entries(url, events as i64, Duration::from_secs(120)).await;
    let elapsed = started.elapsed();
    drop(fleet);
    let mut tenths = Vec::with_capacity(10);
    let startup = first.unwrap_or_default();
    let mut previous = startup;
    for at in crossed {
        let took = at.saturating_sub(previous).as_millis().max(1);
        tenths.push((tenth as u128 * 1000 / took) as i64);
        previous = at;
    }
    DrainRun {
        per_sec: (events as u128 * 1000 / elapsed.as_millis().max(1)) as i64,
        elapsed_ms: elapsed.as_millis(),
        startup_ms: startup.as_millis(),
        tenths,
    }
}

/// graphile-worker 0.17 (installed with npm into target/bench/graphile on first use) draining
/// `jobs` no-op jobs at `concurrency` on `url`: jobs per second.
fn graphile_drain(url: &str, jobs: usize, concurrency: usize) -> i64 {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/graphile");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench/graphile");
    std::fs::create_dir_all(&dir).expect("graphile dir");
    for file in ["package.json", "drain.mjs"] {
        std::fs::copy(source.join(file), dir.join(file)).expect("copy the graphile bench");
    }
    if !dir.join("node_modules/graphile-worker").exists() {
        let status = std::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .expect("npm (Node.js) is installed");
        assert!(status.success(), "npm install graphile-worker");
    }
    let output = std::process::Command::new("node")
        .arg("drain.mjs")
        .arg(url)
        .arg(jobs.to_string())
        .arg(concurrency.to_string())
        .current_dir(&dir)
        .output()
        .expect("node");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| {
            panic!(
                "graphile drain printed nothing: {text} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let result: Value = serde_json::from_str(line).expect("graphile drain's JSON");
    result["per_sec"].as_i64().unwrap_or(0)
}

/// 2 (baseline): the same number of no-op jobs through the same apalis setup.
async fn bare_queue(db: &TestDb, batch_size: usize, concurrency: usize) -> i64 {
    use apalis::prelude::WorkerBuilderExt;
    use apalis_core::worker::builder::WorkerBuilder;
    use apalis_core::worker::context::WorkerContext;
    let pool = db.pool().await;
    let queue = "bench::Noop";
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
         SELECT apalis.generate_ulid(), '{queue}', convert_to('{{}}', 'UTF8'), 'Pending', 0, 25, now() - interval '1 second'
         FROM generate_series(1, {BACKLOG}); ANALYZE apalis.jobs;"
    )))
    .execute(&pool)
    .await
    .expect("no-op jobs");
    let config = apalis_postgres::Config::default()
        .queue(queue)
        .batch_size(batch_size);
    let storage = apalis_postgres::PostgresStorage::<Value>::new(&pool)
        .with_config(config)
        .with_pubsub();
    async fn noop(_: Value, _: WorkerContext) -> Result<(), apalis_core::error::BoxDynError> {
        Ok(())
    }
    let worker = WorkerBuilder::new(format!("bench-noop-{}", ulid::Ulid::generate()))
        .backend(storage)
        .concurrency(concurrency)
        .build(noop);
    let started = Instant::now();
    let stop = tokio_util::sync::CancellationToken::new();
    let signal = stop.clone();
    let running = tokio::spawn(worker.run_until(async move {
        signal.cancelled().await;
        Ok::<(), std::io::Error>(())
    }));
    loop {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status <> 'Done'",
        )
        .bind(queue)
        .fetch_one(&pool)
        .await
        .expect("count");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    let _ = running.await;
    let per_sec = (BACKLOG as u128 * 1000 / elapsed.as_millis().max(1)) as i64;
    println!(
        "  bare queue (no-op jobs, batch {batch_size}, concurrency {concurrency}): {per_sec}/s"
    );
    per_sec
}

/// The value at quantile `q` (0-100) of sorted values.
fn quantile(sorted: &[u64], q: usize) -> u64 {
    sorted
        .get(sorted.len().saturating_sub(1) * q / 100)
        .copied()
        .unwrap_or(0)
}

/// Hears each posting as it commits: a bench-only trigger NOTIFYs the event's external id when
/// its status becomes `posted`, and PostgreSQL delivers a NOTIFY when its transaction commits.
async fn hear_postings(
    url: &str,
    expected: usize,
) -> tokio::task::JoinHandle<Vec<(String, Instant)>> {
    let pool = sqlx::PgPool::connect(url).await.expect("pg");
    sqlx::raw_sql(
        "CREATE FUNCTION bench_posted() RETURNS trigger AS $$
         BEGIN PERFORM pg_notify('bench_posted', NEW.external_id); RETURN NULL; END $$ LANGUAGE plpgsql;
         CREATE TRIGGER bench_posted AFTER UPDATE OF status ON settlement_events FOR EACH ROW
         WHEN (NEW.status = 'posted' AND OLD.status <> 'posted') EXECUTE FUNCTION bench_posted();",
    )
    .execute(&pool)
    .await
    .expect("bench trigger");
    pool.close().await;
    let mut listener = sqlx::postgres::PgListener::connect(url)
        .await
        .expect("listener");
    listener.listen("bench_posted").await.expect("listen");
    tokio::spawn(async move {
        let mut heard = Vec::with_capacity(expected);
        while heard.len() < expected {
            match tokio::time::timeout(Duration::from_secs(120), listener.recv()).await {
                Ok(Ok(notification)) => {
                    heard.push((notification.payload().to_owned(), Instant::now()));
                }
                _ => break,
            }
        }
        heard
    })
}

/// A ready `settle serve` on `url` with the product's defaults: its scratch directory (logs),
/// the process (killed when dropped) and its base URL.
async fn serve(url: &str) -> (Scratch, Child, String) {
    let scratch = Scratch::new();
    let config = bench_config(&scratch, url, "", "");
    let listen = Listen::new();
    let process = spawn_settle(&scratch, "serve", &config, url, &listen.args("serve"), &[]);
    let base = listen.base();
    wait_ready(&listen.ops_base()).await;
    (scratch, process, base)
}

/// 3: `settle serve` at a steady rate: from each 2xx the sender got to its posting's commit
/// (heard by a listener), and from the store's own stamps.
async fn end_to_end(url: &str, rate: u32, seconds: u32) -> (Value, i64) {
    let (_scratch, process, base) = serve(url).await;
    let count_events = (rate * seconds) as usize;
    let heard = hear_postings(url, count_events).await;
    let report = ops::loadgen::run(load(&base, 32, count_events, rate))
        .await
        .expect("load");
    assert_eq!(report.count("200 recorded"), count_events);
    let heard = heard.await.expect("listener");
    let mut lags_us: Vec<u64> = heard
        .iter()
        .filter_map(|(external_id, posted)| {
            let event = report.event_number(external_id)?;
            let acknowledged = (*report.acknowledged_at.get(event)?)?;
            Some(posted.saturating_duration_since(acknowledged).as_micros() as u64)
        })
        .collect();
    assert_eq!(lags_us.len(), count_events, "every event heard posted");
    lags_us.sort_unstable();
    let (p50, p95, p99, max) = (
        quantile(&lags_us, 50),
        quantile(&lags_us, 95),
        quantile(&lags_us, 99),
        quantile(&lags_us, 100),
    );
    let pool = sqlx::PgPool::connect(url).await.expect("pg");
    let (stamp_p50, stamp_p99): (i64, i64) = sqlx::query_as(
        "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY lag)::bigint, percentile_disc(0.99) WITHIN GROUP (ORDER BY lag)::bigint
         FROM (SELECT extract(epoch FROM je.recorded_at - e.received_at) * 1000000 AS lag
               FROM settlement_events e JOIN journal_entries je ON je.id = e.posted_entry_id) lags",
    )
    .fetch_one(&pool)
    .await
    .expect("lags");
    pool.close().await;
    let rss = peak_rss_kib(&process);
    drop(process);
    println!(
        "  end to end at {rate}/s: 2xx -> posting committed p50 {} ms, p95 {} ms, p99 {} ms, max {} ms; ingress p99 {} ms",
        ms(p50),
        ms(p95),
        ms(p99),
        ms(max),
        ms(report.latency_us_p99)
    );
    println!(
        "  (store stamps, recorded -> posting began: p50 {} ms, p99 {} ms)",
        ms(stamp_p50 as u64),
        ms(stamp_p99 as u64)
    );
    (
        json!({"rate_per_sec": rate, "p50_ms": ms(p50), "p95_ms": ms(p95), "p99_ms": ms(p99), "max_ms": ms(max),
            "ingress_p99_ms": ms(report.latency_us_p99),
            "store_stamps_p50_ms": ms(stamp_p50 as u64), "store_stamps_p99_ms": ms(stamp_p99 as u64)}),
        rss,
    )
}

/// 1 (and 4): `settle serve`, its workers posting beside the ingress, under a provider's
/// mix of redeliveries, racing duplicates and conflicts: the process the RSS target names.
async fn serve_under_mixed_load(url: &str, senders: usize, events: usize) -> (Value, i64) {
    let (_scratch, process, base) = serve(url).await;
    let options = LoadOptions {
        redelivery_percent: 20,
        concurrent_duplicate_percent: 5,
        conflict_percent: 1,
        resend_rounds: 3,
        ..load(&base, senders, events, 0)
    };
    let report = ops::loadgen::run(options.clone()).await.expect("load");
    assert_eq!(report.unanswered, 0, "{:?}", report.answers);
    let store = ledger::Store::connect(url, &ledger::StoreOptions::default())
        .await
        .expect("connect");
    ops::loadgen::verify(&store, &options, &report)
        .await
        .expect("the store holds exactly the run's events and conflicts");
    store.close().await;
    wait_for_entries(url, events as i64, Duration::from_secs(300)).await;
    let rss = peak_rss_kib(&process);
    drop(process);
    println!(
        "  settle serve {senders} senders, 20 % redelivered, 5 % racing, 1 % conflicting: {} deliveries ({} events) at {}/s  p50 {}  p95 {}  p99 {}  max {}; peak RSS {} MiB",
        report.deliveries,
        report.events,
        report.throughput_per_sec,
        ms(report.latency_us_p50),
        ms(report.latency_us_p95),
        ms(report.latency_us_p99),
        ms(report.latency_us_max),
        rss / 1024
    );
    let answers: serde_json::Map<String, Value> = report
        .answers
        .iter()
        .map(|(answer, n)| (answer.clone(), json!(n)))
        .collect();
    (
        json!({"senders": senders, "deliveries": report.deliveries, "events": report.events,
            "per_sec": report.throughput_per_sec, "p50_ms": ms(report.latency_us_p50),
            "p95_ms": ms(report.latency_us_p95), "p99_ms": ms(report.latency_us_p99),
            "max_ms": ms(report.latency_us_max), "answers": answers, "peak_rss_mib": rss / 1024}),
        rss,
    )
}

/// 5: a backlog of `events` real-shaped Stripe `charge.succeeded` events, written through a
/// `settle ingress`, drained by one `settle worker` at the product's defaults; every balance
/// transaction fetched from a fake Stripe API answering after `latency`. The source's request
/// budget is raised out of the way (the fake is not Stripe: Stripe allows 25 retrievals a
/// second per endpoint, which would bound any drain at 25/s); everything else is default.
///
/// With `limits`, the source's budget is Stripe's (`RateLimits`: in all and per endpoint) and
/// the fake enforces them: the drain runs at the budget's pace, its jobs paced in the queue.
async fn stripe_drain(
    latency: Duration,
    events: usize,
    limits: Option<RateLimits>,
) -> (i64, u64, bool) {
    let db = TestDb::create().await;
    let fake = tests::app::fake_stripe().await;
    fake.set_latency(latency);
    let (per_sec, per_endpoint) = limits.map_or((100_000, 100_000), |limits| {
        fake.enforce(limits);
        (limits.per_sec, limits.endpoint_per_sec)
    });
    let scratch = Scratch::new();
    let options = AppOptions {
        workers: String::new(),
        stripe: Some(fake.clone()),
        ..AppOptions::default()
    };
    let config = config_toml(&db.url, &options)
        .replace(
            "api_requests_per_sec = 2000",
            &format!("api_requests_per_sec = {per_sec}"),
        )
        .replace(
            "api_endpoint_requests_per_sec = 2000",
            &format!("api_endpoint_requests_per_sec = {per_endpoint}"),
        )
        .replace("api_request_timeout_ms = 2000", "");
    let config = scratch.write("settle.toml", &config);
    let (ingress, base) = ingress_process(&scratch, &config, &db.url).await;
    let report = ops::loadgen::run(LoadOptions {
        source: "stripe".into(),
        provider: "stripe".into(),
        secret: tests::app::STRIPE_SECRET.into(),
        ..load(&base, 32, events, 0)
    })
    .await
    .expect("load");
    assert_eq!(report.count("200 recorded"), events, "{:?}", report.answers);
    drop(ingress);
    let started = Instant::now();
    let worker = spawn_settle(&scratch, "worker", &config, &db.url, &["worker"], &[]);
    wait_for_entries(&db.url, events as i64, Duration::from_secs(1800)).await;
    let elapsed = started.elapsed();
    let rss = peak_rss_kib(&worker);
    drop(worker);
    let per_sec = (events as u128 * 1000 / elapsed.as_millis().max(1)) as i64;
    println!(
        "  Stripe API answering in {} ms{}: {per_sec} postings/s ({} ms for {events}), {} requests ({} answered 429 for the limit), worker peak RSS {} MiB",
        latency.as_millis(),
        limits.map_or(String::new(), |l| format!(
            " at its limits ({}/s, {}/s per endpoint)",
            l.per_sec, l.endpoint_per_sec
        )),
        elapsed.as_millis(),
        fake.requests(),
        fake.rate_limited(),
        rss / 1024
    );
    let verified = verify(&db.url).await;
    (per_sec, fake.requests(), verified)
}

/// A `settle ingress` process on a free port, ready: the process and its base URL.
async fn ingress_process(scratch: &Scratch, config: &Path, db_url: &str) -> (Child, String) {
    let listen = Listen::new();
    let ingress = spawn_settle(
        scratch,
        "ingress",
        config,
        db_url,
        &listen.args("ingress"),
        &[],
    );
    let base = listen.base();
    wait_ready(&listen.ops_base()).await;
    (ingress, base)
}

async fn part_stripe(results: &mut serde_json::Map<String, Value>) {
    let events = std::env::var("BENCH_STRIPE_EVENTS")
        .ok()
        .map_or(50_000, |v| v.parse().expect("a positive integer"));
    println!(
        "\n5. Stripe drain (PostgreSQL, {events} charge.succeeded events through the ingress, one worker at the defaults)"
    );
    let mut rows = Vec::new();
    for latency_ms in [0, 50] {
        let (per_sec, requests, verified) =
            stripe_drain(Duration::from_millis(latency_ms), events, None).await;
        rows.push(
            json!({"api_latency_ms": latency_ms, "postings_per_sec": per_sec,
            "api_requests": requests, "verified": verified}),
        );
    }
    // At Stripe's live limits: 25 retrievals a second to the one endpoint, of which 24 are
    // spent, is 24 postings a second at best.
    let limited = std::env::var("BENCH_STRIPE_LIMITED_EVENTS")
        .ok()
        .map_or(3_000, |v| v.parse().expect("a positive integer"));
    let (per_sec, requests, verified) =
        stripe_drain(Duration::from_millis(50), limited, Some(RateLimits::LIVE)).await;
    rows.push(
        json!({"api_latency_ms": 50, "limits": "live", "events": limited,
        "postings_per_sec": per_sec, "api_requests": requests, "verified": verified}),
    );
    results.insert("stripe_drain".into(), json!(rows));
}

/// A Stripe balance transaction of a mix like a platform's: charges with Stripe's fee, refunds,
/// application fees, transfers, network costs, partial-capture reversals, a manual payout now and
/// then; all in USD.
fn mixed_transaction(i: usize, created: i64) -> Value {
    use tests::stripe::Txn;
    let id = format!("txn_feed_{i}");
    let (category, amount, fee, source) = match i % 50 {
        0..=29 => (
            "charge",
            1_000 + (i % 97) as i64 * 100,
            59,
            format!("ch_{i}"),
        ),
        30..=34 => ("refund", -500, 0, format!("re_{i}")),
        35..=39 => ("platform_earning", 150, 0, format!("fee_{i}")),
        40..=43 => ("transfer", -700, 0, format!("tr_{i}")),
        44..=47 => ("network_cost", -12, 0, String::new()),
        48 => ("partial_capture_reversal", -300, 0, format!("ch_{i}")),
        _ if i % 5_000 == 49 => ("payout", -20_000, 0, format!("po_{i}")),
        _ => ("charge", 2_500, 103, format!("ch_{i}")),
    };
    let fees = [("stripe_fee", fee)];
    let mut transaction = Txn {
        id: &id,
        category,
        transaction_type: category,
        amount,
        fees: if fee == 0 { &[] } else { &fees },
        currency: "usd",
        source: &source,
        exchange_rate: None,
    }
    .value();
    if source.is_empty() {
        transaction["source"] = Value::Null;
    }
    transaction["created"] = json!(created);
    transaction
}

/// Where a backfill's time went: when its windows and its opening were recorded and posted
/// (seconds from the command's start), and the fake's requests in each second.
async fn print_backfill_timeline(
    db: &TestDb,
    fake: &providers::stripe::fake::FakeStripe,
    started_at: chrono::DateTime<chrono::Utc>,
) {
    let pool = db.pool().await;
    let events: Vec<(
        String,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    )> = sqlx::query_as(
        "SELECT external_id, received_at, status_changed_at FROM settlement_events
             WHERE kind IN ('feed.window', 'feed.opening') AND status = 'posted'
             ORDER BY status_changed_at",
    )
    .fetch_all(&pool)
    .await
    .expect("events");
    let ms = |at: chrono::DateTime<chrono::Utc>| (at - started_at).num_milliseconds();
    for (key, recorded, posted) in events {
        println!(
            "    {key}: recorded at {} ms, posted at {} ms",
            ms(recorded),
            ms(posted)
        );
    }
    let seconds = fake.requests_by_second(started_at.timestamp().max(0) as u64);
    println!("    requests in each second from the start: {seconds:?}");
}

/// 7: Stripe's feed against a fake Stripe API that enforces Stripe's published test-mode limits
/// (25 requests a second in all and per endpoint; 429 with `Retry-After` beyond): a backfill of
/// `transactions` balance transactions over five days by one `settle worker` at the defaults
/// (each window lists 100 a request), then `settle reconcile balance` and `coverage`; then a
/// catch-up: the worker down while `catch_up` movements appear, the time from its restart to the
/// last booked; then a steady 200 movements/s with a webhook each for `steady_secs`, the lag from a transaction's
/// appearance at Stripe to its entry's commit.
async fn part_feed(results: &mut serde_json::Map<String, Value>) {
    let transactions = std::env::var("BENCH_FEED_TRANSACTIONS")
        .ok()
        .map_or(50_000, |v| v.parse().expect("a positive integer"));
    let steady_secs: u64 = std::env::var("BENCH_FEED_STEADY_SECS")
        .ok()
        .map_or(60, |v| v.parse().expect("a positive integer"));
    println!(
        "\n7. Stripe feed (PostgreSQL, {transactions} balance transactions, a fake Stripe enforcing 25 requests/s)"
    );
    let db = TestDb::create().await;
    let fake = std::sync::Arc::new(
        providers::stripe::fake::FakeStripe::start(tests::app::STRIPE_API_KEY)
            .await
            .expect("fake"),
    );
    fake.enforce(providers::stripe::fake::RateLimits {
        per_sec: 25,
        endpoint_per_sec: 25,
    });
    // Stripe answers a listing of a hundred in a few hundred milliseconds; the fake waits as
    // long before each answer.
    let latency_ms: u64 = std::env::var("BENCH_FEED_LATENCY_MS")
        .ok()
        .map_or(200, |v| v.parse().expect("milliseconds"));
    fake.set_latency(Duration::from_millis(latency_ms));
    println!("  the fake answers every request after {latency_ms} ms");
    let now = chrono::Utc::now().timestamp();
    let span = 5 * 86_400;
    for i in 0..transactions {
        let created = now - span + (i as i64 * span) / transactions as i64;
        fake.add_transaction(None, mixed_transaction(i, created));
    }
    let scratch = Scratch::new();
    let extra = format!(
        "[[sources]]\nname = \"stripe-feed\"\nprovider = \"stripe\"\nsecrets = [\"{}\"]\nlivemode = false\napi_key = \"{}\"\napi_base = \"{}\"\n",
        tests::app::STRIPE_SECRET,
        tests::app::STRIPE_API_KEY,
        fake.url()
    );
    let options = AppOptions {
        extra,
        workers: String::new(),
        stripe: Some(std::sync::Arc::new(
            providers::stripe::fake::FakeStripe::start("unused")
                .await
                .expect("fake"),
        )),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    let (migrated, output) = tests::process::run_settle(&config, &db.url, &["migrate"]).await;
    assert!(migrated, "migrate: {output}");
    let worker = spawn_settle(&scratch, "worker", &config, &db.url, &["worker"], &[]);
    let since = chrono::DateTime::from_timestamp(now - span - 86_400, 0)
        .expect("time")
        .date_naive()
        .to_string();
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    let (ok, output) = tests::process::run_settle(
        &config,
        &db.url,
        &["backfill", "stripe-feed", "--since", &since],
    )
    .await;
    assert!(ok, "backfill: {output}");
    let elapsed = started.elapsed();
    print_backfill_timeline(&db, &fake, started_at).await;
    let per_sec = (transactions as u128 * 1000 / elapsed.as_millis().max(1)) as i64;
    let requests = fake.requests();
    println!(
        "  backfill: {transactions} movements in {} ms: {per_sec} movements/s, {requests} requests, {} answered 429",
        elapsed.as_millis(),
        fake.rate_limited()
    );
    let (balance_ok, balance) =
        tests::process::run_settle(&config, &db.url, &["reconcile", "balance", "stripe-feed"])
            .await;
    println!(
        "  reconcile balance (exit {}):\n{balance}",
        if balance_ok { 0 } else { 1 }
    );
    let to = chrono::DateTime::from_timestamp(now - 86_400, 0)
        .expect("time")
        .date_naive()
        .to_string();
    let (coverage_ok, coverage) = tests::process::run_settle(
        &config,
        &db.url,
        &[
            "reconcile",
            "coverage",
            "stripe-feed",
            "--from",
            &since,
            "--to",
            &to,
        ],
    )
    .await;
    println!(
        "  reconcile coverage (exit {}): {}",
        if coverage_ok { 0 } else { 1 },
        coverage.lines().last().unwrap_or_default()
    );
    let backfill_rss = peak_rss_kib(&worker);

    // Catch-up: the worker is down while `catch_up` movements appear at Stripe over `burst_secs`
    // (no webhook); a worker started again reads them from the feed's last window on.
    let catch_up: usize = std::env::var("BENCH_FEED_CATCH_UP")
        .ok()
        .map_or(20_000, |v| v.parse().expect("a positive integer"));
    let burst_secs: i64 = std::env::var("BENCH_FEED_CATCH_UP_SECS")
        .ok()
        .map_or(10, |v| v.parse().expect("a positive integer"));
    drop(worker);
    let down = chrono::Utc::now().timestamp() + 1;
    for i in 0..catch_up {
        let created = down + (i as i64 * burst_secs) / catch_up as i64;
        fake.add_transaction(None, mixed_transaction(transactions + i, created));
    }
    tokio::time::sleep(Duration::from_secs(burst_secs as u64 + 2)).await;
    let requests_before = fake.requests();
    let limited_before_catch_up = fake.rate_limited();
    let started = Instant::now();
    let restarted_at = chrono::Utc::now();
    let mut window_opened: Option<Instant> = None;
    let worker = spawn_settle(&scratch, "worker", &config, &db.url, &["worker"], &[]);
    let pool = db.pool().await;
    let catch_up_ids: Vec<String> = (0..catch_up)
        .map(|i| format!("txn_feed_{}", transactions + i))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        // A join on the ids (hashed): `= ANY` over this many would cost the database more than
        // the posting it measures.
        let booked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM journal_entries je
             JOIN unnest($1::text[]) AS ids(id) ON je.movement_id = ids.id",
        )
        .bind(&catch_up_ids)
        .fetch_one(&pool)
        .await
        .expect("count");
        if window_opened.is_none() {
            let opened: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
                "SELECT min(received_at) FROM settlement_events
                 WHERE kind = 'feed.window' AND received_at > $1",
            )
            .bind(restarted_at)
            .fetch_one(&pool)
            .await
            .expect("window");
            window_opened = opened.map(|_| Instant::now());
        }
        if booked as usize >= catch_up || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let catch_up_elapsed = started.elapsed();
    println!(
        "    requests in each second from the worker's start: {:?}",
        fake.requests_by_second(restarted_at.timestamp().max(0) as u64)
    );
    let posted_by_second: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT floor(extract(epoch FROM je.recorded_at - $2))::bigint, count(*)
         FROM journal_entries je JOIN unnest($1::text[]) AS ids(id) ON je.movement_id = ids.id
         GROUP BY 1 ORDER BY 1",
    )
    .bind(&catch_up_ids)
    .bind(restarted_at)
    .fetch_all(&pool)
    .await
    .expect("posted by second");
    println!("    entries posted in each second from the worker's start: {posted_by_second:?}");
    // The windows from the last one before the outage on.
    print_windows(
        &pool,
        restarted_at - chrono::TimeDelta::seconds(90),
        restarted_at,
        "the worker's start",
    )
    .await;
    let catch_up_per_sec = (catch_up as u128 * 1000 / catch_up_elapsed.as_millis().max(1)) as i64;
    // The window that reads them opens when the feed is due (no webhook: `feed_every_secs`
    // after the last window's end); from then on the rate is the listing's and the posting's.
    let waited = window_opened.map_or(Duration::ZERO, |at| at - started);
    let listing = catch_up_elapsed.saturating_sub(waited);
    let window_per_sec = (catch_up as u128 * 1000 / listing.as_millis().max(1)) as i64;
    println!(
        "  catch-up: its window opened {} ms after the worker's start (the feed's schedule); from then {} ms: {window_per_sec} movements/s",
        waited.as_millis(),
        listing.as_millis()
    );
    println!(
        "  catch-up after an outage: {catch_up} movements in {} ms from the worker's start: {catch_up_per_sec} movements/s, {} requests, {} answered 429",
        catch_up_elapsed.as_millis(),
        fake.requests() - requests_before,
        fake.rate_limited() - limited_before_catch_up
    );

    let (ingress, base) = ingress_process(&scratch, &config, &db.url).await;
    // Each second is listed once more by a window opened the overlap after it (30 s at the
    // defaults) unless its first listing was that late: the part of the burst the catch-up read
    // sooner than that is listed again by such windows, of about as many pages, which hold the
    // feed's next windows meanwhile. The steady run starts once a window reading from past the
    // burst has posted (a webhook wakes the feed for it): the window before it had listed the
    // whole burst the overlap after it. So it measures the steady state; BENCHMARKS.md gives the
    // figures of a run that did not wait.
    let settled = Instant::now();
    while chrono::Utc::now().timestamp() < down + burst_secs + 30 + 2 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ops::loadgen::run(LoadOptions {
        source: "stripe-feed".into(),
        provider: "stripe".into(),
        secret: tests::app::STRIPE_SECRET.into(),
        ..load(&base, 1, 1, 1)
    })
    .await
    .expect("wake");
    let deadline = Instant::now() + Duration::from_secs(180);
    let burst_end = chrono::DateTime::from_timestamp(down + burst_secs, 0).expect("time");
    loop {
        let past: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM settlement_events
             WHERE kind = 'feed.window' AND status = 'posted'
               AND (facts->'feed_window'->>'from')::timestamptz >= $1",
        )
        .bind(burst_end)
        .fetch_one(&pool)
        .await
        .expect("windows");
        if past > 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settle_wait = settled.elapsed();
    let settled_at = chrono::Utc::now();
    // Steady: 200 movements a second appear at Stripe, each with a webhook to the ingress.
    let steady = (200 * steady_secs) as usize;
    let appeared = std::sync::Arc::new(std::sync::Mutex::new(Vec::with_capacity(steady)));
    let adder = {
        let (fake, appeared) = (fake.clone(), appeared.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            for i in 0..steady {
                tick.tick().await;
                let id = transactions + catch_up + i;
                fake.add_transaction(None, mixed_transaction(id, chrono::Utc::now().timestamp()));
                if let Ok(mut all) = appeared.lock() {
                    all.push((format!("txn_feed_{id}"), chrono::Utc::now()));
                }
            }
        })
    };
    let limited_before = fake.rate_limited();
    let report = ops::loadgen::run(LoadOptions {
        source: "stripe-feed".into(),
        provider: "stripe".into(),
        secret: tests::app::STRIPE_SECRET.into(),
        ..load(&base, 8, steady, 200)
    })
    .await
    .expect("load");
    adder.await.expect("adder");
    let deadline = Instant::now() + Duration::from_secs(600);
    let ids: Vec<String> = appeared
        .lock()
        .map(|a| a.iter().map(|(id, _)| id.clone()).collect())
        .unwrap_or_default();
    loop {
        let booked: i64 =
            sqlx::query_scalar("SELECT count(*) FROM journal_entries WHERE movement_id = ANY($1)")
                .bind(&ids)
                .fetch_one(&pool)
                .await
                .expect("count");
        if booked as usize >= ids.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recorded: Vec<(String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "SELECT movement_id, recorded_at FROM journal_entries WHERE movement_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .expect("entries");
    let at: std::collections::HashMap<String, chrono::DateTime<chrono::Utc>> =
        recorded.into_iter().collect();
    let mut lags: Vec<i64> = appeared
        .lock()
        .map(|a| {
            a.iter()
                .filter_map(|(id, appeared)| {
                    at.get(id).map(|r| (*r - *appeared).num_milliseconds())
                })
                .collect()
        })
        .unwrap_or_default();
    lags.sort_unstable();
    let pick = |q: usize| {
        lags.get((lags.len() * q / 100).min(lags.len().saturating_sub(1)))
            .copied()
            .unwrap_or(-1)
    };
    let steady_rss = peak_rss_kib(&worker);
    print_windows(&pool, settled_at, settled_at, "the steady run's start").await;
    println!(
        "  steady 200/s for {steady_secs} s (started {} ms after the catch-up, once the burst's second listing had posted): {} of {} booked, {} webhooks recorded; lag p50 {} ms, p99 {} ms, max {} ms; {} answered 429; worker peak RSS {} MiB after the backfill, {} MiB after",
        settle_wait.as_millis(),
        lags.len(),
        ids.len(),
        report.count("200 recorded"),
        pick(50),
        pick(99),
        lags.last().copied().unwrap_or(-1),
        fake.rate_limited() - limited_before,
        backfill_rss / 1024,
        steady_rss / 1024
    );
    drop(ingress);
    drop(worker);
    let verified = verify(&db.url).await;
    results.insert(
        "stripe_feed".into(),
        json!({"transactions": transactions, "latency_ms": latency_ms, "backfill_ms": elapsed.as_millis() as u64,
               "backfill_movements_per_sec": per_sec, "requests": requests,
               "catch_up": catch_up, "catch_up_ms": catch_up_elapsed.as_millis() as u64,
               "catch_up_movements_per_sec": catch_up_per_sec,
               "catch_up_window_wait_ms": waited.as_millis() as u64,
               "catch_up_window_movements_per_sec": window_per_sec,
               "balance_equal": balance_ok, "coverage_complete": coverage_ok,
               "steady_booked": lags.len(), "steady_expected": ids.len(),
               "lag_p50_ms": pick(50), "lag_p99_ms": pick(99),
               "answered_429": fake.rate_limited(),
               "worker_rss_mib_after_backfill": backfill_rss / 1024,
               "worker_rss_mib_after_steady": steady_rss / 1024, "verified": verified}),
    );
}

/// The feed's windows opened from `opened_from` on: what each listed (seconds relative to
/// `since`, the span it skipped), when it opened and how long it took to post.
async fn print_windows(
    pool: &sqlx::PgPool,
    opened_from: chrono::DateTime<chrono::Utc>,
    since: chrono::DateTime<chrono::Utc>,
    what: &str,
) {
    type Opened = chrono::DateTime<chrono::Utc>;
    let windows: Vec<(String, Opened, Opened, Option<Value>)> = sqlx::query_as(
        "SELECT external_id, received_at, status_changed_at, facts FROM settlement_events
         WHERE kind = 'feed.window' AND received_at >= $1 ORDER BY received_at",
    )
    .bind(opened_from)
    .fetch_all(pool)
    .await
    .expect("windows");
    // Seconds with a tenth, from milliseconds.
    let tenths = |ms: i64| {
        let sign = if ms < 0 { "-" } else { "" };
        format!("{sign}{}.{}", ms.abs() / 1000, ms.abs() % 1000 / 100)
    };
    let secs = |text: Option<&Value>| {
        text.and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map_or("?".to_owned(), |t| {
                tenths((t.with_timezone(&chrono::Utc) - since).num_milliseconds())
            })
    };
    println!("    the feed's windows from {what} (s from it):");
    for (key, opened, posted, facts) in windows {
        let window = facts
            .as_ref()
            .and_then(Value::as_object)
            .and_then(|f| f.values().find(|v| v.get("from").is_some()))
            .cloned()
            .unwrap_or(Value::Null);
        let settled = window
            .get("settled")
            .map(|s| format!(" from {}", secs(Some(s))))
            .unwrap_or_default();
        let skip = window
            .get("skip")
            .and_then(Value::as_array)
            .map(|s| format!(" skip [{}, {})", secs(s.first()), secs(s.get(1))))
            .unwrap_or_default();
        println!(
            "      {key}: [{}, {}){settled}{skip}; opened at {}, took {} ms",
            secs(window.get("from")),
            secs(window.get("to")),
            tenths((opened - since).num_milliseconds()),
            (posted - opened).num_milliseconds()
        );
    }
}

/// 6: one Adyen settlement details report of `lines` lines over three merchant accounts and two
/// settlement currencies with lines of a record type settle has no account for
/// (`tests::adyen::mixed_report`), announced through a `settle ingress` and posted by one `settle
/// worker` at the defaults: the time from the announcement to the last entry posted, and the
/// worker's peak memory (the report is streamed to a file and posted in chunks, never held
/// whole). Then 30 batches published with no notification, found and booked by the schedule.
async fn part_adyen(results: &mut serde_json::Map<String, Value>) {
    let lines = std::env::var("BENCH_ADYEN_LINES")
        .ok()
        .map_or(100_000, |v| v.parse().expect("a positive integer"));
    println!(
        "\n6. Adyen settlement details report (PostgreSQL, {lines} lines over 3 merchant accounts and 2 currencies, one worker at the defaults)"
    );
    let db = TestDb::create().await;
    let reports = tests::adyen::fake_reports().await;
    let file = "settlement_detail_report_batch_1.csv";
    let (report, entries) = tests::adyen::mixed_report(lines, 1);
    reports.put(file, report);
    let scratch = Scratch::new();
    let options = AppOptions {
        workers: String::new(),
        adyen_reports: Some(reports.host()),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    let (_ingress, base) = ingress_process(&scratch, &config, &db.url).await;
    let worker = spawn_settle(&scratch, "worker", &config, &db.url, &["worker"], &[]);
    let started = Instant::now();
    announce_report(&base, &reports.url("SettleShop", file), file).await;
    wait_for_entries(&db.url, entries as i64, Duration::from_secs(1800)).await;
    let elapsed = started.elapsed();
    let rss = peak_rss_kib(&worker);
    drop(worker);
    let per_sec = (lines as u128 * 1000 / elapsed.as_millis().max(1)) as i64;
    let verified = verify(&db.url).await;
    println!(
        "  {lines} lines ({entries} entries) posted in {} ms ({per_sec} lines/s), worker peak RSS {} MiB, verified {verified}",
        elapsed.as_millis(),
        rss / 1024
    );
    let gap = adyen_gap().await;
    results.insert(
        "adyen_report".into(),
        json!({"lines": lines, "entries": entries, "elapsed_ms": elapsed.as_millis() as u64,
               "lines_per_sec": per_sec, "worker_peak_rss_mib": rss / 1024, "verified": verified,
               "gap": gap}),
    );
}

/// A signed `REPORT_AVAILABLE` for `file` at `url`, through the ingress at `base`.
async fn announce_report(base: &str, url: &str, file: &str) {
    let body = providers::adyen::sign::notification(
        tests::app::ADYEN_KEY,
        &[tests::adyen::report_available(file, url)],
    );
    let answer = reqwest::Client::new()
        .post(format!("{base}/webhooks/adyen"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("announce");
    assert_eq!(answer.status().as_u16(), 200);
}

/// Batch 1 notified and booked, then batches 2 to 31 (1,000 payments each) published with no
/// notification: the time until the schedule (`feed_every_secs = 2`) has found and booked them.
async fn adyen_gap() -> Value {
    const BATCHES: u32 = 30;
    const PAYMENTS: usize = 1_000;
    let db = TestDb::create().await;
    let reports = tests::adyen::fake_reports().await;
    let scratch = Scratch::new();
    let options = AppOptions {
        workers: String::new(),
        adyen_reports: Some(reports.host()),
        adyen_keys: "feed_every_secs = 2".into(),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    let (_ingress, base) = ingress_process(&scratch, &config, &db.url).await;
    let _worker = spawn_settle(&scratch, "worker", &config, &db.url, &["worker"], &[]);
    let file = |batch: u32| format!("settlement_detail_report_batch_{batch}.csv");
    reports.put(
        &file(1),
        tests::adyen::payments_of("SettleShop", 0, PAYMENTS, 1),
    );
    announce_report(&base, &reports.url("SettleShop", &file(1)), &file(1)).await;
    let per_batch = 2 * PAYMENTS as i64 + 1;
    wait_for_entries(&db.url, per_batch, Duration::from_secs(300)).await;
    let started = Instant::now();
    for batch in 2..=BATCHES + 1 {
        let payments =
            tests::adyen::payments_of("SettleShop", batch as usize * PAYMENTS, PAYMENTS, batch);
        reports.put(&file(batch), payments);
    }
    wait_for_entries(
        &db.url,
        per_batch * i64::from(BATCHES + 1),
        Duration::from_secs(1800),
    )
    .await;
    let elapsed = started.elapsed();
    let verified = verify(&db.url).await;
    println!(
        "  {BATCHES} batches published with no notification ({PAYMENTS} payments each): found and booked by the schedule in {} ms, verified {verified}",
        elapsed.as_millis()
    );
    json!({"batches": BATCHES, "payments_each": PAYMENTS, "elapsed_ms": elapsed.as_millis() as u64, "verified": verified})
}

/// 7: searching a store of `BENCH_SEARCH_EVENTS` events (default 1,000,000; 1 % dead-lettered),
/// seeded by SQL and analysed as autovacuum would: each filter's first page (50, newest first),
/// 200 times, p50 and p99 through the store as the API calls it.
async fn part_search(results: &mut serde_json::Map<String, Value>) {
    use ledger::review::{EventFilter, PageRequest};
    let events: i64 = std::env::var("BENCH_SEARCH_EVENTS")
        .ok()
        .map_or(1_000_000, |v| v.parse().expect("a positive integer"));
    println!("\n7. event search (PostgreSQL, {events} events, first page of 50, 200 times each)");
    let db = TestDb::create().await;
    let store = ledger::Store::connect(&db.url, &ledger::StoreOptions::default())
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    let pool = db.pool().await;
    let seeded = Instant::now();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint, facts, payload, job_id, received_at)
         SELECT CASE WHEN i % 3 = 0 THEN 'stripe' WHEN i % 3 = 1 THEN 'std' ELSE 'adyen' END, 'evt_' || i,
                CASE WHEN i % 100 = 0 THEN 'abandoned' ELSE 'posted' END,
                CASE WHEN i % 4 = 0 THEN 'refund_settled' ELSE 'charge_settled' END,
                'mv_' || i, repeat('a', 64), '{{}}'::jsonb, '{{}}', 'job_' || i,
                now() - make_interval(secs => {events} - i)
         FROM generate_series(1, {events}) AS i;
         INSERT INTO dead_letters (event_id, job_id, error_class, error_code, last_error, attempts)
         SELECT id, job_id, 'permanent', CASE WHEN id % 200 = 0 THEN 'invalid_facts' ELSE 'provider_facts' END, 'seeded', 1
         FROM settlement_events WHERE status = 'abandoned';
         -- One event in five has an entry (its order's reference, a payout of 1,000 entries),
         -- written as the posting writes them: each entry with its lines in one statement.
         WITH entries AS (
             INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id, payout_id, reference,
                                          request_fingerprint, effective_date, description)
             SELECT 'std/charge_settled/mv_' || e.id, e.id, e.source, 'charge_settled', 'mv_' || e.id,
                    'po_' || (e.id / 5000), 'order-' || e.id, repeat('a', 64), current_date, 'seeded'
             FROM settlement_events e WHERE e.status = 'posted' AND e.id % 5 = 0
             RETURNING id)
         INSERT INTO journal_lines (entry_id, line_no, account, currency, amount)
         SELECT id, line.no, line.account, 'USD', line.amount FROM entries
         CROSS JOIN (VALUES (1, 'assets:std', 9.70), (2, 'income:sales', -9.70)) AS line(no, account, amount);
         ANALYZE"
    )))
    .execute(&pool)
    .await
    .expect("seed");
    println!("  seeded in {} s", seeded.elapsed().as_secs());
    let now = chrono::Utc::now();
    let text = |s: &str| Some(s.to_owned());
    let middle = format!("evt_{}", events / 2);
    let searches: Vec<(&str, EventFilter)> = vec![
        ("newest (no filter)", EventFilter::default()),
        (
            "source",
            EventFilter {
                source: text("adyen"),
                ..Default::default()
            },
        ),
        (
            "external id",
            EventFilter {
                external_id: Some(middle.clone()),
                ..Default::default()
            },
        ),
        (
            "external id prefix",
            EventFilter {
                external_id_prefix: Some(middle.clone()),
                ..Default::default()
            },
        ),
        (
            "source + prefix",
            EventFilter {
                source: text("std"),
                external_id_prefix: text("evt_12345"),
                ..Default::default()
            },
        ),
        (
            "kind",
            EventFilter {
                kind: text("refund_settled"),
                ..Default::default()
            },
        ),
        (
            "status (1 %)",
            EventFilter {
                status: text("abandoned"),
                ..Default::default()
            },
        ),
        (
            "movement",
            EventFilter {
                movement_id: Some(format!("mv_{}", events / 3)),
                ..Default::default()
            },
        ),
        (
            "received, an hour long window a day ago",
            EventFilter {
                received_from: Some(now - chrono::Duration::hours(25)),
                received_to: Some(now - chrono::Duration::hours(24)),
                ..Default::default()
            },
        ),
        (
            "reference (one entry)",
            EventFilter {
                reference: Some(format!("order-{}", events / 10 * 5 + 5)),
                ..Default::default()
            },
        ),
        (
            "payout (1,000 entries)",
            EventFilter {
                payout_id: Some(format!("po_{}", events / 10_000)),
                ..Default::default()
            },
        ),
        (
            "dead-letter code (0.005 %)",
            EventFilter {
                error_code: text("invalid_facts"),
                ..Default::default()
            },
        ),
        (
            "dead-letter class",
            EventFilter {
                error_class: text("permanent"),
                ..Default::default()
            },
        ),
    ];
    let mut rows = Vec::new();
    for (name, filter) in searches {
        let mut samples = Vec::with_capacity(200);
        let mut found = 0;
        for _ in 0..200 {
            let started = Instant::now();
            let page = store
                .search_events(&filter, PageRequest::new(None, Some(50)))
                .await
                .expect("search");
            samples.push(started.elapsed().as_micros() as u64);
            found = page.items.len();
        }
        samples.sort_unstable();
        // Percentiles by rank, in microseconds, shown in milliseconds.
        let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
        let ms = |us: u64| format!("{}.{:02}", us / 1000, us % 1000 / 10);
        let (p50, p99) = (at(50), at(99));
        println!(
            "  {name:<42} p50 {:>7} ms  p99 {:>7} ms  ({found} on the page)",
            ms(p50),
            ms(p99)
        );
        rows.push(json!({"filter": name, "p50_us": p50, "p99_us": p99, "page": found}));
    }
    results.insert("search".into(), json!({"events": events, "filters": rows}));
    store.close().await;
}

/// Finance reads over a large journal (`BENCH_FINANCE_LINES`, default 1,000,000): entries of
/// three lines (a source's balance, its fees, sales; a sixth of them captures on a receivables
/// account and a sixth the entries clearing them) over three sources, USD/EUR/JPY and a year of
/// dates, seeded in SQL (the journal's triggers off while seeding, the balances and receivables
/// kept then written from the lines, as the migrations that made them write them), then each
/// read 30 times: balances now, as of a date, as recorded an hour and 30 days ago (from the
/// balances kept by day, less the entries recorded since), the journal's first page, and the
/// open receivables. p50 and p99 by rank.
async fn part_finance(results: &mut serde_json::Map<String, Value>) {
    use ledger::finance::{BalanceQuery, JournalFilter};
    let lines: i64 = std::env::var("BENCH_FINANCE_LINES")
        .ok()
        .map_or(1_000_000, |v| v.parse().expect("a positive integer"));
    let entries = lines / 3;
    // One entry in this many is a payout; the entries since the last are its items.
    const PAYOUT_EVERY: i64 = 1_300;
    println!(
        "\nfinance reads (PostgreSQL, {lines} journal lines, {entries} entries, a payout every {PAYOUT_EVERY})"
    );
    let db = TestDb::create().await;
    let store = ledger::Store::connect(&db.url, &ledger::StoreOptions::default())
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    let pool = db.pool().await;
    let seeded = Instant::now();
    let mut seeder = pool.acquire().await.expect("a connection");
    sqlx::raw_sql(
        "SET session_replication_role = replica;
         INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint, facts, payload, job_id)
         VALUES ('s1', 'seed', 'posted', 'charge_settled', 'seed', repeat('a', 64), '{}'::jsonb, '{}', 'seed')",
    )
    .execute(&mut *seeder)
    .await
    .expect("seed the event");
    let chunk = 500_000;
    for first in (1..=entries).step_by(chunk) {
        let last = (first + chunk as i64 - 1).min(entries);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "WITH entries AS (
                 INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id,
                                              request_fingerprint, effective_date, description,
                                              details, recorded_at, payout_id)
                 SELECT 'seed/' || g, (SELECT min(id) FROM settlement_events),
                        's' || (g % 3 + 1),
                        CASE WHEN g % {PAYOUT_EVERY} = 0 THEN 'payout_paid' ELSE 'charge_settled' END,
                        CASE WHEN g % 6 IN (2, 5) THEN 'rc_' || g / 6 ||
                                  CASE WHEN g % 6 = 5 AND g / 6 % 1000 = 0 THEN '_other' ELSE '' END
                             ELSE 'mv_' || g END,
                        repeat('a', 64),
                        current_date - 365 + (g * 365 / {entries})::int, 'seeded',
                        jsonb_build_object('currency', (ARRAY['USD', 'EUR', 'JPY'])[g % 3 + 1],
                                           'net', CASE WHEN g % 6 = 5 THEN '93.60' ELSE '96.80' END),
                        now() - interval '366 days' + g * (interval '365 days' / {entries}),
                        CASE WHEN g % {PAYOUT_EVERY} = 0 THEN 'po_' || lpad((g / {PAYOUT_EVERY} - 1)::text, 6, '0') END
                 FROM generate_series({first}::bigint, {last}::bigint) AS g
                 RETURNING id, source, event_id),
             items AS (
                 INSERT INTO payout_items (entry_id, source, payout_id, event_id)
                 SELECT id, source, 'po_' || lpad((id / {PAYOUT_EVERY})::text, 6, '0'), event_id
                 FROM entries WHERE id % {PAYOUT_EVERY} <> 0)
             INSERT INTO journal_lines (entry_id, line_no, account, currency, amount)
             SELECT e.id, line.no,
                    CASE WHEN e.id % 6 = 2 AND line.no = 1 THEN 'receivables:' || e.source
                         WHEN e.id % 6 = 5 THEN (ARRAY['receivables:' || e.source,
                                                       e.source || ':balance',
                                                       'fees:' || e.source])[line.no]
                         ELSE (ARRAY[e.source || ':balance', 'fees:' || e.source, 'sales'])[line.no] END,
                    (ARRAY['USD', 'EUR', 'JPY'])[e.id % 3 + 1],
                    CASE WHEN e.id % 6 = 5 THEN (ARRAY[-96.80, 93.60, 3.20])[line.no]
                         ELSE (ARRAY[96.80, 3.20, -100])[line.no] END
             FROM entries e CROSS JOIN generate_series(1, 3) AS line(no)"
        )))
        .execute(&mut *seeder)
        .await
        .expect("seed the journal");
    }
    sqlx::raw_sql(
        "SET session_replication_role = DEFAULT;
         INSERT INTO balance_deltas (account, currency, effective_date, amount)
         SELECT l.account, l.currency, e.effective_date, sum(l.amount)
         FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
         GROUP BY l.account, l.currency, e.effective_date;
         INSERT INTO recorded_balance_deltas (account, currency, effective_date, recorded_hour, amount)
         SELECT l.account, l.currency, e.effective_date, date_trunc('hour', e.recorded_at, 'UTC'),
                sum(l.amount)
         FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
         GROUP BY 1, 2, 3, 4;
         INSERT INTO receivable_deltas (account, currency, source, movement_id, since, reference, amount)
         SELECT l.account, l.currency, e.source, e.movement_id, min(e.effective_date),
                max(e.reference), sum(l.amount)
         FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
         WHERE left(l.account, 12) = 'receivables:'
         GROUP BY l.account, l.currency, e.source, e.movement_id
         HAVING sum(l.amount) <> 0;
         ANALYZE",
    )
    .execute(&mut *seeder)
    .await
    .expect("the balances and receivables kept");
    drop(seeder);
    println!("  seeded in {} s", seeded.elapsed().as_secs());
    let verified = Instant::now();
    let checks = store.verify().await.expect("verify");
    let failed: Vec<_> = checks
        .iter()
        .filter(|c| c.violations > 0 && c.name.ends_with("_kept_equal_the_journal"))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    println!(
        "  settle verify (every check): {} ms",
        verified.elapsed().as_millis()
    );
    for check in &checks {
        println!("    {:<40} {:>9} ms", check.name, check.took_ms);
    }
    let mid_year = chrono::Utc::now().date_naive() - chrono::Duration::days(180);
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let month_ago = chrono::Utc::now() - chrono::Duration::days(30);
    let reads: Vec<(&str, BalanceQuery)> = vec![
        (
            "balances",
            BalanceQuery {
                as_of: None,
                recorded_at: None,
            },
        ),
        (
            "balances as of a date",
            BalanceQuery {
                as_of: Some(mid_year),
                recorded_at: None,
            },
        ),
        (
            "balances as recorded an hour ago",
            BalanceQuery {
                as_of: None,
                recorded_at: Some(hour_ago),
            },
        ),
        (
            "balances as recorded 30 days ago",
            BalanceQuery {
                as_of: None,
                recorded_at: Some(month_ago),
            },
        ),
    ];
    let mut rows = Vec::new();
    let summary = |name: &str, mut samples: Vec<u64>, rows: &mut Vec<Value>| {
        samples.sort_unstable();
        let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
        let ms = |us: u64| format!("{}.{:02}", us / 1000, us % 1000 / 10);
        let (p50, p99) = (at(50), at(99));
        println!("  {name:<42} p50 {:>9} ms  p99 {:>9} ms", ms(p50), ms(p99));
        rows.push(json!({"read": name, "p50_us": p50, "p99_us": p99}));
    };
    for (name, query) in reads {
        let mut samples = Vec::with_capacity(30);
        for _ in 0..30 {
            let started = Instant::now();
            let balances = store.balances(query).await.expect("balances");
            samples.push(started.elapsed().as_micros() as u64);
            assert!(!balances.is_empty(), "{name}");
        }
        summary(name, samples, &mut rows);
    }
    let mut samples = Vec::with_capacity(30);
    for _ in 0..30 {
        let started = Instant::now();
        let page = store
            .journal(&JournalFilter::default(), None, 50)
            .await
            .expect("journal");
        samples.push(started.elapsed().as_micros() as u64);
        assert!(!page.items.is_empty());
    }
    summary("journal, first page of 50", samples, &mut rows);
    // A sixth of the entries are captures on a receivables account, each cleared by the next
    // entry of its movement but one in a thousand (cleared under another movement).
    let receivables: Vec<String> = (1..=3).map(|s| format!("receivables:s{s}")).collect();
    let mut samples = Vec::with_capacity(30);
    let mut open = 0;
    for _ in 0..30 {
        let started = Instant::now();
        let items = store
            .open_receivables(&receivables, chrono::Utc::now().date_naive(), 1_000)
            .await
            .expect("receivables");
        samples.push(started.elapsed().as_micros() as u64);
        open = items.len();
    }
    assert!(open > 0 || entries < 6_000, "some receivables open");
    summary("open receivables (first 1,000)", samples, &mut rows);
    // The same list grouped from every line of the receivables accounts, as it was read before
    // the receivables were kept: three times, for comparison (up to 10,000,000 lines: beyond,
    // each is minutes of the run).
    let mut samples = Vec::with_capacity(3);
    for _ in 0..if lines <= 10_000_000 { 3 } else { 0 } {
        let started = Instant::now();
        let grouped: Vec<(String,)> = sqlx::query_as(
            "SELECT je.movement_id FROM journal_lines l JOIN journal_entries je ON je.id = l.entry_id
             WHERE l.account = ANY($1)
             GROUP BY je.source, je.movement_id, l.account, l.currency
             HAVING sum(l.amount) <> 0 AND min(je.effective_date) <= current_date
             ORDER BY min(je.effective_date), je.source, je.movement_id, l.currency LIMIT 1000",
        )
        .bind(&receivables)
        .fetch_all(&pool)
        .await
        .expect("grouped");
        samples.push(started.elapsed().as_micros() as u64);
        assert_eq!(grouped.len(), open, "the same receivables open");
    }
    if !samples.is_empty() {
        summary("open receivables, every line grouped", samples, &mut rows);
    }
    // Payouts: every PAYOUT_EVERY-th entry is a payout, the entries before it its items.
    let payouts = entries / PAYOUT_EVERY;
    if payouts > 0 {
        let mut samples = Vec::with_capacity(30);
        for i in 0..30 {
            let id = format!("po_{:06}", (i * 7_919) % payouts);
            let started = Instant::now();
            let reconciled = store.reconciliation(&id).await.expect("reconcile");
            samples.push(started.elapsed().as_micros() as u64);
            assert!(
                reconciled.is_some_and(|r| r.items.len() as i64 == PAYOUT_EVERY - 1),
                "{id}"
            );
        }
        summary(
            &format!("reconcile payout ({} items)", PAYOUT_EVERY - 1),
            samples,
            &mut rows,
        );
        // `settle reconcile payouts`: every payout, a page of 100 at a time; first with no
        // summary kept (each payout's reconciliation computed, and kept), then again.
        let all = || async {
            let started = Instant::now();
            let (mut after, mut listed) = (None::<String>, 0);
            loop {
                let page = store.payouts(after.as_deref(), 100).await.expect("payouts");
                listed += page.len() as i64;
                after = page.last().map(|p| p.payout_id.clone());
                if page.len() < 100 {
                    break;
                }
            }
            // The entries after the last payout are the items of one not paid yet.
            assert!(listed >= payouts, "{listed} of {payouts}");
            started.elapsed().as_millis() as u64
        };
        for when in ["nothing kept", "summaries kept"] {
            let all_ms = all().await;
            println!("  reconcile payouts (all {payouts}, {when})  {all_ms:>9} ms");
            rows.push(json!({"read": format!("reconcile payouts (all, {when})"), "payouts": payouts, "ms": all_ms}));
        }
        let mut samples = Vec::with_capacity(30);
        for i in 0..30 {
            let after = format!("po_{:06}", (i * 7_919) % payouts);
            let started = Instant::now();
            let page = store.payouts(Some(&after), 50).await.expect("payouts");
            samples.push(started.elapsed().as_micros() as u64);
            assert!(page.len() <= 50);
        }
        summary(
            "payouts list, a page of 50 with statuses (kept)",
            samples,
            &mut rows,
        );
    }
    results.insert("finance".into(), json!({"lines": lines, "reads": rows}));
    store.close().await;
}

/// Bulk requeue of 10,000 open dead letters, as the CLI, the API and the dashboard do it
/// (`ops::actions`: what the filter matches, at most `BULK_LIMIT_MAX` at a time, each item its
/// own audited transaction with a fresh job), on both backends.
async fn part_bulk(results: &mut serde_json::Map<String, Value>) {
    use ledger::review::{BULK_LIMIT_MAX, DeadLetterFilter, Decision};
    const LETTERS: i64 = 10_000;
    println!("\n8. bulk requeue of {LETTERS} open dead letters (batches of {BULK_LIMIT_MAX})");
    let mut rows = Vec::new();
    for backend in ["postgres", "sqlite"] {
        let (pg, file) = match backend {
            "postgres" => (Some(TestDb::create().await), None),
            _ => (None, Some(SqliteFile::create())),
        };
        let url = pg
            .as_ref()
            .map_or_else(|| file.as_ref().expect("file").url(), |db| db.url.clone());
        let store = ledger::Store::connect(&url, &ledger::StoreOptions::default())
            .await
            .expect("store");
        store.migrate().await.expect("migrate");
        let seed = format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {LETTERS})
             INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint,
                                            facts, payload, job_id, received_at, status_changed_at)
             SELECT 'std', 'evt_' || i, 'abandoned', 'charge_settled', 'mv_' || i,
                    '{fp}', '{{}}', '{{}}', 'job_' || i, {now}, {now} FROM n;
             INSERT INTO dead_letters (event_id, job_id, error_class, error_code, last_error, attempts, abandoned_at)
             SELECT id, job_id, 'exhausted', 'upstream_unavailable', 'seeded', 8, {now} FROM settlement_events;",
            fp = "a".repeat(64),
            now = if backend == "postgres" { "now()" } else { "strftime('%Y-%m-%dT%H:%M:%fZ')" },
        );
        let seeded = match (&pg, &file) {
            (Some(db), _) => sqlx::raw_sql(sqlx::AssertSqlSafe(seed))
                .execute(&db.pool().await)
                .await
                .map(|_| ()),
            (_, Some(file)) => {
                let pool = sqlx::SqlitePool::connect(&file.url())
                    .await
                    .expect("sqlite");
                sqlx::raw_sql(sqlx::AssertSqlSafe(seed))
                    .execute(&pool)
                    .await
                    .map(|_| ())
            }
            _ => unreachable!(),
        };
        seeded.expect("seed");
        let decision = Decision {
            actor: "bench".into(),
            reason: "upstream recovered".into(),
        };
        let started = Instant::now();
        let mut requeued = 0;
        loop {
            let ids = ops::actions::matching(&store, &DeadLetterFilter::default(), BULK_LIMIT_MAX)
                .await
                .expect("matching");
            if ids.is_empty() {
                break;
            }
            let report = ops::actions::act(
                &store,
                ops::actions::Action::Requeue,
                &ids,
                &decision,
                false,
            )
            .await;
            requeued += report.count("requeued");
        }
        let millis = started.elapsed().as_millis().max(1);
        let per_sec = requeued as u128 * 1000 / millis;
        println!(
            "  {backend:<9} {requeued} requeued in {}.{} s ({per_sec} per second)",
            millis / 1000,
            millis % 1000 / 100
        );
        assert_eq!(requeued, LETTERS as usize, "every dead letter requeued");
        rows.push(
            json!({"backend": backend, "requeued": requeued, "milliseconds": millis as u64,
            "per_second": per_sec as u64}),
        );
        store.close().await;
    }
    results.insert("bulk_requeue".into(), json!(rows));
}

/// Which parts to run: all by default; `BENCH_PARTS=drain,e2e` runs some (while iterating):
/// `ingress`, `drain`, `e2e`, `sqlite`, `stripe`, `adyen`, `search`.
fn wanted(part: &str) -> bool {
    std::env::var("BENCH_PARTS").map_or(true, |parts| parts.split(',').any(|p| p.trim() == part))
}

async fn part_ingress(levels: &[(usize, usize)], results: &mut serde_json::Map<String, Value>) {
    println!("\n1. ingress (PostgreSQL)");
    let db = TestDb::create().await;
    let (ingress_rows, ingress_rss) = ingress(&db.url, levels).await;
    let scratch = Scratch::new();
    let pool = db.pool().await;
    sqlx::query("CREATE SEQUENCE IF NOT EXISTS pgbench_ids")
        .execute(&pool)
        .await
        .expect("sequence");
    pool.close().await;
    let mut ratios = Vec::new();
    for (row, &(clients, _)) in ingress_rows.iter().zip(levels) {
        let tps = pgbench(&db, &scratch, clients);
        let settle = row["per_sec"].as_i64().unwrap_or(0);
        ratios.push(json!({"senders": clients, "settle_per_sec": settle, "pgbench_tps": tps,
            "ratio_percent": if tps > 0 { settle * 100 / tps } else { 0 }, "settle_p50_ms": row["p50_ms"], "settle_p99_ms": row["p99_ms"]}));
    }
    results.insert("ingress_postgres".into(), json!(ratios));
    results.insert(
        "ingress_postgres_verified".into(),
        json!(verify(&db.url).await),
    );
    results.insert("ingress_peak_rss_mib".into(), json!(ingress_rss / 1024));
    let db = TestDb::create().await;
    let (serve, serve_rss) = serve_under_mixed_load(&db.url, 64, 20_000).await;
    results.insert("serve_mixed_ingress".into(), serve);
    results.insert("serve_mixed_verified".into(), json!(verify(&db.url).await));
    results.insert("serve_ingress_peak_rss_mib".into(), json!(serve_rss / 1024));
}

/// 2, on one server: for each backlog size, a backlog of standard events written through a
/// `settle ingress`, drained by one and by two `settle worker` processes at the product's
/// defaults, beside graphile-worker's default drain of as many no-op jobs.
async fn drain_on_server(label: &str, admin_url: &str, sizes: &[usize]) -> Value {
    let mut rows = Vec::new();
    for &events in sizes {
        let mut row = serde_json::Map::new();
        row.insert("events".into(), json!(events));
        for processes in [1, 2] {
            let db = TestDb::create_on(admin_url, "").await;
            let ingress_per_sec = backlog_through_ingress(&db.url, events).await;
            let run = drain_measured(&db.url, events, processes).await;
            let verified = verify(&db.url).await;
            println!(
                "  {label}, {events} events, {processes} worker(s): {}/s ({} ms, first posting after {} ms; written at {ingress_per_sec}/s); per tenth: {:?}",
                run.per_sec, run.elapsed_ms, run.startup_ms, run.tenths
            );
            row.insert(
                format!("workers_{processes}"),
                json!({"postings_per_sec": run.per_sec, "elapsed_ms": run.elapsed_ms, "startup_ms": run.startup_ms,
                       "per_tenth": run.tenths, "last_tenth_percent_of_first": run.last_over_first(),
                       "backlog_written_per_sec": ingress_per_sec, "verified": verified}),
            );
        }
        let db = TestDb::create_on(admin_url, "").await;
        let graphile = graphile_drain(&db.url, events, 1);
        println!(
            "  {label}, graphile-worker 0.17 defaults (concurrency 1), {events} no-op jobs: {graphile}/s"
        );
        let one = row["workers_1"]["postings_per_sec"].as_i64().unwrap_or(0);
        let two = row["workers_2"]["postings_per_sec"].as_i64().unwrap_or(0);
        row.insert("graphile_worker_per_sec".into(), json!(graphile));
        row.insert(
            "ratio_to_graphile_percent".into(),
            json!(one * 100 / graphile.max(1)),
        );
        row.insert("two_over_one_percent".into(), json!(two * 100 / one.max(1)));
        println!(
            "  {label}, {events}: {}% of graphile-worker; two workers {}% of one",
            one * 100 / graphile.max(1),
            two * 100 / one.max(1)
        );
        rows.push(Value::Object(row));
    }
    json!(rows)
}

/// The backlog sizes: 20,000 and 200,000 unless `BENCH_DRAIN_EVENTS` (comma-separated) says.
fn drain_sizes() -> Vec<usize> {
    std::env::var("BENCH_DRAIN_EVENTS").map_or_else(
        |_| vec![20_000, 200_000],
        |sizes| {
            sizes
                .split(',')
                .map(|n| n.trim().parse().expect("a positive integer"))
                .collect()
        },
    )
}

async fn part_drain(results: &mut serde_json::Map<String, Value>) {
    let sizes = drain_sizes();
    println!(
        "\n2. drain (PostgreSQL; backlogs of {sizes:?} standard events written through the ingress; settle worker at the product's defaults)"
    );
    let machine = drain_on_server(
        "this machine's cluster",
        "postgres://postgres@127.0.0.1:5432/postgres",
        &sizes,
    )
    .await;
    results.insert("drain_machine_cluster".into(), machine);
    let cluster = tests::cluster::Cluster::start();
    let production = drain_on_server(
        "a production-configured cluster",
        &cluster.admin_url(),
        &sizes,
    )
    .await;
    drop(cluster);
    results.insert("drain_production_cluster".into(), production);
    let db = TestDb::create().await;
    let store = ledger::Store::connect(&db.url, &ledger::StoreOptions::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store.close().await;
    let defaults = workers::WorkerSettings::default();
    let bare = bare_queue(&db, defaults.batch_size, defaults.concurrency).await;
    results.insert("bare_queue_per_sec".into(), json!(bare));
}

async fn part_end_to_end(results: &mut serde_json::Map<String, Value>) {
    println!("\n3. end to end (PostgreSQL, steady 200/s for 20 s)");
    let db = TestDb::create().await;
    let (e2e, e2e_rss) = end_to_end(&db.url, 200, 20).await;
    results.insert("end_to_end".into(), e2e);
    results.insert("end_to_end_verified".into(), json!(verify(&db.url).await));
    results.insert(
        "serve_end_to_end_peak_rss_mib".into(),
        json!(e2e_rss / 1024),
    );
}

async fn part_sqlite(
    levels: &[(usize, usize)],
    workers: &str,
    results: &mut serde_json::Map<String, Value>,
) {
    println!("\n4. SQLite");
    let file = SqliteFile::create();
    let (sqlite_ingress, sqlite_rss) = ingress(&file.url(), levels).await;
    let ingress_verified = verify(&file.url()).await;
    drop(file);
    let file = SqliteFile::create();
    let (sqlite_drain, _) = drain(&file.url(), 1, workers).await;
    let drain_verified = verify(&file.url()).await;
    results.insert("sqlite".into(), json!({"ingress": sqlite_ingress, "ingress_verified": ingress_verified,
        "drain_per_sec": sqlite_drain, "drain_verified": drain_verified, "serve_peak_rss_mib": sqlite_rss / 1024}));
}

#[tokio::main]
async fn main() {
    let machine = format!(
        "{} cores, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| m.lines().next().map(str::to_owned))
            .unwrap_or_default()
    );
    println!("settle benchmark suite on {machine}");
    // Build the release binary before any clock starts.
    tests::process::settle_binary();
    // Each level runs for a few seconds at least (group commit records ~10,000 deliveries/s at
    // 32 senders here).
    let levels = [(1, 3_000), (8, 15_000), (32, 30_000), (64, 30_000)];
    let mut results = serde_json::Map::new();
    results.insert("machine".into(), json!(machine));
    if wanted("ingress") {
        part_ingress(&levels, &mut results).await;
    }
    if wanted("drain") {
        part_drain(&mut results).await;
    }
    if wanted("e2e") {
        part_end_to_end(&mut results).await;
    }
    if wanted("sqlite") {
        part_sqlite(&levels[..3], "", &mut results).await;
    }
    if wanted("stripe") {
        part_stripe(&mut results).await;
    }
    if wanted("adyen") {
        part_adyen(&mut results).await;
    }
    if wanted("feed") {
        part_feed(&mut results).await;
    }
    if wanted("search") {
        part_search(&mut results).await;
    }
    if wanted("bulk") {
        part_bulk(&mut results).await;
    }
    if wanted("finance") {
        part_finance(&mut results).await;
    }
    let text = serde_json::to_string_pretty(&Value::Object(results)).expect("json");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&out).expect("bench dir");
    std::fs::write(out.join("results.json"), &text).expect("write");
    println!("\n{text}");
}
