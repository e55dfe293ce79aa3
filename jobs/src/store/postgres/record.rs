//! The record path: an event and its job inserted by natural key in one statement.

use sqlx::Row;
use sqlx::postgres::PgConnection;

use super::{QUEUE_ATTEMPTS_MAX, StoreError};
use crate::fingerprint::Fingerprint;
use crate::ids::{ConflictId, EventId};
use crate::job::POST_SETTLEMENT_QUEUE;
use crate::record::{EventStatus, NewEvent, Recorded};
use crate::store::content_columns;

/// Inserts the event and its job by natural key, or classifies the replay.
pub(super) async fn record_one(
    conn: &mut PgConnection,
    event: &NewEvent,
) -> Result<Recorded, StoreError> {
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
