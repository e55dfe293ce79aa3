//! The `PostSettlement` job's storage on SQLite (see the PostgreSQL module for the contract):
//! every writing transaction holds the database's write lock, which is what PostgreSQL's row
//! locks give there.

use sqlx::sqlite::SqliteConnection;

use super::{SqliteStore, insert_job, now};
use crate::ids::EventId;
use crate::job::{
    AttemptOutcome, AttemptStart, ErrorClass, JobRef, QueueStatus, start_gate, start_step,
};
use crate::post_error::PostError;
use crate::state::EventStatus;
use crate::state::{AttemptState, StateMachine, Transition};
use crate::store::StoreError;
use crate::store::failures::FailureRows;
use crate::store::start::StartRows;

const DIED: &str = "the worker stopped before finishing this attempt (its lease expired)";

impl crate::store::driver::Queue for SqliteStore {
    async fn sweep(&self, grace_secs: u64, batch_max: u32) -> Result<u64, StoreError> {
        let mut tx = self.write().await?;
        let cutoff =
            now() - chrono::Duration::seconds(i64::try_from(grace_secs).unwrap_or(i64::MAX / 2));
        let stranded: Vec<i64> = sqlx::query_scalar(
            "SELECT e.id FROM settlement_events e LEFT JOIN Jobs j ON j.id = e.job_id
             WHERE e.status = ?1 AND e.received_at < ?2
               AND (j.id IS NULL OR j.status IN ('Done', 'Killed') OR (j.status = 'Failed' AND j.attempts >= j.max_attempts))
             ORDER BY e.id LIMIT ?3",
        )
        .bind(EventStatus::Recorded.as_str())
        .bind(cutoff)
        .bind(i64::from(batch_max))
        .fetch_all(&mut *tx)
        .await?;
        let count = enqueue_fresh_jobs(&mut tx, &stranded).await?;
        tx.commit().await?;
        if count > 0 {
            self.jobs_inserted.notify_waiters();
        }
        Ok(count)
    }
}

/// An attempt's start (see `Store::start_attempt`), in the caller's write transaction.
async fn start_in(
    conn: &mut SqliteConnection,
    job: &JobRef,
    worker: &str,
    attempts_max: u32,
    alone: bool,
) -> Result<AttemptStart, StoreError> {
    let event = event_state(&mut *conn, job.event_id).await?;
    let waits = matches!(&event, Some((EventStatus::Recorded, current)) if *current == job.job_id);
    let paused = waits && source_paused(&mut *conn, job.event_id).await?;
    match start_gate(
        event.as_ref().map(|(s, j)| (*s, j.as_str())),
        &job.job_id,
        paused,
    ) {
        Some(AttemptStart::Stray) => {
            kill_job(&mut *conn, &job.job_id).await?;
            return Ok(AttemptStart::Stray);
        }
        Some(AttemptStart::Paused) => return Ok(AttemptStart::Paused),
        Some(answer) => {
            complete_job(&mut *conn, &job.job_id).await?;
            return Ok(answer);
        }
        None => {}
    }
    let died: Vec<i64> = sqlx::query_scalar(
            "UPDATE job_attempts SET finished_at = ?2, outcome = ?3, error_code = 'worker_died', error = ?4
             WHERE job_id = ?1 AND finished_at IS NULL RETURNING attempt",
        )
        .bind(&job.job_id)
        .bind(now())
        .bind(AttemptState::Started.transition(AttemptState::Died)?.to().label())
        .bind(DIED)
        .fetch_all(&mut *conn)
        .await?;
    // The last attempt, read once: how many have started, and how the last one ended.
    let last: Option<(i64, Option<String>)> = sqlx::query_as(
        "SELECT attempt, outcome FROM job_attempts WHERE job_id = ?1 ORDER BY attempt DESC LIMIT 1",
    )
    .bind(&job.job_id)
    .fetch_optional(&mut *conn)
    .await?;
    let (started, last_outcome) = last.unwrap_or((0, None));
    let started = u32::try_from(started).unwrap_or(0);
    let last_outcome = last_outcome.as_deref().and_then(AttemptOutcome::parse);
    let answer = start_step(started, died.len(), last_outcome, attempts_max, alone);
    match answer {
        AttemptStart::Exhausted => {
            let (code, error) = last_error(&mut *conn, &job.job_id).await?;
            abandon(
                &mut *conn,
                job,
                ErrorClass::Exhausted,
                &code,
                &error,
                started,
            )
            .await?;
            kill_job(&mut *conn, &job.job_id).await?;
        }
        AttemptStart::Run { attempt } => {
            sqlx::query("INSERT INTO job_attempts (event_id, job_id, attempt, worker, started_at) VALUES (?1, ?2, ?3, ?4, ?5)")
                .bind(job.event_id.get())
                .bind(&job.job_id)
                .bind(i64::from(attempt))
                .bind(worker)
                .bind(now())
                .execute(&mut *conn)
                .await?;
        }
        _ => {}
    }
    Ok(answer)
}

