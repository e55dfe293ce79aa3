//! The `PostSettlement` job's storage: attempts, the posting entry points (their statement is
//! `posting`), failures, the dead letter, and the sweep that re-enqueues stranded events.

use sqlx::Row;
use sqlx::postgres::PgConnection;
use tracing::debug;

use super::posting::{Locked, Posting, insert_postings, post_locked};
use super::{PgStore, QUEUE_ATTEMPTS_MAX};
use crate::event::Kind;
use crate::ids::EventId;
use crate::job::{
    AttemptOutcome, AttemptStart, ErrorClass, JobRef, POST_SETTLEMENT_QUEUE, PostError, Posted,
    QueueStatus,
};
use crate::posting::PostingRules;
use crate::record::EventStatus;
use crate::state::{AttemptState, StateMachine, Transition};
use crate::store::StoreError;
use crate::store::failures::FailureRows;
use crate::store::prepare::{EventRow, Prepared, prepare};

/// The error a died attempt is recorded with.
const DIED: &str = "the worker stopped before finishing this attempt (its lease expired)";

impl PgStore {
    /// One call of `settle_start_attempt` (the PostgreSQL baseline migration): one round trip and
    /// one commit.
    pub(in crate::store) async fn start_attempt(
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

    /// Starts several jobs' attempts in one statement (one commit for all), each exactly as
    /// [`Self::start_attempt`] would. If the statement fails (a lock timeout, a deadlock, a lost
    /// connection) nothing of it is kept and each job is started on its own, so one job's
    /// trouble is only its own.
    pub(in crate::store) async fn start_attempts(
        &self,
        starts: &[(JobRef, String)],
        attempts_max: u32,
        lock_timeout_ms: u64,
    ) -> Vec<Result<AttemptStart, StoreError>> {
        if starts.len() > 1 && distinct_events(starts.iter().map(|(job, _)| job)) {
            match self
                .start_together(starts, attempts_max, lock_timeout_ms)
                .await
            {
                Ok(results) => return results,
                // The statement committed but its answer cannot be read: starting again would
                // take its own open attempts for died ones. Each job is handed back instead.
                Err(StoreError::Corrupt(detail)) => {
                    return starts
                        .iter()
                        .map(|_| Err(StoreError::Corrupt(detail.clone())))
                        .collect();
                }
                Err(error) => {
                    debug!(%error, jobs = starts.len(), "group start failed; starting one by one")
                }
            }
        }
        let mut results = Vec::with_capacity(starts.len());
        for (job, worker) in starts {
            results.push(
                self.start_attempt(job, worker, attempts_max, lock_timeout_ms, false)
                    .await,
            );
        }
        results
    }

    async fn start_together(
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

    /// Posts one job's event in its own transaction.
    pub(in crate::store) async fn post(
        &self,
        job: &JobRef,
        attempt: u32,
        rules: &PostingRules,
        lock_timeout_ms: u64,
    ) -> Result<Posted, PostError> {
        let mut tx = begin_with_lock_timeout(&self.pool, lock_timeout_ms).await?;
        let mut rows = lock_events(&mut tx, &[job.event_id.get()]).await?;
        let Some(row) = rows.pop() else {
            return Err(missing_event(job));
        };
        match post_locked(&mut tx, job, attempt, &row, rules).await? {
            Locked::Posted(posted) => {
                tx.commit().await.map_err(StoreError::from)?;
                Ok(posted)
            }
            Locked::Refused(error) => Err(error),
        }
    }

    /// Posts several jobs' events in one transaction (group commit: one WAL flush for all), each
    /// exactly as [`Self::post`] would: a job refused for its own reason (invalid facts, a
    /// replay conflict, a dependency not posted yet) writes nothing and does not stop the
    /// others. If the database fails anywhere in the group (a statement error, the commit),
    /// nothing of it is kept and each job is posted on its own transaction instead, so every job
    /// gets the answer it would have had alone.
    pub(in crate::store) async fn post_many(
        &self,
        posts: &[(JobRef, u32)],
        rules: &PostingRules,
        lock_timeout_ms: u64,
    ) -> Vec<Result<Posted, PostError>> {
        if posts.len() > 1 && distinct_events(posts.iter().map(|(job, _)| job)) {
            match self.post_together(posts, rules, lock_timeout_ms).await {
                Ok(results) => return results,
                Err(error) => {
                    debug!(%error, jobs = posts.len(), "group posting failed; posting one by one")
                }
            }
        }
        let mut results = Vec::with_capacity(posts.len());
        for (job, attempt) in posts {
            results.push(self.post(job, *attempt, rules, lock_timeout_ms).await);
        }
        results
    }

    /// The group's transaction: the events locked at once, every new entry written by one
    /// statement, then one by one what needs more than that (an event settled already, a payout
    /// failure's reversal, a source key already taken), in the group's order.
    async fn post_together(
        &self,
        posts: &[(JobRef, u32)],
        rules: &PostingRules,
        lock_timeout_ms: u64,
    ) -> Result<Vec<Result<Posted, PostError>>, PostError> {
        let mut tx = begin_with_lock_timeout(&self.pool, lock_timeout_ms).await?;
        let ids: Vec<i64> = posts.iter().map(|(job, _)| job.event_id.get()).collect();
        let rows: std::collections::HashMap<i64, EventRow> = lock_events(&mut tx, &ids)
            .await?
            .into_iter()
            .map(|row| (row.id, row))
            .collect();
        let mut results: Vec<Option<Result<Posted, PostError>>> =
            (0..posts.len()).map(|_| None).collect();
        let mut fresh = Vec::new();
        let mut one_by_one = Vec::new();
        for (i, (job, _)) in posts.iter().enumerate() {
            let Some(row) = rows.get(&job.event_id.get()) else {
                results[i] = Some(Err(missing_event(job)));
                continue;
            };
            match prepare(job, row, rules) {
                Prepared::Refused(error) => results[i] = Some(Err(error)),
                Prepared::Ready(ready) if ready.event.kind() != Kind::PayoutFailed => {
                    match ready.balanced() {
                        Ok(()) => fresh.push((i, ready)),
                        Err(error) => results[i] = Some(Err(error)),
                    }
                }
                Prepared::Ready(_) | Prepared::Settled => one_by_one.push(i),
            }
        }
        let postings: Vec<Posting<'_>> = fresh
            .iter()
            .map(|(i, ready)| ready.posting(&posts[*i].0, posts[*i].1, None))
            .collect();
        let entries = insert_postings(&mut tx, &postings).await?;
        for (i, ready) in &fresh {
            match entries.get(&posts[*i].0.event_id.get()) {
                Some(&entry_id) => {
                    results[*i] = Some(Ok(Posted::New {
                        entry_id,
                        received_at: ready.received_at,
                    }))
                }
                None => one_by_one.push(*i),
            }
        }
        one_by_one.sort_unstable();
        for i in one_by_one {
            let (job, attempt) = &posts[i];
            let row = &rows[&job.event_id.get()];
            results[i] = Some(
                match post_locked(&mut tx, job, *attempt, row, rules).await? {
                    Locked::Posted(posted) => Ok(posted),
                    Locked::Refused(error) => Err(error),
                },
            );
        }
        if results.iter().any(Option::is_none) {
            // Every job must have its own answer in its own place, or none is given.
            return Err(
                StoreError::Corrupt("a group posting left a job without an answer".into()).into(),
            );
        }
        tx.commit().await.map_err(StoreError::from)?;
        Ok(results.into_iter().flatten().collect())
    }

    pub(in crate::store) async fn retry_later(
        &self,
        job_id: &str,
        worker: &str,
        delay_ms: u64,
    ) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        retry_later(&mut conn, job_id, worker, delay_ms).await
    }

    pub(in crate::store) async fn sweep(
        &self,
        grace_secs: u64,
        batch_max: u32,
    ) -> Result<u64, StoreError> {
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
        "exhausted" => Ok(AttemptStart::Exhausted),
        "nothing_to_do" => Ok(AttemptStart::NothingToDo),
        "stray" => Ok(AttemptStart::Stray),
        other => Err(StoreError::Corrupt(format!(
            "settle_start_attempt answered {other:?}"
        ))),
    }
}

/// A group shares one transaction only when no event is in it twice (a job delivered twice
/// at once runs on its own, where the event's lock orders the two).
pub(super) fn distinct_events<'a>(jobs: impl Iterator<Item = &'a JobRef>) -> bool {
    let mut seen = std::collections::HashSet::new();
    jobs.into_iter().all(|job| seen.insert(job.event_id.get()))
}

pub(super) fn missing_event(job: &JobRef) -> PostError {
    PostError::CorruptEvent(format!("event {} does not exist", job.event_id))
}

/// Locks the events (in id order, so concurrent groups never deadlock) and reads them.
pub(super) async fn lock_events(
    conn: &mut PgConnection,
    ids: &[i64],
) -> Result<Vec<EventRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, source, status, job_id, facts, validation_error, received_at
         FROM settlement_events WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(EventRow {
                id: row.try_get("id")?,
                source: row.try_get("source")?,
                status: row.try_get("status")?,
                job_id: row.try_get("job_id")?,
                facts: row.try_get("facts")?,
                validation_error: row.try_get("validation_error")?,
                received_at: row.try_get("received_at")?,
            })
        })
        .collect()
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
