//! SQLite: the embedded default, the whole system in one process with zero setup. One file in
//! WAL mode with `synchronous = FULL` (a 2xx means the commit reached the disk), a busy timeout,
//! and foreign keys on. Where PostgreSQL locks rows, SQLite takes the database's write lock at
//! the start of every writing transaction (`BEGIN IMMEDIATE`): writers run one after another, so
//! the same checks are never raced. Where PostgreSQL has LISTEN/NOTIFY, a committed job insert
//! wakes this process' workers directly.

mod finance;
mod jobs;
mod movements;
mod posting;
mod review;
mod verify;
use chrono::NaiveDate;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};
use tokio::sync::Notify;

use super::{LoadRunCounts, StoreError, StoreOptions, content_columns};
use crate::fingerprint::Fingerprint;
use crate::ids::{ConflictId, EventId};
use crate::job::POST_SETTLEMENT_QUEUE;
use crate::record::{NewEvent, Recorded};
use crate::state::EventStatus;

/// See the PostgreSQL store: apalis must never give up on a job by itself.
const QUEUE_ATTEMPTS_MAX: i64 = 1_000_000;
/// How long a writer waits for the write lock before the operation fails transiently.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A writing transaction holding this process' writer turn until it commits or is dropped
/// (rolled back).
pub(in crate::store) struct Write {
    tx: Transaction<'static, Sqlite>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Write {
    async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

impl std::ops::Deref for Write {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for Write {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }
}

impl super::transactions::Transactions for SqliteStore {
    type Tx = Write;

    async fn begin_write(&self) -> Result<Self::Tx, StoreError> {
        self.write().await
    }

    async fn commit(&self, tx: Self::Tx) -> Result<(), StoreError> {
        Ok(tx.commit().await?)
    }
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

#[derive(Clone, Debug)]
pub(super) struct SqliteStore {
    pool: SqlitePool,
    /// This process' writers take turns here, first come first served, before `BEGIN
    /// IMMEDIATE`: waiting on SQLite's own lock is a busy loop of sleeps (up to 100 ms each), in
    /// which a writer can lose its turn again and again (seen: deliveries waiting over a second
    /// behind group postings).
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Woken after a commit that inserted jobs.
    jobs_inserted: Arc<Notify>,
}

fn now() -> DateTime<Utc> {
    Utc::now()
}

impl SqliteStore {
    pub(super) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub(super) fn jobs_inserted(&self) -> Arc<Notify> {
        self.jobs_inserted.clone()
    }

    /// A writing transaction: the write lock is taken now, not at the first write, so two
    /// writers never deadlock upgrading their locks; this process' writers queue for it in
    /// order (waiting at most the busy timeout).
    async fn write(&self) -> Result<Write, StoreError> {
        let turn = tokio::time::timeout(BUSY_TIMEOUT, self.turn.clone().lock_owned())
            .await
            .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolTimedOut))?;
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        Ok(Write { tx, _turn: turn })
    }

    /// The versions `_sqlx_migrations` lists as applied, the queue's and settle's.
    async fn applied(&self) -> Result<Vec<i64>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await?,
        )
    }
}

impl crate::store::driver::Connection for SqliteStore {
    async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(options.connections_max.clamp(1, 8))
            .acquire_timeout(options.acquire_timeout())
            .connect_with(connect)
            .await?;
        Ok(Self {
            pool,
            turn: Arc::new(tokio::sync::Mutex::new(())),
            jobs_inserted: Arc::new(Notify::new()),
        })
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // Both migrators share `_sqlx_migrations` on SQLite; each ignores the other's rows.
        let mut queue = apalis_sqlite::SqliteStorage::migrations();
        queue.set_ignore_missing(true);
        queue.run(&self.pool).await?;
        super::schema_state(&self.applied().await?, &MIGRATOR, Some(&queue), true)?;
        let mut ours = sqlx::migrate!("../migrations/sqlite");
        ours.set_ignore_missing(true);
        ours.run(&self.pool).await?;
        Ok(())
    }

    async fn ready(&self) -> Result<(), StoreError> {
        let queue = apalis_sqlite::SqliteStorage::migrations();
        super::schema_state(&self.applied().await?, &MIGRATOR, Some(&queue), false)
    }

    /// One process owns the file and workers are woken in-process: no session state to check.
    async fn check_session_mode(&self, _timeout: Duration) -> Result<(), StoreError> {
        Ok(())
    }
}

