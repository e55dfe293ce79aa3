//! The record path: an event and its job inserted by natural key in one statement.

use sqlx::Row;
use sqlx::postgres::PgConnection;

use super::{QUEUE_ATTEMPTS_MAX, StoreError};
use crate::fingerprint::Fingerprint;
use crate::ids::{ConflictId, EventId};
use crate::job::POST_SETTLEMENT_QUEUE;
use crate::record::{NewEvent, Recorded};
use crate::state::EventStatus;
use crate::store::content_columns;

/// Inserts each event whose natural key is free, with its job, in one statement (so one
/// commit); returns the new event's id for each inserted, `None` for each whose key was taken
/// (by a committed event, or by an earlier event of the same call). Keys are inserted in the
/// byte order of their text (collation "C", whatever the database's), the order every multi-key
/// writer uses, so two such writers never wait on each other in a cycle. With
/// `lock_timeout_ms`, a key another transaction holds is waited for at most that long (then the
/// statement fails and keeps nothing); without, as long as the session's `lock_timeout` says.
pub(super) async fn insert_new(
    conn: &mut PgConnection,
    events: &[&NewEvent],
    lock_timeout_ms: Option<u64>,
) -> Result<Vec<Option<EventId>>, StoreError> {
    let n = events.len();
    let (mut sources, mut external_ids, mut kinds, mut movement_ids) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut fingerprints, mut facts, mut errors, mut payloads, mut job_ids) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for event in events {
        let (kind, movement_id, fact, error) = content_columns(&event.content);
        sources.push(event.source.as_str());
        external_ids.push(event.external_id.as_str());
        kinds.push(kind);
        movement_ids.push(movement_id);
        fingerprints.push(event.fingerprint().to_hex());
        facts.push(fact);
        errors.push(error);
        payloads.push(event.payload.as_str());
        job_ids.push(ulid::Ulid::generate().to_string());
    }
    // The lock timeout is set by a one-time filter of `input` (an InitPlan), which runs before
    // `input` yields its first row, so before the insert takes any key. `SET LOCAL` would need
    // an explicit transaction: two more round trips.
    let inserted: Vec<(i64, String)> = sqlx::query_as(
        "WITH input AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                                  $6::jsonb[], $7::text[], $8::text[], $9::text[])
                 WITH ORDINALITY
                 AS i(source, external_id, kind, movement_id, fingerprint, facts,
                      validation_error, payload, job_id, ord)
             WHERE (SELECT set_config('lock_timeout',
                                      coalesce($13, current_setting('lock_timeout')), true))
                   IS NOT NULL
         ), new_event AS (
             INSERT INTO settlement_events
                 (source, external_id, status, kind, movement_id, fingerprint, facts,
                  validation_error, payload, job_id)
             SELECT source, external_id, $10, kind, movement_id, fingerprint, facts,
                    validation_error, payload, job_id
             FROM input ORDER BY source COLLATE \"C\", external_id COLLATE \"C\", ord
             ON CONFLICT (source, external_id) DO NOTHING
             RETURNING id, job_id
         ), new_job AS (
             INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
             SELECT job_id, $11, convert_to(json_build_object('event_id', id)::text, 'UTF8'),
                    'Pending', 0, $12, now()
             FROM new_event
         )
         SELECT id, job_id FROM new_event",
    )
    .bind(&sources)
    .bind(&external_ids)
    .bind(&kinds)
    .bind(&movement_ids)
    .bind(&fingerprints)
    .bind(&facts)
    .bind(&errors)
    .bind(&payloads)
    .bind(&job_ids)
    .bind(EventStatus::Recorded.as_str())
    .bind(POST_SETTLEMENT_QUEUE)
    .bind(QUEUE_ATTEMPTS_MAX)
    .bind(lock_timeout_ms.map(|ms| format!("{ms}ms")))
    .fetch_all(&mut *conn)
    .await?;
    // Job ids are fresh per event: they say which events were inserted.
    Ok(job_ids
        .iter()
        .map(|job_id| {
            inserted
                .iter()
                .find(|(_, inserted_job)| inserted_job == job_id)
                .map(|(id, _)| EventId::new(*id))
        })
        .collect())
}

/// Inserts the event and its job by natural key, or classifies the replay.
pub(super) async fn record_one(
    conn: &mut PgConnection,
    event: &NewEvent,
) -> Result<Recorded, StoreError> {
    if let [Some(id)] = insert_new(conn, &[event], None).await?.as_slice() {
        return Ok(Recorded::New(*id));
    }
    let fingerprint = event.fingerprint();
    let (_, _, facts, validation_error) = content_columns(&event.content);

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
