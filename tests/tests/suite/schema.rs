//! The schema each backend's migrations make, against its checked-in description
//! (`migrations/schema/`), and the parts both backends must share. After an intended schema
//! change, `SETTLE_TEST_BLESS=1 cargo nextest run -p tests schema` rewrites the descriptions; the
//! change is then reviewed as their diff.

use ledger::{Store, StoreError, StoreOptions};
use sqlx::sqlite::SqlitePool;
use tests::TestDb;
use tests::db::SqliteFile;
use tests::schema::{
    describe_postgres, describe_sqlite, shape_postgres, shape_sqlite, snapshot_path,
};

async fn migrated(url: &str) -> Store {
    let store = Store::connect(url, &StoreOptions::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store
}

/// Compares `actual` with the backend's snapshot file (or rewrites the file when blessing).
fn check_snapshot(backend: &str, actual: &str) {
    let path = snapshot_path(backend);
    if std::env::var_os("SETTLE_TEST_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write the snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        let context = |text: &str| {
            text.lines()
                .skip(first.saturating_sub(3))
                .take(8)
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "the {backend} schema differs from {} from line {}:\n--- expected\n{}\n--- actual\n{}\n\
             (if the change is intended, rerun with SETTLE_TEST_BLESS=1 and review the diff)",
            path.display(),
            first + 1,
            context(&expected),
            context(actual),
        );
    }
}

#[tokio::test]
async fn the_postgres_schema_is_its_snapshot() {
    let db = TestDb::create().await;
    let store = migrated(&db.url).await;
    // Migrating again changes nothing.
    store.migrate().await.expect("migrate again");
    let pool = db.pool().await;
    check_snapshot("postgres", &describe_postgres(&pool).await);
    store.close().await;
}

#[tokio::test]
async fn the_sqlite_schema_is_its_snapshot() {
    let file = SqliteFile::create();
    let store = migrated(&file.url()).await;
    store.migrate().await.expect("migrate again");
    let pool = SqlitePool::connect(&file.url()).await.expect("open");
    check_snapshot("sqlite", &describe_sqlite(&pool).await);
    store.close().await;
}

#[tokio::test]
async fn both_backends_have_the_same_tables_columns_and_indexes() {
    let db = TestDb::create().await;
    let pg_store = migrated(&db.url).await;
    let file = SqliteFile::create();
    let sqlite_store = migrated(&file.url()).await;
    let postgres = shape_postgres(&db.pool().await).await;
    let mut sqlite = shape_sqlite(&SqlitePool::connect(&file.url()).await.expect("open")).await;
    // SQLite keeps each line's amount a second time in minor units, an integer it sums exactly
    // (PostgreSQL sums its NUMERIC exactly).
    let lines = sqlite
        .columns
        .get_mut("journal_lines")
        .expect("journal_lines");
    let minor = lines.iter().position(|(name, _)| name == "amount_minor");
    assert!(minor.is_some(), "journal_lines.amount_minor on SQLite");
    lines.retain(|(name, _)| name != "amount_minor");
    // Likewise the balances and receivables kept: SQLite's in minor units only.
    for kept in [
        "balance_deltas",
        "recorded_balance_deltas",
        "receivable_deltas",
    ] {
        let columns = sqlite.columns.get_mut(kept).expect(kept);
        for (name, _) in columns
            .iter_mut()
            .filter(|(name, _)| name == "amount_minor")
        {
            *name = "amount".to_owned();
        }
    }
    for (table, columns) in &postgres.columns {
        assert!(!columns.is_empty(), "{table} has columns");
        assert_eq!(
            Some(columns),
            sqlite.columns.get(table),
            "columns of {table} (name, NOT NULL)"
        );
    }
    for (table, indexes) in &postgres.indexes {
        assert_eq!(
            Some(indexes),
            sqlite.indexes.get(table),
            "indexes of {table}"
        );
    }
    assert_eq!(postgres, sqlite);
    pg_store.close().await;
    sqlite_store.close().await;
}

/// A store whose schema an earlier, superseded set of migrations made: `_sqlx_migrations` holds a
/// version this build does not know. Migrating refuses it, and so does the readiness check.
async fn refuses_a_superseded_schema(url: &str, insert: &str) {
    let store = migrated(url).await;
    match url.starts_with("sqlite:") {
        true => {
            let pool = SqlitePool::connect(url).await.expect("open");
            sqlx::query(sqlx::AssertSqlSafe(insert))
                .execute(&pool)
                .await
                .expect("add");
        }
        false => {
            let pool = sqlx::PgPool::connect(url).await.expect("open");
            sqlx::query(sqlx::AssertSqlSafe(insert))
                .execute(&pool)
                .await
                .expect("add");
        }
    }
    let refused = store.migrate().await.expect_err("migrating is refused");
    assert!(
        matches!(refused, StoreError::SchemaSuperseded(_)),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(message.contains("20261201000005"), "{message}");
    assert!(message.contains("recreate"), "{message}");
    let not_ready = store.ready().await.expect_err("not ready");
    assert!(
        matches!(not_ready, StoreError::SchemaSuperseded(_)),
        "{not_ready:?}"
    );
    store.close().await;
}

fn superseded(checksum: &str) -> String {
    format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (20261201000005, 'posting path', true, {checksum}, 1)"
    )
}

#[tokio::test]
async fn a_postgres_store_made_by_superseded_migrations_is_told_to_be_recreated() {
    let db = TestDb::create().await;
    refuses_a_superseded_schema(&db.url, &superseded("decode('00', 'hex')")).await;
}

#[tokio::test]
async fn a_sqlite_store_made_by_superseded_migrations_is_told_to_be_recreated() {
    let file = SqliteFile::create();
    refuses_a_superseded_schema(&file.url(), &superseded("X'00'")).await;
}
