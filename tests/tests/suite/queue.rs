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
    let store = jobs::Store::connect(&db.url, &jobs::StoreOptions::default())
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
