//! PostgreSQL: the production store and the fleet's only shared state.

mod finance;
mod jobs;
mod movements;
mod posting;
mod record;
mod review;
pub(crate) mod roles;
mod verify;

use chrono::NaiveDate;
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions};

use super::{LoadRunCounts, StoreError, StoreOptions};
use crate::ids::EventId;
use crate::record::{NewEvent, Recorded};
use record::{insert_new, record_one};

/// apalis' own attempt limit, set out of reach: settle counts attempts itself (rescues included)
/// and dead-letters by its own rule, so apalis must never give up on a job by itself.
pub(super) const QUEUE_ATTEMPTS_MAX: i32 = 1_000_000;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Clone, Debug)]
pub(super) struct PgStore {
    pool: PgPool,
}

impl PgStore {
    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl crate::store::driver::Connection for PgStore {
    async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let connect = PgConnectOptions::from_str(url)?.application_name("settle");
        let pool = PgPoolOptions::new()
            .max_connections(options.connections_max)
            .acquire_timeout(options.acquire_timeout())
            .connect_with(connect)
            .await?;
        Ok(Self { pool })
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // One process migrates at a time; the others wait, then find nothing to do.
        let mut conn = self.pool.acquire().await?;
        sqlx::query("SELECT pg_advisory_lock(hashtext('settle.migrate'))")
            .execute(&mut *conn)
            .await?;
        let mut result = migrate_locked(&mut conn).await;
        // New tables get the runtime roles' grants (within the lock: grants to one object
        // from two sessions at once can fail).
        if result.is_ok() {
            result = match self.runtime_roles_exist().await {
                Ok(true) => self.grant(false).await,
                Ok(false) => Ok(()),
                Err(error) => Err(error),
            };
        }
        let unlock = sqlx::query("SELECT pg_advisory_unlock(hashtext('settle.migrate'))")
            .execute(&mut *conn)
            .await;
        result?;
        unlock?;
        Ok(())
    }

    async fn ready(&self) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        super::schema_state(&applied(&mut conn).await?, &MIGRATOR, None, false)?;
        // A standby (or a database set read-only) answers reads and refuses every write.
        let read_only: String =
            sqlx::query_scalar("SELECT current_setting('transaction_read_only')")
                .fetch_one(&mut *conn)
                .await?;
        match read_only.as_str() {
            "on" => Err(StoreError::ReadOnly),
            _ => Ok(()),
        }
    }

    async fn check_session_mode(&self, timeout: Duration) -> Result<(), StoreError> {
        let channel = format!(
            "settle_probe_{}",
            ulid::Ulid::generate().to_string().to_lowercase()
        );
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(&channel).await?;
        sqlx::query("SELECT pg_notify($1, 'probe')")
            .bind(&channel)
            .execute(&self.pool)
            .await?;
        let heard = tokio::time::timeout(timeout, listener.recv()).await;
        match heard {
            Ok(Ok(notification)) if notification.channel() == channel => Ok(()),
            Ok(Err(error)) => Err(error.into()),
            _ => Err(StoreError::SessionStateLost),
        }
    }
}

