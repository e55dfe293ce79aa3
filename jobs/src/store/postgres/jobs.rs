//! The `PostSettlement` job's storage: attempts, the posting transaction, failures, the dead
//! letter, and the sweep that re-enqueues stranded events.

use rust_decimal::Decimal;
use sqlx::Row;
use sqlx::postgres::PgConnection;
use tracing::debug;

use super::{PgStore, QUEUE_ATTEMPTS_MAX};
use crate::event::{Kind, SettlementEvent};
use crate::ids::{EventId, SourceName};
use crate::job::{
    AttemptOutcome, AttemptStart, ErrorClass, FailureDecision, JobRef, POST_SETTLEMENT_QUEUE,
    PostError, Posted, ProviderError, QueueStatus,
};
use crate::money::Currency;
use crate::posting::{self, EntryDraft, Line, PostingRules};
use crate::record::EventStatus;
use crate::store::{STATEMENT_BYTES_MAX, StoreError, split_by_bytes};

/// The error a died attempt is recorded with.
const DIED: &str = "the worker stopped before finishing this attempt (its lease expired)";

impl PgStore {
    /// One call of `settle_start_attempt` (migrations 5 and 6): one round trip and one commit.
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

    pub(in crate::store) async fn fail_attempt(
        &self,
        job: &JobRef,
        worker: &str,
        attempt: u32,
        error: &PostError,
        decision: FailureDecision,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let outcome = if error.is_transient() {
            AttemptOutcome::Transient
        } else {
            AttemptOutcome::Permanent
        };
        finish_attempt(&mut tx, job, attempt, outcome, Some(error)).await?;
        match decision {
            FailureDecision::RetryAfterMs(delay_ms) => {
                retry_later(&mut tx, &job.job_id, worker, delay_ms).await?
            }
            FailureDecision::DeadLetter(class) => {
                if let Some((EventStatus::Recorded, current)) =
                    lock_event(&mut tx, job.event_id).await?
                    && current == job.job_id
                {
                    abandon(
                        &mut tx,
                        job,
                        class,
                        error.code(),
                        &error.to_string(),
                        attempt,
                    )
                    .await?;
                }
                kill_job(&mut tx, &job.job_id).await?;
            }
        }
        tx.commit().await?;
        Ok(())
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

    pub(in crate::store) async fn dead_letter_unreadable_job(
        &self,
        job_id: &str,
        detail: &str,
    ) -> Result<Option<EventId>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let event: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM settlement_events WHERE job_id = $1 AND status = $2 FOR UPDATE",
        )
        .bind(job_id)
        .bind(EventStatus::Recorded.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        kill_job(&mut tx, job_id).await?;
        let Some(event_id) = event.map(EventId::new) else {
            tx.commit().await?;
            return Ok(None);
        };
        let job = JobRef {
            job_id: job_id.to_owned(),
            event_id,
        };
        let error = PostError::UndecodableJob(detail.to_owned());
        abandon(
            &mut tx,
            &job,
            ErrorClass::Permanent,
            error.code(),
            &error.to_string(),
            0,
        )
        .await?;
        tx.commit().await?;
        Ok(Some(event_id))
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

/// An event row as the posting reads it, locked.
pub(super) struct EventRow {
    pub(super) id: i64,
    source: String,
    pub(super) status: String,
    pub(super) job_id: String,
    /// `None` for an event recorded with invalid facts.
    pub(super) facts: Option<serde_json::Value>,
    validation_error: Option<String>,
    pub(super) received_at: chrono::DateTime<chrono::Utc>,
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

/// How posting one locked event ended, with the transaction still usable. (An `Err` beside it
/// means the database failed and the transaction must be abandoned.)
enum Locked {
    Posted(Posted),
    /// Refused for the event's own reason; nothing was written.
    Refused(PostError),
}

/// What a locked event row says about posting it, before anything is written.
enum Prepared {
    /// Posted or closed already, or no longer waiting for this job.
    Settled,
    /// Refused for the event's own reason (invalid or unreadable facts).
    Refused(PostError),
    Ready(Box<Ready>),
}

/// An event ready to post: its facts read and its entry drafted by the posting rules.
struct Ready {
    source: SourceName,
    event: SettlementEvent,
    draft: EntryDraft,
    fingerprint: String,
    received_at: chrono::DateTime<chrono::Utc>,
}

impl Ready {
    fn balanced(&self) -> Result<(), PostError> {
        if self.draft.is_balanced() {
            Ok(())
        } else {
            Err(PostError::Unbalanced(self.draft.source_key.clone()))
        }
    }

    fn posting<'a>(&'a self, job: &'a JobRef, attempt: u32, reverses: Option<i64>) -> Posting<'a> {
        Posting {
            job,
            attempt,
            source: &self.source,
            event: &self.event,
            draft: &self.draft,
            fingerprint: &self.fingerprint,
            reverses,
        }
    }
}

fn prepare(job: &JobRef, row: &EventRow, rules: &PostingRules) -> Prepared {
    if row.status != EventStatus::Recorded.as_str() || row.job_id != job.job_id {
        return Prepared::Settled;
    }
    if let Some(error) = &row.validation_error {
        return Prepared::Refused(PostError::InvalidFacts(error.clone()));
    }
    let Some(facts) = &row.facts else {
        return Prepared::Refused(PostError::CorruptEvent(format!(
            "event {} has neither facts nor a validation error",
            row.id
        )));
    };
    if crate::stripe::Trigger::from_stored(facts).is_some() {
        // Its movements are fetched from the provider first (Store::post_resolved).
        return Prepared::Refused(PostError::Provider(ProviderError::NotConfigured(
            row.source.clone(),
        )));
    }
    let parsed = SettlementEvent::from_stored(facts)
        .map_err(|e| e.to_string())
        .and_then(|event| {
            SourceName::parse(&row.source)
                .map(|source| (event, source))
                .map_err(|e| e.to_string())
        });
    let (event, source) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return Prepared::Refused(PostError::CorruptEvent(error)),
    };
    let draft = posting::draft(&source, &event, &rules.accounts(&source));
    let fingerprint = event.fingerprint().to_hex();
    Prepared::Ready(Box::new(Ready {
        source,
        event,
        draft,
        fingerprint,
        received_at: row.received_at,
    }))
}

/// The posting of one event whose row the caller's transaction holds locked: settled already,
/// invalid, a new entry, a replay of the same entry, or a replay conflict.
async fn post_locked(
    tx: &mut PgConnection,
    job: &JobRef,
    attempt: u32,
    row: &EventRow,
    rules: &PostingRules,
) -> Result<Locked, PostError> {
    let mut ready = match prepare(job, row, rules) {
        Prepared::Settled => {
            finish_attempt(tx, job, attempt, AttemptOutcome::Settled, None).await?;
            complete_job(tx, &job.job_id).await?;
            return Ok(Locked::Posted(Posted::AlreadySettled));
        }
        Prepared::Refused(error) => return Ok(Locked::Refused(error)),
        Prepared::Ready(ready) => ready,
    };
    let reverses = if ready.event.kind() == Kind::PayoutFailed {
        match reverse_payout(tx, &ready.source, &ready.event, &mut ready.draft).await {
            Ok(paid_id) => Some(paid_id),
            Err(PostError::Store(error)) => return Err(PostError::Store(error)),
            Err(refused) => return Ok(Locked::Refused(refused)),
        }
    } else {
        None
    };
    if let Err(refused) = ready.balanced() {
        return Ok(Locked::Refused(refused));
    }
    // Any error here came from the database (the transaction is aborted).
    let entries = insert_postings(tx, &[ready.posting(job, attempt, reverses)]).await?;
    if let Some(&entry_id) = entries.get(&job.event_id.get()) {
        return Ok(Locked::Posted(Posted::New {
            entry_id,
            received_at: ready.received_at,
        }));
    }
    // The source key is taken: the same facts replayed (or a conflicting replay).
    let (entry_id, stored): (i64, String) =
        sqlx::query_as("SELECT id, request_fingerprint FROM journal_entries WHERE source_key = $1")
            .bind(&ready.draft.source_key)
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::from)?;
    if stored != ready.fingerprint {
        return Ok(Locked::Refused(PostError::SourceReplayConflict {
            source_key: ready.draft.source_key,
        }));
    }
    set_event_status(
        tx,
        job.event_id,
        EventStatus::Recorded,
        EventStatus::Posted,
        Some(entry_id),
    )
    .await?;
    finish_attempt(tx, job, attempt, AttemptOutcome::Posted, None).await?;
    complete_job(tx, &job.job_id).await?;
    Ok(Locked::Posted(Posted::Replayed {
        entry_id,
        received_at: ready.received_at,
    }))
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

/// The one transition function of the event state machine.
pub(super) async fn set_event_status(
    conn: &mut PgConnection,
    event_id: EventId,
    from: EventStatus,
    to: EventStatus,
    posted_entry_id: Option<i64>,
) -> Result<(), StoreError> {
    if !from.can_become(to) {
        return Err(StoreError::InvalidTransition {
            from: from.as_str(),
            to: to.as_str(),
        });
    }
    let done = sqlx::query(
        "UPDATE settlement_events
         SET status = $3, status_changed_at = now(), posted_entry_id = coalesce($4, posted_entry_id)
         WHERE id = $1 AND status = $2",
    )
    .bind(event_id.get())
    .bind(from.as_str())
    .bind(to.as_str())
    .bind(posted_entry_id)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(StoreError::InvalidTransition {
            from: from.as_str(),
            to: to.as_str(),
        })
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
        EventStatus::Recorded,
        EventStatus::Abandoned,
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
    .bind(outcome.as_str())
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
    .bind(QueueStatus::Pending.as_str())
    .bind(QueueStatus::Killed.as_str())
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
        .bind(QueueStatus::Killed.as_str())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// `payout_failed` posts the reversal of its payout's `payout_paid` entry, line for line.
/// Returns the reversed entry's id; replaces the draft's lines with the reversal's.
async fn reverse_payout(
    conn: &mut PgConnection,
    source: &SourceName,
    event: &SettlementEvent,
    draft: &mut EntryDraft,
) -> Result<i64, PostError> {
    let payout_id = event
        .payout_id()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let paid_key = posting::source_key(source, Kind::PayoutPaid, &payout_id);
    let paid: Option<i64> =
        sqlx::query_scalar("SELECT id FROM journal_entries WHERE source_key = $1")
            .bind(&paid_key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::from)?;
    let Some(paid_id) = paid else {
        return Err(PostError::DependencyNotReady { payout_id });
    };
    let rows: Vec<(String, String, Decimal)> = sqlx::query_as(
        "SELECT account, currency, amount FROM journal_lines WHERE entry_id = $1 ORDER BY line_no",
    )
    .bind(paid_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    let mut paid_lines = Vec::with_capacity(rows.len());
    for (account, currency, amount) in rows {
        let currency =
            Currency::parse(&currency).map_err(|e| PostError::CorruptEvent(e.to_string()))?;
        paid_lines.push(Line {
            account,
            currency,
            amount,
        });
    }
    let reversal = posting::reversal_lines(&paid_lines);
    if !posting::same_amounts(&reversal, &draft.lines) {
        return Err(PostError::ReversalMismatch {
            payout_id,
            detail: format!(
                "the failure is for {} {}",
                event.currency(),
                draft_amount(draft)
            ),
        });
    }
    draft.lines = reversal;
    Ok(paid_id)
}

fn draft_amount(draft: &EntryDraft) -> Decimal {
    draft
        .lines
        .iter()
        .map(|l| l.amount)
        .filter(|a| a.is_sign_positive())
        .sum()
}

/// A new entry for an event, as one posting writes it.
struct Posting<'a> {
    job: &'a JobRef,
    attempt: u32,
    source: &'a SourceName,
    event: &'a SettlementEvent,
    draft: &'a EntryDraft,
    fingerprint: &'a str,
    reverses: Option<i64>,
}

impl Posting<'_> {
    /// About what this posting adds to its statement's parameters (a little more than it does,
    /// in binary array encoding: about 430 bytes for a charge with three lines).
    fn bytes(&self) -> usize {
        // Each value's length prefix and the fixed-size ones, then per line likewise.
        const FIELDS: usize = 13 * 8;
        const LINE: usize = 5 * 8 + 16;
        let texts = [
            self.job.job_id.as_str(),
            self.draft.source_key.as_str(),
            self.source.as_str(),
            self.event.kind().as_str(),
            self.event.movement_id().as_str(),
            self.event.payout_id().map_or("", |id| id.as_str()),
            self.event.reference().map_or("", |r| r.as_str()),
            self.fingerprint,
            self.draft.description.as_str(),
        ];
        let lines: usize = self
            .draft
            .lines
            .iter()
            .map(|line| line.account.len() + LINE)
            .sum();
        texts.iter().map(|t| t.len()).sum::<usize>() + FIELDS + lines
    }
}

/// For events whose rows the caller's transaction holds locked (still recorded, each at most
/// once): inserts each entry and its lines, points each event at its entry as posted, finishes
/// each attempt as posted, and deletes each job's queue row, in as few statements as
/// `STATEMENT_BYTES_MAX` allows. A posting whose source key is taken (by an earlier entry, or by
/// an earlier posting of the same call) writes nothing at all. Answers the new entries' ids by
/// event id.
async fn insert_postings(
    conn: &mut PgConnection,
    postings: &[Posting<'_>],
) -> Result<std::collections::HashMap<i64, i64>, PostError> {
    let sizes: Vec<usize> = postings.iter().map(Posting::bytes).collect();
    let mut entries = std::collections::HashMap::with_capacity(postings.len());
    for run in split_by_bytes(&sizes, STATEMENT_BYTES_MAX) {
        entries.extend(insert_postings_in_one_statement(conn, &postings[run]).await?);
    }
    Ok(entries)
}

async fn insert_postings_in_one_statement(
    conn: &mut PgConnection,
    postings: &[Posting<'_>],
) -> Result<std::collections::HashMap<i64, i64>, PostError> {
    if postings.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    let event_ids: Vec<i64> = postings.iter().map(|p| p.job.event_id.get()).collect();
    let job_ids: Vec<&str> = postings.iter().map(|p| p.job.job_id.as_str()).collect();
    let source_keys: Vec<&str> = postings
        .iter()
        .map(|p| p.draft.source_key.as_str())
        .collect();
    let sources: Vec<&str> = postings.iter().map(|p| p.source.as_str()).collect();
    let kinds: Vec<&str> = postings.iter().map(|p| p.event.kind().as_str()).collect();
    let movement_ids: Vec<&str> = postings
        .iter()
        .map(|p| p.event.movement_id().as_str())
        .collect();
    let fingerprints: Vec<&str> = postings.iter().map(|p| p.fingerprint).collect();
    let descriptions: Vec<&str> = postings
        .iter()
        .map(|p| p.draft.description.as_str())
        .collect();
    let attempts: Vec<i32> = postings.iter().map(|p| p.attempt as i32).collect();
    let payout_ids: Vec<Option<&str>> = postings
        .iter()
        .map(|p| p.event.payout_id().map(|id| id.as_str()))
        .collect();
    let references: Vec<Option<&str>> = postings
        .iter()
        .map(|p| p.event.reference().map(|r| r.as_str()))
        .collect();
    let dates: Vec<chrono::NaiveDate> = postings.iter().map(|p| p.draft.effective_date).collect();
    let reverses: Vec<Option<i64>> = postings.iter().map(|p| p.reverses).collect();
    let lines = postings
        .iter()
        .flat_map(|p| p.draft.lines.iter().zip(1..).map(move |(l, n)| (p, l, n)));
    let (mut line_events, mut line_nos, mut accounts, mut currencies, mut amounts) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (posting, line, line_no) in lines {
        line_events.push(posting.job.event_id.get());
        line_nos.push(line_no);
        accounts.push(line.account.as_str());
        currencies.push(line.currency.code());
        amounts.push(line.amount);
    }
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
        "WITH input AS (
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                                  $11::date[], $12::text[], $13::bigint[])
                 WITH ORDINALITY AS i(event_id, job_id, attempt, source_key, source, kind, movement_id,
                                      payout_id, reference, fingerprint, effective_date, description,
                                      reverses, ord)
         ), entry AS (
             INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id, payout_id, reference,
                                          request_fingerprint, effective_date, description, reverses_entry_id)
             SELECT source_key, event_id, source, kind, movement_id, payout_id, reference,
                    fingerprint, effective_date, description, reverses
             FROM input ORDER BY ord
             ON CONFLICT (source_key) DO NOTHING
             RETURNING id, event_id
         ), posting AS (
             SELECT entry.id AS entry_id, input.* FROM entry JOIN input USING (event_id)
         ), lines AS (
             INSERT INTO journal_lines (entry_id, line_no, account, currency, amount)
             SELECT posting.entry_id, line.line_no, line.account, line.currency, line.amount
             FROM unnest($14::bigint[], $15::int[], $16::text[], $17::text[], $18::numeric[])
                  AS line(event_id, line_no, account, currency, amount)
             JOIN posting USING (event_id)
         ), posted AS (
             UPDATE settlement_events e
             SET status = $19, status_changed_at = now(), posted_entry_id = posting.entry_id
             FROM posting WHERE e.id = posting.event_id AND e.status = $20
             RETURNING e.id
         ), finished AS (
             UPDATE job_attempts a SET finished_at = now(), outcome = $21
             FROM posting WHERE a.job_id = posting.job_id AND a.attempt = posting.attempt
         ), done AS (
             DELETE FROM apalis.jobs j USING posting WHERE j.id = posting.job_id
         )
         SELECT event_id, entry_id, (SELECT count(*) FROM posted) FROM posting",
    )
    .bind(&event_ids)
    .bind(&job_ids)
    .bind(&attempts)
    .bind(&source_keys)
    .bind(&sources)
    .bind(&kinds)
    .bind(&movement_ids)
    .bind(&payout_ids)
    .bind(&references)
    .bind(&fingerprints)
    .bind(&dates)
    .bind(&descriptions)
    .bind(&reverses)
    .bind(&line_events)
    .bind(&line_nos)
    .bind(&accounts)
    .bind(&currencies)
    .bind(&amounts)
    .bind(EventStatus::Posted.as_str())
    .bind(EventStatus::Recorded.as_str())
    .bind(AttemptOutcome::Posted.as_str())
    .fetch_all(&mut *conn)
    .await
    .map_err(|error| reversal_conflict(error, postings))?;
    // The caller holds each event's lock and saw it recorded: this cannot happen.
    if rows
        .first()
        .is_some_and(|&(_, _, posted)| posted != rows.len() as i64)
    {
        return Err(StoreError::InvalidTransition {
            from: EventStatus::Recorded.as_str(),
            to: EventStatus::Posted.as_str(),
        }
        .into());
    }
    Ok(rows
        .into_iter()
        .map(|(event, entry, _)| (event, entry))
        .collect())
}

/// A second reversal of the same payout entry violates `journal_entries_reversed_once`: that is
/// the reversing posting's own refusal (reversals are posted one at a time).
fn reversal_conflict(error: sqlx::Error, postings: &[Posting<'_>]) -> PostError {
    if let sqlx::Error::Database(db) = &error
        && db.constraint() == Some("journal_entries_reversed_once")
        && let Some(reversal) = postings.iter().find(|p| p.reverses.is_some())
    {
        return PostError::ReversalMismatch {
            payout_id: reversal
                .event
                .payout_id()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            detail: "that payout's entry is already reversed".into(),
        };
    }
    PostError::Store(error.into())
}