/// Points each event at a fresh job and inserts those jobs. Returns the new job ids.
pub(super) async fn enqueue_fresh_jobs(
    conn: &mut SqliteConnection,
    event_ids: &[i64],
) -> Result<u64, StoreError> {
    for &event_id in event_ids {
        let job_id = ulid::Ulid::generate().to_string();
        sqlx::query("UPDATE settlement_events SET job_id = ?2 WHERE id = ?1")
            .bind(event_id)
            .bind(&job_id)
            .execute(&mut *conn)
            .await?;
        insert_job(conn, &job_id, event_id).await?;
    }
    Ok(event_ids.len() as u64)
}

/// Writes a move of the event state machine (made by `StateMachine::transition`): refused when
/// the event is no longer in the move's `from` state.
pub(super) async fn set_event_status(
    conn: &mut SqliteConnection,
    event_id: EventId,
    transition: Transition<EventStatus>,
    posted_entry_id: Option<i64>,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE settlement_events
         SET status = ?3, status_changed_at = ?4, posted_entry_id = coalesce(?5, posted_entry_id)
         WHERE id = ?1 AND status = ?2",
    )
    .bind(event_id.get())
    .bind(transition.from().label())
    .bind(transition.to().label())
    .bind(now())
    .bind(posted_entry_id)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(transition.stale())
    }
}

/// Whether the event's source is paused.
async fn source_paused(conn: &mut SqliteConnection, event_id: EventId) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM source_pauses p JOIN settlement_events e ON e.source = p.source
                        WHERE e.id = ?1 AND p.resumed_at IS NULL)",
    )
    .bind(event_id.get())
    .fetch_one(&mut *conn)
    .await?)
}

async fn event_state(
    conn: &mut SqliteConnection,
    event_id: EventId,
) -> Result<Option<(EventStatus, String)>, StoreError> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT status, job_id FROM settlement_events WHERE id = ?1")
            .bind(event_id.get())
            .fetch_optional(&mut *conn)
            .await?;
    row.map(|(status, job_id)| {
        EventStatus::parse(&status)
            .map(|status| (status, job_id))
            .ok_or_else(|| StoreError::Corrupt(format!("event {event_id} has status {status:?}")))
    })
    .transpose()
}

