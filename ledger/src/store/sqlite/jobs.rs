//! The `PostSettlement` job's storage on SQLite (see the PostgreSQL module for the contract):
//! every writing transaction holds the database's write lock, which is what PostgreSQL's row
//! locks give there.

use rust_decimal::Decimal;
use sqlx::Row;
use sqlx::sqlite::SqliteConnection;

use super::{SqliteStore, insert_job, now};
use crate::event::{Kind, SettlementEvent};
use crate::ids::{EventId, SourceName};
use crate::job::{
    AttemptOutcome, AttemptStart, ErrorClass, JobRef, PostError, Posted, QueueStatus, start_gate,
    start_step,
};
use crate::money::Currency;
use crate::posting::{self, EntryDraft, Line, PostingRules};
use crate::record::EventStatus;
use crate::state::{AttemptState, StateMachine, Transition};
use crate::store::StoreError;
use crate::store::failures::FailureRows;
use crate::store::prepare::{EventRow, Prepared, Ready, prepare};
use tracing::debug;

const DIED: &str = "the worker stopped before finishing this attempt (its lease expired)";

impl SqliteStore {
    pub(in crate::store) async fn start_attempt(
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

    /// Starts several jobs' attempts in one write transaction (one commit, one fsync, for all),
    /// each exactly as [`Self::start_attempt`] would. If the transaction fails nothing of it is
    /// kept and each job is started on its own.
    pub(in crate::store) async fn start_attempts(
        &self,
        starts: &[(JobRef, String)],
        attempts_max: u32,
    ) -> Vec<Result<AttemptStart, StoreError>> {
        if starts.len() > 1 {
            match self.start_together(starts, attempts_max).await {
                Ok(results) => return results,
                Err(error) => {
                    debug!(%error, jobs = starts.len(), "group start failed; starting one by one")
                }
            }
        }
        let mut results = Vec::with_capacity(starts.len());
        for (job, worker) in starts {
            results.push(
                self.start_attempt(job, worker, attempts_max, 0, false)
                    .await,
            );
        }
        results
    }

    async fn start_together(
        &self,
        starts: &[(JobRef, String)],
        attempts_max: u32,
    ) -> Result<Vec<Result<AttemptStart, StoreError>>, StoreError> {
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

    /// Waiting for the lock is bounded by the busy timeout, not `lock_timeout_ms`.
    pub(in crate::store) async fn post(
        &self,
        job: &JobRef,
        attempt: u32,
        rules: &PostingRules,
        _lock_timeout_ms: u64,
    ) -> Result<Posted, PostError> {
        let mut tx = self.write().await?;
        // Any error leaves the transaction to roll back: nothing of this job is kept.
        let posted = post_in(&mut tx, job, attempt, rules).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(posted)
    }

    /// Posts several jobs in one write transaction (one commit, one fsync, for all), each
    /// exactly as [`Self::post`] would: each job in a savepoint of its own, so one refused for
    /// its own reason writes nothing and does not stop the others. If the database fails
    /// anywhere, nothing of the group is kept and each job is posted on its own.
    pub(in crate::store) async fn post_many(
        &self,
        posts: &[(JobRef, u32)],
        rules: &PostingRules,
    ) -> Vec<Result<Posted, PostError>> {
        if posts.len() > 1 {
            match self.post_together(posts, rules).await {
                Ok(results) => return results,
                Err(error) => {
                    debug!(%error, jobs = posts.len(), "group posting failed; posting one by one")
                }
            }
        }
        let mut results = Vec::with_capacity(posts.len());
        for (job, attempt) in posts {
            results.push(self.post(job, *attempt, rules, 0).await);
        }
        results
    }

    async fn post_together(
        &self,
        posts: &[(JobRef, u32)],
        rules: &PostingRules,
    ) -> Result<Vec<Result<Posted, PostError>>, StoreError> {
        let mut tx = self.write().await?;
        let mut results = Vec::with_capacity(posts.len());
        for (job, attempt) in posts {
            let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
            match post_in(&mut savepoint, job, *attempt, rules).await {
                Ok(posted) => {
                    savepoint.commit().await?;
                    results.push(Ok(posted));
                }
                Err(PostError::Store(error)) => return Err(error),
                Err(refused) => {
                    savepoint.rollback().await?;
                    results.push(Err(refused));
                }
            }
        }
        tx.commit().await?;
        Ok(results)
    }

    pub(in crate::store) async fn retry_later(
        &self,
        job_id: &str,
        worker: &str,
        delay_ms: u64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        retry_later(&mut tx, job_id, worker, delay_ms).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(in crate::store) async fn sweep(
        &self,
        grace_secs: u64,
        batch_max: u32,
    ) -> Result<u64, StoreError> {
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
    match start_gate(event.as_ref().map(|(s, j)| (*s, j.as_str())), &job.job_id) {
        Some(AttemptStart::Stray) => {
            kill_job(&mut *conn, &job.job_id).await?;
            return Ok(AttemptStart::Stray);
        }
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

/// A posting (see `Store::post`), in the caller's write transaction. On an error some of it may
/// be written: the caller rolls back.
async fn post_in(
    conn: &mut SqliteConnection,
    job: &JobRef,
    attempt: u32,
    rules: &PostingRules,
) -> Result<Posted, PostError> {
    let row = sqlx::query(
        "SELECT id, source, status, job_id, facts, validation_error, received_at
         FROM settlement_events WHERE id = ?1",
    )
    .bind(job.event_id.get())
    .fetch_optional(&mut *conn)
    .await
    .map_err(StoreError::from)?
    .ok_or_else(|| PostError::CorruptEvent(format!("event {} does not exist", job.event_id)))?;
    let row = EventRow {
        id: row.try_get("id").map_err(StoreError::from)?,
        source: row.try_get("source").map_err(StoreError::from)?,
        status: row.try_get("status").map_err(StoreError::from)?,
        job_id: row.try_get("job_id").map_err(StoreError::from)?,
        facts: row.try_get("facts").map_err(StoreError::from)?,
        validation_error: row.try_get("validation_error").map_err(StoreError::from)?,
        received_at: row.try_get("received_at").map_err(StoreError::from)?,
    };
    let ready = match prepare(job, &row, rules) {
        Prepared::Settled => {
            finish_attempt(&mut *conn, job, attempt, AttemptOutcome::Settled, None).await?;
            complete_job(&mut *conn, &job.job_id).await?;
            return Ok(Posted::AlreadySettled);
        }
        Prepared::Refused(error) => return Err(error),
        Prepared::Ready(ready) => *ready,
    };
    let Ready {
        source,
        event,
        mut draft,
        fingerprint,
        received_at,
    } = ready;
    let reverses = if event.kind() == Kind::PayoutFailed {
        Some(reverse_payout(&mut *conn, &source, &event, &mut draft).await?)
    } else {
        None
    };
    if !draft.is_balanced() {
        return Err(PostError::Unbalanced(draft.source_key));
    }
    let existing: Option<(i64, String)> =
        sqlx::query_as("SELECT id, request_fingerprint FROM journal_entries WHERE source_key = ?1")
            .bind(&draft.source_key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::from)?;
    let outcome = match existing {
        Some((entry_id, stored)) => {
            posting::replay_or_conflict(&stored, &fingerprint, &draft.source_key)?;
            Posted::Replayed {
                entry_id,
                received_at,
            }
        }
        None => Posted::New {
            entry_id: insert_entry(
                &mut *conn,
                &EntryRow {
                    event_id: job.event_id.get(),
                    source: source.as_str(),
                    kind: event.kind().as_str(),
                    movement_id: event.movement_id().as_str(),
                    payout_id: event.payout_id().map(|p| p.as_str()),
                    reference: event.reference().map(|r| r.as_str()),
                    fingerprint: &fingerprint,
                    draft: &draft,
                    reverses,
                    details: None,
                },
            )
            .await?,
            received_at,
        },
    };
    let (Posted::New { entry_id, .. } | Posted::Replayed { entry_id, .. }) = outcome else {
        return Ok(outcome);
    };
    set_event_status(
        &mut *conn,
        job.event_id,
        EventStatus::Recorded.transition(EventStatus::Posted)?,
        Some(entry_id),
    )
    .await?;
    finish_attempt(&mut *conn, job, attempt, AttemptOutcome::Posted, None).await?;
    complete_job(&mut *conn, &job.job_id).await?;
    Ok(outcome)
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

async fn reverse_payout(
    conn: &mut SqliteConnection,
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
        sqlx::query_scalar("SELECT id FROM journal_entries WHERE source_key = ?1")
            .bind(&paid_key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::from)?;
    let Some(paid_id) = paid else {
        return Err(PostError::DependencyNotReady { payout_id });
    };
    if let Some(reversal) =
        sqlx::query_scalar::<_, i64>("SELECT id FROM journal_entries WHERE reverses_entry_id = ?1")
            .bind(paid_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::from)?
    {
        let key = posting::source_key(source, Kind::PayoutFailed, event.movement_id().as_str());
        let same_key: bool =
            sqlx::query_scalar("SELECT source_key = ?2 FROM journal_entries WHERE id = ?1")
                .bind(reversal)
                .bind(&key)
                .fetch_one(&mut *conn)
                .await
                .map_err(StoreError::from)?;
        if !same_key {
            return Err(PostError::ReversalMismatch {
                payout_id,
                detail: "that payout's entry is already reversed".into(),
            });
        }
    }
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT account, currency, amount FROM journal_lines WHERE entry_id = ?1 ORDER BY line_no",
    )
    .bind(paid_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    let mut paid_lines = Vec::with_capacity(rows.len());
    for (account, currency, amount) in rows {
        let currency =
            Currency::parse(&currency).map_err(|e| PostError::CorruptEvent(e.to_string()))?;
        let amount: Decimal = amount
            .parse()
            .map_err(|_| PostError::CorruptEvent(format!("amount {amount:?}")))?;
        paid_lines.push(Line {
            account,
            currency,
            amount,
        });
    }
    let reversal = posting::reverse_payout(&payout_id, &paid_lines, draft, event.currency())?;
    draft.lines = reversal;
    Ok(paid_id)
}

/// An entry as written: whose event wrote it, its movement and the drafted lines.
pub(super) struct EntryRow<'a> {
    pub(super) event_id: i64,
    pub(super) source: &'a str,
    pub(super) kind: &'a str,
    pub(super) movement_id: &'a str,
    pub(super) payout_id: Option<&'a str>,
    pub(super) reference: Option<&'a str>,
    pub(super) fingerprint: &'a str,
    pub(super) draft: &'a EntryDraft,
    pub(super) reverses: Option<i64>,
    /// What the provider reported about the movement (JSON), for movements resolved through its
    /// API.
    pub(super) details: Option<String>,
}

/// Writes the lines first, then the entry (its insert checks the lines balance).
pub(super) async fn insert_entry(
    conn: &mut SqliteConnection,
    entry: &EntryRow<'_>,
) -> Result<i64, PostError> {
    let entry_id: i64 = sqlx::query_scalar(
        "SELECT max(coalesce((SELECT max(id) FROM journal_entries), 0),
                    coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'journal_entries'), 0)) + 1",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    for (i, line) in entry.draft.lines.iter().enumerate() {
        sqlx::query(
            "INSERT INTO journal_lines (entry_id, line_no, account, currency, amount, amount_minor)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(entry_id)
        .bind(i as i64 + 1)
        .bind(&line.account)
        .bind(line.currency.code())
        .bind(exact_text(line))
        .bind(minor_units(line)?)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::from)?;
    }
    sqlx::query(
        "INSERT INTO journal_entries (id, source_key, event_id, source, kind, movement_id, payout_id, reference,
                                      request_fingerprint, effective_date, description, reverses_entry_id,
                                      recorded_at, details)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )
    .bind(entry_id)
    .bind(&entry.draft.source_key)
    .bind(entry.event_id)
    .bind(entry.source)
    .bind(entry.kind)
    .bind(entry.movement_id)
    .bind(entry.payout_id)
    .bind(entry.reference)
    .bind(entry.fingerprint)
    .bind(entry.draft.effective_date)
    .bind(&entry.draft.description)
    .bind(entry.reverses)
    .bind(now())
    .bind(entry.details.as_deref())
    .execute(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    Ok(entry_id)
}

fn exact_text(line: &Line) -> String {
    let mut amount = line.amount;
    amount.rescale(line.currency.exponent());
    amount.to_string()
}

/// The line's amount in its currency's minor units, exactly (or a corrupt-entry error).
fn minor_units(line: &Line) -> Result<i64, PostError> {
    let mut scaled = line.amount * Decimal::from(10i64.pow(line.currency.exponent()));
    scaled = scaled.normalize();
    if scaled.scale() != 0 {
        return Err(PostError::Unbalanced(format!(
            "{} is finer than {}",
            line.amount, line.currency
        )));
    }
    scaled
        .to_string()
        .parse()
        .map_err(|_| PostError::Unbalanced(format!("{} is out of range", line.amount)))
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
