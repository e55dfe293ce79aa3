//! The `PostSettlement` job's storage on PostgreSQL: attempts started, the rows a posting and a
//! failure read and write (`store::post`, `store::failures` decide what), and the sweep that
//! re-enqueues stranded events.

use sqlx::postgres::PgConnection;

use super::{PgStore, QUEUE_ATTEMPTS_MAX};
use crate::ids::EventId;
use crate::job::{
    AttemptOutcome, AttemptStart, ErrorClass, JobRef, POST_SETTLEMENT_QUEUE, QueueStatus,
};
use crate::post_error::PostError;
use crate::state::EventStatus;
use crate::state::{AttemptState, StateMachine, Transition};
use crate::store::StoreError;
use crate::store::failures::FailureRows;
use crate::store::prepare::EventRow;
use crate::store::start::StartRows;

/// The error a died attempt is recorded with.
const DIED: &str = "the worker stopped before finishing this attempt (its lease expired)";

impl crate::store::driver::Queue for PgStore {
    async fn sweep(&self, grace_secs: u64, batch_max: u32) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let stranded: Vec<i64> = sqlx::query_scalar(
            "SELECT e.id FROM settlement_events e
             LEFT JOIN apalis.jobs j ON j.id = e.job_id
             WHERE e.status = $1
               AND e.received_at < now() - $2 * interval '1 second'
               AND (j.id IS NULL OR j.status IN ('Done', 'Killed')
                    OR (j.status = 'Failed' AND j.attempts >= j.max_attempts))
             ORDER BY e.id
             LIMIT $3
             FOR UPDATE OF e SKIP LOCKED",
        )
        .bind(EventStatus::Recorded.as_str())
        .bind(i64::try_from(grace_secs).unwrap_or(i64::MAX))
        .bind(i64::from(batch_max))
        .fetch_all(&mut *tx)
        .await?;
        let count = enqueue_fresh_jobs(&mut tx, &stranded).await?;
        tx.commit().await?;
        Ok(count)
    }
}

fn attempts_max_param(attempts_max: u32) -> i32 {
    i32::try_from(attempts_max).unwrap_or(i32::MAX)
}

/// Reads one answer of `settle_start_attempt`.
fn attempt_start(outcome: &str, attempt: i32) -> Result<AttemptStart, StoreError> {
    let attempts = u32::try_from(attempt).unwrap_or(0);
    match outcome {
        "run" => Ok(AttemptStart::Run { attempt: attempts }),
        "suspect" => Ok(AttemptStart::Suspect),
        "rescued" => Ok(AttemptStart::Rescued { attempts }),
        "paused" => Ok(AttemptStart::Paused),
        "exhausted" => Ok(AttemptStart::Exhausted),
        "nothing_to_do" => Ok(AttemptStart::NothingToDo),
        "stray" => Ok(AttemptStart::Stray),
        other => Err(StoreError::Corrupt(format!(
            "settle_start_attempt answered {other:?}"
        ))),
    }
}

/// Locks the events (in id order, so concurrent groups never deadlock) and reads them.
pub(super) async fn lock_events(
    conn: &mut PgConnection,
    ids: &[i64],
) -> Result<Vec<EventRow>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, source, status, job_id, facts, validation_error, received_at
         FROM settlement_events WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?)
}

/// Points each event at a fresh job and inserts those jobs (their insert notifies workers).
pub(super) async fn enqueue_fresh_jobs(
    conn: &mut PgConnection,
    event_ids: &[i64],
) -> Result<u64, StoreError> {
    if event_ids.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(
        "WITH moved AS (
             UPDATE settlement_events SET job_id = apalis.generate_ulid()
             WHERE id = ANY($1) RETURNING id, job_id
         )
         INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
         SELECT job_id, $2, convert_to(json_build_object('event_id', id)::text, 'UTF8'),
                'Pending', 0, $3, now()
         FROM moved",
    )
    .bind(event_ids)
    .bind(POST_SETTLEMENT_QUEUE)
    .bind(QUEUE_ATTEMPTS_MAX)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Writes a move of the event state machine (made by `StateMachine::transition`): refused when