impl crate::store::driver::Recording for SqliteStore {
    async fn load_run_counts(
        &self,
        source: &str,
        prefix: &str,
    ) -> Result<LoadRunCounts, StoreError> {
        let (events, conflicted_events): (i64, i64) = sqlx::query_as(
            "SELECT count(*),
                    coalesce(sum(EXISTS (SELECT 1 FROM event_conflicts c WHERE c.event_id = e.id)), 0)
             FROM settlement_events e WHERE source = ?1 AND substr(external_id, 1, length(?2)) = ?2",
        )
        .bind(source)
        .bind(prefix)
        .fetch_one(&self.pool)
        .await?;
        Ok(LoadRunCounts {
            events,
            conflicted_events,
        })
    }

    async fn external_id(&self, event_id: EventId) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT external_id FROM settlement_events WHERE id = ?1")
                .bind(event_id.get())
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn record(&self, events: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        let mut tx = self.write().await?;
        let mut outcomes = Vec::with_capacity(events.len());
        for event in events {
            outcomes.push(record_one(&mut tx, event).await?);
        }
        tx.commit().await?;
        if outcomes.iter().any(|o| matches!(o, Recorded::New(_))) {
            self.jobs_inserted.notify_waiters();
        }
        Ok(outcomes)
    }

    /// Every event whose key is free, with its job, in one write transaction (one commit).
    async fn record_new(
        &self,
        events: &[&NewEvent],
        _lock_timeout_ms: u64,
    ) -> Result<Vec<Option<EventId>>, StoreError> {
        let mut tx = self.write().await?;
        let mut inserted = Vec::with_capacity(events.len());
        for event in events {
            inserted.push(insert_new(&mut tx, event).await?);
        }
        tx.commit().await?;
        if inserted.iter().any(Option::is_some) {
            self.jobs_inserted.notify_waiters();
        }
        Ok(inserted)
    }
}

impl crate::store::driver::FeedRows for SqliteStore {
    async fn feed_cursor(&self, source: &str, account: &str) -> Result<Option<i64>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT seq FROM feed_cursors WHERE source = ?1 AND account = ?2")
                .bind(source)
                .bind(account)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn advance_feed_cursor(
        &self,
        source: &str,
        account: &str,
        from: Option<i64>,
        to: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let moved = match from {
            None => sqlx::query(
                "INSERT INTO feed_cursors (source, account, seq, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (source, account) DO NOTHING",
            )
            .bind(source)
            .bind(account)
            .bind(to)
            .bind(now())
            .execute(&mut *tx)
            .await?,
            Some(from) => sqlx::query(
                "UPDATE feed_cursors SET seq = ?4, updated_at = ?5
                 WHERE source = ?1 AND account = ?2 AND seq = ?3",
            )
            .bind(source)
            .bind(account)
            .bind(from)
            .bind(to)
            .bind(now())
            .execute(&mut *tx)
            .await?,
        };
        tx.commit().await?;
        Ok(moved.rows_affected() == 1)
    }

    async fn request_opening(
        &self,
        source: &str,
        since: NaiveDate,
    ) -> Result<Option<NaiveDate>, StoreError> {
        let mut tx = self.write().await?;
        let since: Option<Option<NaiveDate>> = sqlx::query_scalar(
            "UPDATE feed_cursors SET opening_since = coalesce(opening_since, ?2)
             WHERE source = ?1 AND account = ''
             RETURNING opening_since",
        )
        .bind(source)
        .bind(since)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(since.flatten())
    }

    async fn opening_requested(&self, source: &str) -> Result<Option<NaiveDate>, StoreError> {
        let since: Option<Option<NaiveDate>> = sqlx::query_scalar(
            "SELECT opening_since FROM feed_cursors WHERE source = ?1 AND account = ''",
        )
        .bind(source)
        .fetch_optional(&self.pool)
        .await?;
        Ok(since.flatten())
    }

    async fn booked(
        &self,
        keys: &[String],
        account: &str,
        recorded_by: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT e.source_key, CAST(coalesce(sum(l.amount), 0) AS TEXT) FROM journal_entries e
             LEFT JOIN journal_lines l ON l.entry_id = e.id AND l.account = ?2
             WHERE e.source_key IN (SELECT value FROM json_each(?1))
               AND (?3 IS NULL OR e.recorded_at <= ?3)
             GROUP BY e.source_key",
        )
        .bind(serde_json::to_string(keys).map_err(|e| StoreError::Corrupt(e.to_string()))?)
        .bind(account)
        .bind(recorded_by)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn booked_between(
        &self,
        source: &str,
        account: &str,
        from: NaiveDate,
        to: NaiveDate,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT e.source_key, e.movement_id FROM journal_entries e
             WHERE e.source = ?1 AND e.effective_date >= ?3 AND e.effective_date <= ?4
               AND e.details IS NOT NULL AND e.reverses_entry_id IS NULL
               AND EXISTS (SELECT 1 FROM journal_lines l WHERE l.entry_id = e.id AND l.account = ?2)
             ORDER BY e.effective_date, e.id",
        )
        .bind(source)
        .bind(account)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn newest_delivery(
        &self,
        source: &str,
        after: EventId,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT received_at FROM settlement_events
             WHERE source = ?1 AND id > ?4 AND (kind IS NULL OR kind NOT IN (?2, ?3))
             ORDER BY id DESC LIMIT 1",
        )
        .bind(source)
        .bind(crate::feed::WINDOW_KIND)
        .bind(crate::feed::OPENING_KIND)
        .bind(after.get())
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The source and stored facts of each event (`None` for an event recorded invalid).
    async fn facts_of(
        &self,
        events: &[crate::ids::EventId],
    ) -> Result<HashMap<i64, (String, Option<serde_json::Value>)>, StoreError> {
        let ids: Vec<i64> = events.iter().map(|e| e.get()).collect();
        let rows: Vec<(i64, String, Option<serde_json::Value>)> = sqlx::query_as(
            "SELECT id, source, facts FROM settlement_events WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_default())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, source, facts)| (id, (source, facts)))
            .collect())
    }
}