async fn abandon(
    conn: &mut SqliteConnection,
    job: &JobRef,
    class: ErrorClass,
    code: &str,
    error: &str,
    attempts: u32,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO dead_letters (event_id, job_id, error_class, error_code, last_error, attempts, abandoned_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .bind(job.event_id.get())
    .bind(&job.job_id)
    .bind(class.as_str())
    .bind(code)
    .bind(error)
    .bind(i64::from(attempts))
    .bind(now())
    .execute(&mut *conn)
    .await?;
    set_event_status(
        conn,
        job.event_id,
        EventStatus::Recorded.transition(EventStatus::Abandoned)?,
        None,
    )
    .await
}

pub(super) async fn finish_attempt(
    conn: &mut SqliteConnection,
    job: &JobRef,
    attempt: u32,
    outcome: AttemptOutcome,
    error: Option<&PostError>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE job_attempts SET finished_at = ?3, outcome = ?4, error_code = ?5, error = ?6
         WHERE job_id = ?1 AND attempt = ?2",
    )
    .bind(&job.job_id)
    .bind(i64::from(attempt))
    .bind(now())
    .bind(
        AttemptState::Started
            .transition(outcome.into())?
            .to()
            .label(),
    )
    .bind(error.map(PostError::code))
    .bind(error.map(ToString::to_string))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn last_error(
    conn: &mut SqliteConnection,
    job_id: &str,
) -> Result<(String, String), StoreError> {
    let row: Option<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT error_code, error FROM job_attempts WHERE job_id = ?1 ORDER BY attempt DESC LIMIT 1")
            .bind(job_id)
            .fetch_optional(&mut *conn)
            .await?;
    let (code, error) = row.unwrap_or_default();
    Ok((
        code.unwrap_or_else(|| "attempts_exhausted".into()),
        error.unwrap_or_else(|| "every attempt was used".into()),
    ))
}

/// Gives the job back to the queue, due in `delay_ms`, if `worker` still holds it (a killed job
/// stays killed, a deleted one gone). apalis-sqlite counts `run_at` in whole seconds: the due
/// instant is rounded up to the next whole second, so the job never runs sooner than asked (a
/// provider's `Retry-After` included).
async fn retry_later(
    conn: &mut SqliteConnection,
    job_id: &str,
    worker: &str,
    delay_ms: u64,
) -> Result<(), StoreError> {
    let due_ms = now()
        .timestamp_millis()
        .saturating_add(i64::try_from(delay_ms).unwrap_or(i64::MAX / 2));
    let run_at = due_ms.div_euclid(1000) + i64::from(due_ms.rem_euclid(1000) > 0);
    sqlx::query(
        "UPDATE Jobs SET status = ?3, run_at = ?2, lock_by = NULL, lock_at = NULL
         WHERE id = ?1 AND lock_by = ?5 AND status <> ?4",
    )
    .bind(job_id)
    .bind(run_at)
    .bind(
        QueueStatus::Queued
            .transition(QueueStatus::Pending)?
            .to()
            .label(),
    )
    .bind(QueueStatus::Killed.label())
    .bind(worker)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The job settled its event: its queue row goes, in the transaction that settled it.
pub(super) async fn complete_job(
    conn: &mut SqliteConnection,
    job_id: &str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM Jobs WHERE id = ?1")
        .bind(job_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Nothing runs the job again: its row is kept, `Killed`.
async fn kill_job(conn: &mut SqliteConnection, job_id: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE Jobs SET status = ?2, done_at = ?3 WHERE id = ?1")
        .bind(job_id)
        .bind(
            QueueStatus::Queued
                .transition(QueueStatus::Killed)?
                .to()
                .label(),
        )
        .bind(now().timestamp())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl FailureRows for SqliteStore {
    async fn finish_attempt(
        tx: &mut Self::Tx,
        job: &JobRef,
        attempt: u32,
        outcome: AttemptOutcome,
        error: Option<&PostError>,
    ) -> Result<(), StoreError> {
        finish_attempt(tx, job, attempt, outcome, error).await
    }

    async fn retry_later(
        tx: &mut Self::Tx,
        job_id: &str,
        worker: &str,
        delay_ms: u64,
    ) -> Result<(), StoreError> {
        retry_later(tx, job_id, worker, delay_ms).await
    }

    async fn event_state(
        tx: &mut Self::Tx,
        event_id: EventId,
    ) -> Result<Option<(EventStatus, String)>, StoreError> {
        event_state(tx, event_id).await
    }

    async fn recorded_event_of_job(
        tx: &mut Self::Tx,
        job_id: &str,
    ) -> Result<Option<EventId>, StoreError> {
        Ok(
            sqlx::query_scalar(
                "SELECT id FROM settlement_events WHERE job_id = ?1 AND status = ?2",
            )
            .bind(job_id)
            .bind(EventStatus::Recorded.label())
            .fetch_optional(&mut **tx)
            .await?
            .map(EventId::new),
        )
    }

    async fn abandon(
        tx: &mut Self::Tx,
        job: &JobRef,
        class: ErrorClass,
        error: &PostError,
        attempts: u32,
    ) -> Result<(), StoreError> {
        abandon(tx, job, class, error.code(), &error.to_string(), attempts).await
    }

    async fn kill_job(tx: &mut Self::Tx, job_id: &str) -> Result<(), StoreError> {
        kill_job(tx, job_id).await
    }
}

impl StartRows for SqliteStore {
    /// Waiting for the write lock is bounded by the busy timeout, not `lock_timeout_ms`.
    async fn start_one(
        &self,
        job: &JobRef,
        worker: &str,
        attempts_max: u32,
        _lock_timeout_ms: u64,
        alone: bool,
    ) -> Result<AttemptStart, StoreError> {
        let mut tx = self.write().await?;
        let start = start_in(&mut tx, job, worker, attempts_max, alone).await?;
        tx.commit().await?;
        Ok(start)
    }

    async fn start_group(
        &self,
        starts: &[(JobRef, String)],
        attempts_max: u32,
        _lock_timeout_ms: u64,
    ) -> Result<Vec<Result<AttemptStart, StoreError>>, StoreError> {
        // The write lock is the whole database's: no order to keep among the events.
        let mut tx = self.write().await?;
        let mut results = Vec::with_capacity(starts.len());
        for (job, worker) in starts {
            results.push(Ok(
                start_in(&mut tx, job, worker, attempts_max, false).await?
            ));
        }
        tx.commit().await?;
        Ok(results)
    }
}