/// the event is no longer in the move's `from` state.
pub(super) async fn set_event_status(
    conn: &mut PgConnection,
    event_id: EventId,
    transition: Transition<EventStatus>,
    posted_entry_id: Option<i64>,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE settlement_events
         SET status = $3, status_changed_at = now(), posted_entry_id = coalesce($4, posted_entry_id)
         WHERE id = $1 AND status = $2",
    )
    .bind(event_id.get())
    .bind(transition.from().label())
    .bind(transition.to().label())
    .bind(posted_entry_id)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(transition.stale())
    }
}

/// Begins a posting transaction, in one round trip: waiting longer than `lock_timeout_ms` for a
/// lock fails (transiently), and every statement in it is planned for the tables as they are now
/// (`plan_cache_mode = force_custom_plan`). Without that, a prepared statement's generic plan,
/// and the cached plans of the foreign-key checks and the balance trigger it fires, are made
/// once per connection while the journal and `job_attempts` are still small, and kept as they
/// grow: sequential scans whose cost grows with every row posted (a drain fell from ~2,000 to
/// ~120 postings/s here; BENCHMARKS.md, "The drain collapse"). Planning each time costs less
/// than one such scan.
pub(super) async fn begin_with_lock_timeout(
    pool: &sqlx::PgPool,
    lock_timeout_ms: u64,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
    Ok(pool
        .begin_with(sqlx::AssertSqlSafe(format!(
            "BEGIN; SET LOCAL lock_timeout = '{lock_timeout_ms}ms'; \
             SET LOCAL plan_cache_mode = force_custom_plan"
        )))
        .await?)
}

/// Locks the event row; `None` when it does not exist.
async fn lock_event(
    conn: &mut PgConnection,
    event_id: EventId,
) -> Result<Option<(EventStatus, String)>, StoreError> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT status, job_id FROM settlement_events WHERE id = $1 FOR UPDATE")
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

/// Opens a dead letter and moves the event to `abandoned`, in the caller's transaction.
async fn abandon(
    conn: &mut PgConnection,
    job: &JobRef,
    class: ErrorClass,
    code: &str,
    error: &str,
    attempts: u32,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO dead_letters (event_id, job_id, error_class, error_code, last_error, attempts)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(job.event_id.get())
    .bind(&job.job_id)
    .bind(class.as_str())
    .bind(code)
    .bind(error)
    .bind(attempts as i32)
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
    conn: &mut PgConnection,
    job: &JobRef,
    attempt: u32,
    outcome: AttemptOutcome,
    error: Option<&PostError>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE job_attempts SET finished_at = now(), outcome = $3, error_code = $4, error = $5
         WHERE job_id = $1 AND attempt = $2",
    )
    .bind(&job.job_id)
    .bind(attempt as i32)
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

/// Gives the job back to the queue, due in `delay_ms` (any worker may fetch it then), if
/// `worker` still holds it: a job rescued from this worker (its heartbeat lapsed) belongs to
/// whoever fetched it next. A killed job stays killed, a job whose row is gone stays gone.
async fn retry_later(
    conn: &mut PgConnection,
    job_id: &str,
    worker: &str,
    delay_ms: u64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE apalis.jobs
         SET status = $3, run_at = now() + $2 * interval '1 millisecond', lock_by = NULL, lock_at = NULL
         WHERE id = $1 AND lock_by = $5 AND status <> $4",
    )
    .bind(job_id)
    .bind(i64::try_from(delay_ms).unwrap_or(i64::MAX))
    .bind(QueueStatus::Queued.transition(QueueStatus::Pending)?.to().label())
    .bind(QueueStatus::Killed.label())
    .bind(worker)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The job settled its event: its queue row goes, in the transaction that settled it.