/// Inserts the event and its job if its natural key is free; `None` if it is taken.
async fn insert_new(
    conn: &mut SqliteConnection,
    event: &NewEvent,
) -> Result<Option<EventId>, StoreError> {
    let (kind, movement_id, facts, validation_error) = content_columns(&event.content);
    let job_id = ulid::Ulid::generate().to_string();
    let at = now();
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO settlement_events
             (source, external_id, status, kind, movement_id, fingerprint, facts, validation_error, payload,
              job_id, received_at, status_changed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)
         ON CONFLICT (source, external_id) DO NOTHING
         RETURNING id",
    )
    .bind(event.source.as_str())
    .bind(event.external_id.as_str())
    .bind(EventStatus::Recorded.as_str())
    .bind(kind)
    .bind(movement_id)
    .bind(event.fingerprint().to_hex())
    .bind(facts.as_ref().map(|f| f.to_string()))
    .bind(&validation_error)
    .bind(&event.payload)
    .bind(&job_id)
    .bind(at)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(id) = inserted else {
        return Ok(None);
    };
    insert_job(conn, &job_id, id).await?;
    Ok(Some(EventId::new(id)))
}

async fn record_one(conn: &mut SqliteConnection, event: &NewEvent) -> Result<Recorded, StoreError> {
    if let Some(id) = insert_new(conn, event).await? {
        return Ok(Recorded::New(id));
    }
    let fingerprint = event.fingerprint().to_hex();
    let (_, _, facts, validation_error) = content_columns(&event.content);
    let at = now();
    let row = sqlx::query(
        "SELECT id, fingerprint FROM settlement_events WHERE source = ?1 AND external_id = ?2",
    )
    .bind(event.source.as_str())
    .bind(event.external_id.as_str())
    .fetch_one(&mut *conn)
    .await?;
    let event_id = EventId::new(row.try_get("id")?);
    let stored: String = row.try_get("fingerprint")?;
    let stored = Fingerprint::parse_hex(&stored)
        .map_err(|e| StoreError::Corrupt(format!("event {event_id}: {e}")))?;
    if stored.to_hex() == fingerprint {
        return Ok(Recorded::Duplicate(event_id));
    }
    let conflict_id: i64 = sqlx::query_scalar(
        "INSERT INTO event_conflicts (event_id, fingerprint, facts, validation_error, payload, first_seen_at, last_seen_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
         ON CONFLICT (event_id, fingerprint) DO UPDATE
             SET deliveries = deliveries + 1, last_seen_at = excluded.last_seen_at
         RETURNING id",
    )
    .bind(event_id.get())
    .bind(&fingerprint)
    .bind(facts.as_ref().map(|f| f.to_string()))
    .bind(&validation_error)
    .bind(&event.payload)
    .bind(at)
    .fetch_one(&mut *conn)
    .await?;
    Ok(Recorded::Conflict {
        event_id,
        conflict_id: ConflictId::new(conflict_id),
    })
}

/// Inserts the event's job into apalis-sqlite's `Jobs` table, due now.
async fn insert_job(
    conn: &mut SqliteConnection,
    job_id: &str,
    event_id: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO Jobs (job, id, job_type, status, attempts, max_attempts, run_at, priority)
         VALUES (CAST(json_object('event_id', ?1) AS BLOB), ?2, ?3, 'Pending', 0, ?4, ?5, 0)",
    )
    .bind(event_id)
    .bind(job_id)
    .bind(POST_SETTLEMENT_QUEUE)
    .bind(QUEUE_ATTEMPTS_MAX)
    .bind(now().timestamp())
    .execute(&mut *conn)
    .await?;
    Ok(())
}
