//! PostgreSQL: the production store and the fleet's only shared state.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Row};

use super::{POST_SETTLEMENT_QUEUE, StoreError, StoreOptions};
use crate::fingerprint::Fingerprint;
use crate::ids::{ConflictId, EventId};
use crate::record::{Content, EventStatus, NewEvent, Recorded};

/// apalis' own attempt limit, set out of reach: settle counts attempts itself (rescues included)
/// and dead-letters by its own rule, so apalis must never give up on a job by itself.
const QUEUE_ATTEMPTS_MAX: i32 = 1_000_000;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Clone, Debug)]
pub(super) struct PgStore {
    pool: PgPool,
}

impl PgStore {
    pub(super) async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let connect = PgConnectOptions::from_str(url)?.application_name("settle");
        let pool = PgPoolOptions::new()
            .max_connections(options.connections_max)
            .acquire_timeout(options.acquire_timeout())
            .connect_with(connect)
            .await?;
        Ok(Self { pool })
    }

    pub(super) async fn close(&self) {
        self.pool.close().await;
    }

    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        // One process migrates at a time; the others wait, then find nothing to do.
        let mut conn = self.pool.acquire().await?;
        sqlx::query("SELECT pg_advisory_lock(hashtext('settle.migrate'))")
            .execute(&mut *conn)
            .await?;
        let result = migrate_locked(&mut conn).await;
        let unlock = sqlx::query("SELECT pg_advisory_unlock(hashtext('settle.migrate'))")
            .execute(&mut *conn)
            .await;
        result?;
        unlock?;
        Ok(())
    }

    pub(super) async fn ready(&self) -> Result<(), StoreError> {
        let applied: Vec<i64> = sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&self.pool)
        .await?;
        let pending: Vec<String> = MIGRATOR
            .iter()
            .filter(|m| !applied.contains(&m.version))
            .map(|m| format!("{}_{}", m.version, m.description))
            .collect();
        if pending.is_empty() {
            Ok(())
        } else {
            Err(StoreError::MigrationsPending(pending.join(", ")))
        }
    }

    pub(super) async fn record(&self, events: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        if let [event] = events {
            // One statement inserts the event and its job: it is its own transaction, and
            // `fetch_all` returns only after the server's ReadyForQuery, i.e. after COMMIT.
            return Ok(vec![record_one(&mut conn, event).await?]);
        }
        let mut tx = conn.begin().await?;
        let mut outcomes = Vec::with_capacity(events.len());
        for event in events {
            outcomes.push(record_one(&mut tx, event).await?);
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}

async fn migrate_locked(conn: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS hstore")
        .execute(&mut *conn)
        .await?;
    apalis_postgres::PostgresStorage::migrations()
        .run(&mut *conn)
        .await?;
    MIGRATOR.run(&mut *conn).await?;
    Ok(())
}

/// Inserts the event and its job by natural key, or classifies the replay.
async fn record_one(conn: &mut PgConnection, event: &NewEvent) -> Result<Recorded, StoreError> {
    let fingerprint = event.fingerprint();
    let (kind, movement_id, facts, validation_error) = content_columns(&event.content);
    let job_id = ulid::Ulid::generate().to_string();
    let inserted: Vec<i64> = sqlx::query_scalar(
        "WITH new_event AS (
             INSERT INTO settlement_events
                 (source, external_id, status, kind, movement_id, fingerprint, facts,
                  validation_error, payload, job_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (source, external_id) DO NOTHING
             RETURNING id, job_id
         ), new_job AS (
             INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
             SELECT job_id, $11, convert_to(json_build_object('event_id', id)::text, 'UTF8'),
                    'Pending', 0, $12, now()
             FROM new_event
         )
         SELECT id FROM new_event",
    )
    .bind(event.source.as_str())
    .bind(event.external_id.as_str())
    .bind(EventStatus::Recorded.as_str())
    .bind(kind)
    .bind(movement_id)
    .bind(fingerprint.to_hex())
    .bind(&facts)
    .bind(&validation_error)
    .bind(&event.payload)
    .bind(&job_id)
    .bind(POST_SETTLEMENT_QUEUE)
    .bind(QUEUE_ATTEMPTS_MAX)
    .fetch_all(&mut *conn)
    .await?;
    if let Some(&id) = inserted.first() {
        return Ok(Recorded::New(EventId::new(id)));
    }

    // The key exists (ON CONFLICT waited for its writer to commit, so this statement sees it).
    let existing = sqlx::query(
        "SELECT id, fingerprint FROM settlement_events WHERE source = $1 AND external_id = $2",
    )
    .bind(event.source.as_str())
    .bind(event.external_id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let row = existing
        .first()
        .ok_or_else(|| StoreError::Corrupt("event vanished between insert and read".into()))?;
    let event_id = EventId::new(row.try_get("id")?);
    let stored: String = row.try_get("fingerprint")?;
    let stored = Fingerprint::parse_hex(&stored)
        .map_err(|e| StoreError::Corrupt(format!("event {event_id}: {e}")))?;
    if stored == fingerprint {
        return Ok(Recorded::Duplicate(event_id));
    }

    let conflict: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO event_conflicts (event_id, fingerprint, facts, validation_error, payload)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (event_id, fingerprint) DO UPDATE
             SET deliveries = event_conflicts.deliveries + 1, last_seen_at = now()
         RETURNING id",
    )
    .bind(event_id.get())
    .bind(fingerprint.to_hex())
    .bind(&facts)
    .bind(&validation_error)
    .bind(&event.payload)
    .fetch_all(&mut *conn)
    .await?;
    let conflict_id = conflict
        .first()
        .map(|&id| ConflictId::new(id))
        .ok_or_else(|| StoreError::Corrupt("conflict insert returned no row".into()))?;
    Ok(Recorded::Conflict {
        event_id,
        conflict_id,
    })
}

/// `(kind, movement_id, facts, validation_error)` as stored.
fn content_columns(
    content: &Content,
) -> (
    Option<&str>,
    Option<&str>,
    Option<serde_json::Value>,
    Option<String>,
) {
    match content {
        Content::Valid(event) => (
            Some(event.kind().as_str()),
            Some(event.movement_id().as_str()),
            Some(event.to_canonical()),
            None,
        ),
        Content::Invalid(invalid) => (
            invalid.kind.as_deref(),
            None,
            None,
            Some(invalid.error.to_string()),
        ),
    }
}