pub(super) async fn complete_job(conn: &mut PgConnection, job_id: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM apalis.jobs WHERE id = $1")
        .bind(job_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Nothing runs the job again: its row is kept, `Killed`.
async fn kill_job(conn: &mut PgConnection, job_id: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE apalis.jobs SET status = $2, done_at = now() WHERE id = $1")
        .bind(job_id)
        .bind(
            QueueStatus::Queued
                .transition(QueueStatus::Killed)?
                .to()
                .label(),
        )
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl FailureRows for PgStore {
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
        lock_event(tx, event_id).await
    }

    async fn recorded_event_of_job(
        tx: &mut Self::Tx,
        job_id: &str,
    ) -> Result<Option<EventId>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM settlement_events WHERE job_id = $1 AND status = $2 FOR UPDATE",
        )
        .bind(job_id)
        .bind(EventStatus::Recorded.label())
        .fetch_optional(&mut **tx)
        .await?
        .map(EventId::new))
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

impl StartRows for PgStore {
    /// One call of `settle_start_attempt` (the PostgreSQL baseline migration): one round trip and
    /// one commit.
    async fn start_one(
        &self,
        job: &JobRef,
        worker: &str,
        attempts_max: u32,
        lock_timeout_ms: u64,
        alone: bool,
    ) -> Result<AttemptStart, StoreError> {
        let (outcome, attempt): (String, i32) =
            sqlx::query_as("SELECT * FROM settle_start_attempt($1, $2, $3, $4, $5, $6, $7)")
                .bind(job.event_id.get())
                .bind(&job.job_id)
                .bind(worker)
                .bind(attempts_max_param(attempts_max))
                .bind(format!("{lock_timeout_ms}ms"))
                .bind(DIED)
                .bind(alone)
                .fetch_one(&self.pool)
                .await?;
        attempt_start(&outcome, attempt)
    }

    async fn start_group(
        &self,
        starts: &[(JobRef, String)],
        attempts_max: u32,
        lock_timeout_ms: u64,
    ) -> Result<Vec<Result<AttemptStart, StoreError>>, StoreError> {
        // Events are locked in id order, so two processes' groups never deadlock each other.
        let mut order: Vec<usize> = (0..starts.len()).collect();
        order.sort_by_key(|&i| starts[i].0.event_id.get());
        let events: Vec<i64> = order.iter().map(|&i| starts[i].0.event_id.get()).collect();
        let jobs: Vec<&str> = order.iter().map(|&i| starts[i].0.job_id.as_str()).collect();
        let workers: Vec<&str> = order.iter().map(|&i| starts[i].1.as_str()).collect();
        let rows: Vec<(i64, String, i32)> = sqlx::query_as(
            "SELECT ord, outcome, attempt FROM settle_start_attempts($1, $2, $3, $4, $5, $6)",
        )
        .bind(&events)
        .bind(&jobs)
        .bind(&workers)
        .bind(attempts_max_param(attempts_max))
        .bind(format!("{lock_timeout_ms}ms"))
        .bind(DIED)
        .fetch_all(&self.pool)
        .await?;
        let mut results: Vec<Option<Result<AttemptStart, StoreError>>> =
            (0..starts.len()).map(|_| None).collect();
        for (ord, outcome, attempt) in rows {
            let slot = usize::try_from(ord - 1)
                .ok()
                .and_then(|position| order.get(position))
                .and_then(|&i| results.get_mut(i))
                .filter(|slot| slot.is_none());
            let Some(slot) = slot else {
                return Err(StoreError::Corrupt(format!(
                    "settle_start_attempts answered position {ord} twice or out of range"
                )));
            };
            *slot = Some(attempt_start(&outcome, attempt));
        }
        if results.iter().any(Option::is_none) {
            return Err(StoreError::Corrupt(
                "settle_start_attempts left a job without an answer".into(),
            ));
        }
        Ok(results.into_iter().flatten().collect())
    }
}
