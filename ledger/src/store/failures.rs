//! A failed attempt and an unreadable job, written once for both backends over [`FailureRows`].
//! What to do was decided before (the worker's retry policy gives a `FailureDecision`); this
//! runs it in one transaction: the attempt's end, then a later retry, or the dead letter and the
//! job killed.

use crate::ids::EventId;
use crate::job::{AttemptOutcome, ErrorClass, FailureDecision, JobRef};
use crate::post_error::PostError;
use crate::state::EventStatus;
use crate::store::StoreError;
use crate::store::transactions::Transactions;

/// The rows a failure reads and writes. Every method runs in the caller's transaction.
pub(super) trait FailureRows: Transactions {
    /// Writes how the attempt ended.
    async fn finish_attempt(
        tx: &mut Self::Tx,
        job: &JobRef,
        attempt: u32,
        outcome: AttemptOutcome,
        error: Option<&PostError>,
    ) -> Result<(), StoreError>;

    /// Gives the job back to the queue, due in `delay_ms`, if `worker` still holds it.
    async fn retry_later(
        tx: &mut Self::Tx,
        job_id: &str,
        worker: &str,
        delay_ms: u64,
    ) -> Result<(), StoreError>;

    /// The event's status and current job, locked against other writers.
    async fn event_state(
        tx: &mut Self::Tx,
        event_id: EventId,
    ) -> Result<Option<(EventStatus, String)>, StoreError>;

    /// The recorded event whose current job this is, locked, if any.
    async fn recorded_event_of_job(
        tx: &mut Self::Tx,
        job_id: &str,
    ) -> Result<Option<EventId>, StoreError>;

    /// Opens the event's dead letter and moves it `recorded` -> `abandoned`.
    async fn abandon(
        tx: &mut Self::Tx,
        job: &JobRef,
        class: ErrorClass,
        error: &PostError,
        attempts: u32,
    ) -> Result<(), StoreError>;

    /// Nothing runs the job again.
    async fn kill_job(tx: &mut Self::Tx, job_id: &str) -> Result<(), StoreError>;
}

/// Gives the job back to the queue, due in `delay_ms`, if `worker` still holds it.
pub(super) async fn retry_later<B: FailureRows>(
    backend: &B,
    job_id: &str,
    worker: &str,
    delay_ms: u64,
) -> Result<(), StoreError> {
    let mut tx = backend.begin_write().await?;
    B::retry_later(&mut tx, job_id, worker, delay_ms).await?;
    backend.commit(tx).await
}

/// Records a failed attempt and carries out `decision`: run again later, or dead-letter the
/// event (if it still waits for this job) and kill the job.
pub(super) async fn fail_attempt<B: FailureRows>(
    backend: &B,
    job: &JobRef,
    worker: &str,
    attempt: u32,
    error: &PostError,
    decision: FailureDecision,
) -> Result<(), StoreError> {
    let mut tx = backend.begin_write().await?;
    let outcome = if error.is_transient() {
        AttemptOutcome::Transient
    } else {
        AttemptOutcome::Permanent
    };
    B::finish_attempt(&mut tx, job, attempt, outcome, Some(error)).await?;
    match decision {
        FailureDecision::RetryAfterMs(delay_ms) => {
            B::retry_later(&mut tx, &job.job_id, worker, delay_ms).await?
        }
        FailureDecision::DeadLetter(class) => {
            if let Some((EventStatus::Recorded, current)) =
                B::event_state(&mut tx, job.event_id).await?
                && current == job.job_id
            {
                B::abandon(&mut tx, job, class, error, attempt).await?;
            }
            B::kill_job(&mut tx, &job.job_id).await?;
        }
    }
    backend.commit(tx).await
}

/// A job whose payload cannot be read: killed, and the event waiting for it (if any)
/// dead-lettered as permanent, with no attempt.
pub(super) async fn dead_letter_unreadable_job<B: FailureRows>(
    backend: &B,
    job_id: &str,
    detail: &str,
) -> Result<Option<EventId>, StoreError> {
    let mut tx = backend.begin_write().await?;
    let event = B::recorded_event_of_job(&mut tx, job_id).await?;
    B::kill_job(&mut tx, job_id).await?;
    if let Some(event_id) = event {
        let job = JobRef {
            job_id: job_id.to_owned(),
            event_id,
        };
        let error = PostError::UndecodableJob(detail.to_owned());
        B::abandon(&mut tx, &job, ErrorClass::Permanent, &error, 0).await?;
    }
    backend.commit(tx).await?;
    Ok(event)
}