impl crate::store::driver::Recording for PgStore {
    async fn load_run_counts(
        &self,
        source: &str,
        prefix: &str,
    ) -> Result<LoadRunCounts, StoreError> {
        let (events, conflicted_events): (i64, i64) = sqlx::query_as(
            "SELECT count(*),
                    count(*) FILTER (WHERE EXISTS (SELECT 1 FROM event_conflicts c WHERE c.event_id = e.id))
             FROM settlement_events e WHERE source = $1 AND substr(external_id, 1, length($2)) = $2",
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
            sqlx::query_scalar("SELECT external_id FROM settlement_events WHERE id = $1")
                .bind(event_id.get())
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn record(&self, events: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        if let [event] = events {
            // One statement inserts the event and its job: it is its own transaction, and
            // `fetch_all` returns only after the server's ReadyForQuery, i.e. after COMMIT.
            return Ok(vec![record_one(&mut conn, event).await?]);
        }
        let mut tx = conn.begin().await?;
        // In key order (bytes, as collation "C" orders them), as group statements insert
        // theirs: no two writers wait in a cycle.
        let mut order: Vec<usize> = (0..events.len()).collect();
        order.sort_by_key(|&i| (events[i].source.as_str(), events[i].external_id.as_str()));
        let mut outcomes = vec![None; events.len()];
        for i in order {
            outcomes[i] = Some(record_one(&mut tx, &events[i]).await?);
        }
        tx.commit().await?;
        Ok(outcomes.into_iter().flatten().collect())
    }

    async fn record_new(
        &self,
        events: &[&NewEvent],
        lock_timeout_ms: u64,
    ) -> Result<Vec<Option<EventId>>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        // One statement: its own transaction, committed when `fetch_all` returns.
        insert_new(&mut conn, events, Some(lock_timeout_ms)).await
    }
}

impl crate::store::driver::FeedRows for PgStore {
    async fn feed_cursor(&self, source: &str, account: &str) -> Result<Option<i64>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT seq FROM feed_cursors WHERE source = $1 AND account = $2")
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
        let moved = match from {
            None => {
                sqlx::query(
                    "INSERT INTO feed_cursors (source, account, seq) VALUES ($1, $2, $3)
                 ON CONFLICT (source, account) DO NOTHING",
                )
                .bind(source)
                .bind(account)
                .bind(to)
                .execute(&self.pool)
                .await?
            }
            Some(from) => {
                sqlx::query(
                    "UPDATE feed_cursors SET seq = $4, updated_at = now()
                 WHERE source = $1 AND account = $2 AND seq = $3",
                )
                .bind(source)
                .bind(account)
                .bind(from)
                .bind(to)
                .execute(&self.pool)
                .await?
            }
        };
        Ok(moved.rows_affected() == 1)
    }

    async fn request_opening(
        &self,
        source: &str,
        since: NaiveDate,
    ) -> Result<Option<NaiveDate>, StoreError> {
        let since: Option<Option<NaiveDate>> = sqlx::query_scalar(
            "UPDATE feed_cursors SET opening_since = coalesce(opening_since, $2)
             WHERE source = $1 AND account = ''
             RETURNING opening_since",
        )
        .bind(source)
        .bind(since)
        .fetch_optional(&self.pool)
        .await?;
        Ok(since.flatten())
    }

    async fn opening_requested(&self, source: &str) -> Result<Option<NaiveDate>, StoreError> {
        let since: Option<Option<NaiveDate>> = sqlx::query_scalar(
            "SELECT opening_since FROM feed_cursors WHERE source = $1 AND account = ''",
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
             LEFT JOIN journal_lines l ON l.entry_id = e.id AND l.account = $2
             WHERE e.source_key = ANY($1) AND ($3::timestamptz IS NULL OR e.recorded_at <= $3)
             GROUP BY e.source_key",
        )
        .bind(keys)
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
             WHERE e.source = $1 AND e.effective_date >= $3 AND e.effective_date <= $4
               AND e.details IS NOT NULL AND e.reverses_entry_id IS NULL
               AND EXISTS (SELECT 1 FROM journal_lines l WHERE l.entry_id = e.id AND l.account = $2)
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
             WHERE source = $1 AND id > $4 AND (kind IS NULL OR kind NOT IN ($2, $3))
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
        let rows: Vec<(i64, String, Option<serde_json::Value>)> =
            sqlx::query_as("SELECT id, source, facts FROM settlement_events WHERE id = ANY($1)")
                .bind(&ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(id, source, facts)| (id, (source, facts)))
            .collect())
    }
}

impl super::transactions::Transactions for PgStore {
    type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

    async fn begin_write(&self) -> Result<Self::Tx, StoreError> {
        Ok(self.pool.begin().await?)
    }

    async fn commit(&self, tx: Self::Tx) -> Result<(), StoreError> {
        Ok(tx.commit().await?)
    }
}

async fn migrate_locked(conn: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS hstore")
        .execute(&mut *conn)
        .await?;
    apalis_postgres::PostgresStorage::migrations()
        .run(&mut *conn)
        .await?;
    super::schema_state(&applied(conn).await?, &MIGRATOR, None, true)?;
    MIGRATOR.run(&mut *conn).await?;
    Ok(())
}

/// The versions settle's migrations table lists as applied (none before the first migration;
/// the queue keeps its own in `apalis._sqlx_migrations`).
async fn applied(conn: &mut PgConnection) -> Result<Vec<i64>, StoreError> {
    let exists: bool =
        sqlx::query_scalar("SELECT to_regclass('public._sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(
        sqlx::query_scalar("SELECT version FROM public._sqlx_migrations WHERE success")
            .fetch_all(&mut *conn)
            .await?,
    )
}
