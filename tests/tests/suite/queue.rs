//! The job queue as settle runs it on PostgreSQL: what settle changes in apalis' own schema still
//! holds after the migrations.

use tests::TestDb;

/// Sequential scans of `apalis.jobs` so far, as the statistics collector counts them.
async fn seq_scans(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .expect("flush");
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await
        .expect("clear");
    sqlx::query_scalar(
        "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'apalis.jobs'::regclass",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("seq_scan")
}

#[tokio::test]
async fn a_fetch_from_a_large_backlog_reads_only_the_jobs_it_takes() {
    let db = TestDb::create().await;
    let store = ledger::Store::connect(&db.url, &ledger::StoreOptions::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store.close().await;
    let pool = db.pool().await;
    sqlx::raw_sql(
        "INSERT INTO apalis.workers (id, worker_type, storage_name) VALUES ('w1', 'test::Noop', 'PgStorage');
         INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
         SELECT apalis.generate_ulid(), 'test::Noop', convert_to('{}', 'UTF8'), 'Pending', 0, 25,
                now() - interval '1 second'
         FROM generate_series(1, 20000);
         ANALYZE apalis.jobs;",
    )
    .execute(&pool)
    .await
    .expect("backlog");
    let mut conn = pool.acquire().await.expect("connection");
    let before = seq_scans(&mut conn).await;
    let taken: i64 =
        sqlx::query_scalar("SELECT count(*) FROM apalis.get_jobs('w1', 'test::Noop', 64)")
            .fetch_one(&mut *conn)
            .await
            .expect("fetch");
    assert_eq!(taken, 64);
    let after = seq_scans(&mut conn).await;
    // apalis' function, planned generically, would hash the whole table (a sequential scan).
    assert_eq!(after, before, "the fetch scanned all of apalis.jobs");
    let queued: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM apalis.jobs WHERE status = 'Queued' AND lock_by = 'w1'",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("queued");
    assert_eq!(queued, 64);
}

/// Sequential scans and inserts of the tables a drain grows, as the statistics collector counts
/// them, once every connection's counts reached it (`inserted` journal entries).
async fn drain_table_scans(pool: &sqlx::PgPool, inserted: i64) -> Vec<(String, i64)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut conn = pool.acquire().await.expect("connection");
        sqlx::query("SELECT pg_stat_clear_snapshot()")
            .execute(&mut *conn)
            .await
            .expect("clear");
        let counted: i64 = sqlx::query_scalar(
            "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = 'journal_entries'::regclass",
        )
        .fetch_one(&mut *conn)
        .await
        .expect("inserts");
        if counted >= inserted {
            return sqlx::query_as(
                "SELECT relname::text, seq_scan FROM pg_stat_user_tables
                 WHERE relname IN ('journal_entries', 'journal_lines', 'job_attempts', 'settlement_events')
                 ORDER BY relname",
            )
            .fetch_all(&mut *conn)
            .await
            .expect("scans");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "statistics never counted {inserted} entries"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Starts and posts `jobs` in groups of 16, as a worker's groups do.
async fn start_and_post(store: &ledger::Store, jobs: &[ledger::job::JobRef]) {
    let rules = ledger::PostingRules::default();
    for group in jobs.chunks(16) {
        let starts: Vec<(ledger::job::JobRef, String)> = group
            .iter()
            .map(|job| (job.clone(), "test-worker".to_owned()))
            .collect();
        let started = store.start_attempts(&starts, 8, 5_000).await;
        assert!(
            started
                .iter()
                .all(|s| matches!(s, Ok(ledger::job::AttemptStart::Run { attempt: 1 }))),
            "{started:?}"
        );
        let posts: Vec<(ledger::job::JobRef, u32)> = group.iter().map(|j| (j.clone(), 1)).collect();
        let posted = store.post_many(&posts, &rules, 5_000).await;
        assert!(
            posted
                .iter()
                .all(|p| matches!(p, Ok(ledger::job::Posted::New { .. }))),
            "{posted:?}"
        );
    }
}

/// The drain collapse, kept out: a drain starts with the journal and `job_attempts` empty (as
/// statistics last saw them), and a connection keeps a statement's generic plan, and its
/// foreign-key checks' and triggers' plans, for as long as it lives. Planned while those tables
/// were empty, they scanned them whole on every posting, so each posting cost more than the one
/// before (~2,000 postings/s falling to ~120). The posting path must plan for the tables as they
/// are: after 4,000 postings on the same two connections, the next 300 read those tables by
/// index only.
#[tokio::test]
async fn postings_never_scan_the_tables_a_drain_grows() {
    let db = TestDb::create().await;
    let options = ledger::StoreOptions {
        connections_max: 2,
        ..ledger::StoreOptions::default()
    };
    let store = ledger::Store::connect(&db.url, &options)
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let events: Vec<ledger::NewEvent> = (0..4_300)
        .map(|n| tests::app::new_charge(&format!("msg_{n}"), &format!("ch_{n}"), "10.00"))
        .collect();
    for chunk in events.chunks(100) {
        let refs: Vec<&ledger::NewEvent> = chunk.iter().collect();
        store.record_new(&refs, 1_000).await.expect("recorded");
    }
    let pool = db.pool().await;
    sqlx::raw_sql("VACUUM ANALYZE")
        .execute(&pool)
        .await
        .expect("analyze: the journal and the attempts are empty");
    let jobs: Vec<ledger::job::JobRef> =
        sqlx::query_as::<_, (i64, String)>("SELECT id, job_id FROM settlement_events ORDER BY id")
            .fetch_all(&pool)
            .await
            .expect("jobs")
            .into_iter()
            .map(|(id, job_id)| ledger::job::JobRef {
                job_id,
                event_id: ledger::EventId::new(id),
            })
            .collect();
    start_and_post(&store, &jobs[..4_000]).await;
    let before = drain_table_scans(&pool, 4_000).await;
    start_and_post(&store, &jobs[4_000..]).await;
    store.close().await;
    let after = drain_table_scans(&pool, 4_300).await;
    let scanned: Vec<(String, i64)> = before
        .iter()
        .zip(&after)
        .map(|((table, b), (_, a))| (table.clone(), a - b))
        .filter(|(_, scans)| *scans > 0)
        .collect();
    assert!(
        scanned.is_empty(),
        "sequential scans while posting the last 300: {scanned:?}"
    );
}

/// Provider budgets are shared by the worker processes alive: the caller, registered or not,
/// and the other workers of the queue seen within the window.
#[tokio::test]
async fn the_fleet_size_is_the_caller_and_the_workers_seen_within_the_window() {
    let db = TestDb::create().await;
    let store = ledger::Store::connect(&db.url, &ledger::StoreOptions::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let window = std::time::Duration::from_secs(10);
    assert_eq!(
        store.live_workers(window, "me-").await.expect("count"),
        1,
        "none yet: the caller"
    );
    let pool = db.pool().await;
    sqlx::raw_sql(
        "INSERT INTO apalis.workers (id, worker_type, storage_name, last_seen) VALUES
             ('a', 'settle::PostSettlement', 'PgStorage', now()),
             ('b', 'settle::PostSettlement', 'PgStorage', now() - interval '2 seconds'),
             ('c', 'settle::PostSettlement', 'PgStorage', now() - interval '1 minute'),
             ('d', 'other::Queue', 'PgStorage', now()),
             ('me-0', 'settle::PostSettlement', 'PgStorage', now() - interval '1 minute'),
             ('me-1', 'settle::PostSettlement', 'PgStorage', now())",
    )
    .execute(&pool)
    .await
    .expect("workers");
    assert_eq!(
        store.live_workers(window, "me-").await.expect("count"),
        3,
        "the caller once (me-0 and me-1 are its own workers), a and b: c's heartbeat lapsed, d is another queue's"
    );
    store.close().await;
}
