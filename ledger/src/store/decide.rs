//! The audited decisions on dead letters and conflicts, written once for both backends. Each
//! backend provides [`DecisionRows`]: a writing transaction and a handful of row reads and writes
//! that decide nothing. The rules (`review::dead_letter_step`, `review::conflict_step`,
//! `Decision::require_reason`) and the state machines (`state`) decide; this module runs them in
//! one transaction with the audit row.

use crate::review::{
    ConflictState, DeadLetterState, Decided, Decision, DecisionError, Step, conflict_step,
    dead_letter_step,
};
use crate::state::EventStatus;
use crate::state::{StateMachine, Transition};
use crate::store::StoreError;
use crate::store::transactions::Transactions;

/// What a backend provides for decisions. Every method runs in the caller's transaction.
pub(super) trait DecisionRows: Transactions {
    /// The dead letter's state and event, both rows locked against other writers; `None` when
    /// there is no such dead letter.
    async fn lock_dead_letter(
        tx: &mut Self::Tx,
        id: i64,
    ) -> Result<Option<(String, i64)>, StoreError>;

    /// The event's open dead letter, if any.
    async fn open_dead_letter_of(
        tx: &mut Self::Tx,
        event_id: i64,
    ) -> Result<Option<i64>, StoreError>;

    async fn set_event_status(
        tx: &mut Self::Tx,
        event_id: i64,
        transition: Transition<EventStatus>,
    ) -> Result<(), StoreError>;

    /// Points the event at a fresh job (enqueued in the same transaction); answers its id.
    async fn give_fresh_job(tx: &mut Self::Tx, event_id: i64) -> Result<String, StoreError>;

    /// Writes the dead letter's move with who decided and why (refused when stale).
    async fn write_dead_letter(
        tx: &mut Self::Tx,
        id: i64,
        transition: Transition<DeadLetterState>,
        decision: &Decision,
        requeued_job_id: Option<&str>,
    ) -> Result<(), StoreError>;

    /// The conflict's state and event, locked against other writers.
    async fn lock_conflict(tx: &mut Self::Tx, id: i64)
    -> Result<Option<(String, i64)>, StoreError>;

    /// Writes the conflict's move with who decided and why (refused when stale).
    async fn write_conflict(
        tx: &mut Self::Tx,
        id: i64,
        transition: Transition<ConflictState>,
        decision: &Decision,
    ) -> Result<(), StoreError>;

    /// Appends the decision to the audit log.
    async fn audit(
        tx: &mut Self::Tx,
        decision: &Decision,
        action: &str,
        subject: (&str, i64),
        event_id: i64,
        states: (&str, &str),
    ) -> Result<(), StoreError>;

    /// Called after a requeue committed (SQLite wakes its workers in-process).
    fn jobs_enqueued(&self) {}
}

fn parse<S: StateMachine>(what: &str, id: i64, label: &str) -> Result<S, StoreError> {
    S::parse(label).ok_or_else(|| StoreError::Corrupt(format!("{what} {id} has state {label:?}")))
}

async fn locked_dead_letter<B: DecisionRows>(
    tx: &mut B::Tx,
    id: i64,
) -> Result<(DeadLetterState, i64), DecisionError> {
    let (state, event_id) = B::lock_dead_letter(tx, id)
        .await?
        .ok_or(DecisionError::NotFound("dead letter"))?;
    Ok((parse("dead letter", id, &state)?, event_id))
}

fn decided(id: i64, event_id: i64, changed: bool, state: &str, job_id: Option<String>) -> Decided {
    Decided {
        subject_id: id,
        event_id,
        changed,
        state: state.into(),
        job_id,
    }
}

/// How many dead letters of a bulk action share one transaction (one commit).
pub(super) const DECISION_BATCH: usize = 100;

/// Requeues an open dead letter: its event goes back to `recorded` on a fresh job. A repeat
/// changes nothing, unless the event failed again meanwhile (then the newer dead letter is named).
pub(super) async fn requeue_dead_letter<B: DecisionRows>(
    backend: &B,
    id: i64,
    decision: &Decision,
) -> Result<Decided, DecisionError> {
    alone(backend, id, DeadLetterState::Requeued, decision).await
}

/// Discards an open dead letter (a reason is required): its event is `discarded` for good.
pub(super) async fn discard_dead_letter<B: DecisionRows>(
    backend: &B,
    id: i64,
    decision: &Decision,
) -> Result<Decided, DecisionError> {
    alone(backend, id, DeadLetterState::Discarded, decision).await
}

/// One dead letter's decision in its own transaction.
async fn alone<B: DecisionRows>(
    backend: &B,
    id: i64,
    goal: DeadLetterState,
    decision: &Decision,
) -> Result<Decided, DecisionError> {
    if goal == DeadLetterState::Discarded {
        decision.require_reason()?;
    }
    let mut tx = backend.begin_write().await?;
    let decided = decide_in::<B>(&mut tx, id, goal, decision).await?;
    backend.commit(tx).await?;
    if decided.job_id.is_some() {
        backend.jobs_enqueued();
    }
    Ok(decided)
}

/// Decides each dead letter of a bulk action exactly as alone, [`DECISION_BATCH`] to a
/// transaction: a refusal writes nothing for its item and the batch goes on; a database failure
/// discards the batch, whose items are then decided one by one. Items are locked in the order
/// given (the bulk actions give them in id order, so two at once never wait on each other in a
/// cycle).
pub(super) async fn decide_dead_letters<B: DecisionRows>(
    backend: &B,
    ids: &[i64],
    goal: DeadLetterState,
    decision: &Decision,
) -> Vec<Result<Decided, DecisionError>> {
    if goal == DeadLetterState::Discarded && decision.require_reason().is_err() {
        return ids
            .iter()
            .map(|_| Err(DecisionError::ReasonRequired))
            .collect();
    }
    let mut results = Vec::with_capacity(ids.len());
    for batch in ids.chunks(DECISION_BATCH) {
        match decide_batch(backend, batch, goal, decision).await {
            Ok(decided) => results.extend(decided),
            Err(error) => {
                tracing::debug!(%error, items = batch.len(), "batch of decisions failed; deciding one by one");
                for &id in batch {
                    results.push(alone(backend, id, goal, decision).await);
                }
            }
        }
    }
    results
}

async fn decide_batch<B: DecisionRows>(
    backend: &B,
    ids: &[i64],
    goal: DeadLetterState,
    decision: &Decision,
) -> Result<Vec<Result<Decided, DecisionError>>, StoreError> {
    let mut tx = backend.begin_write().await?;
    let mut decided = Vec::with_capacity(ids.len());
    for &id in ids {
        match decide_in::<B>(&mut tx, id, goal, decision).await {
            Err(DecisionError::Store(error)) => return Err(error),
            other => decided.push(other),
        }
    }
    backend.commit(tx).await?;
    if decided
        .iter()
        .any(|d| d.as_ref().is_ok_and(|d| d.job_id.is_some()))
    {
        backend.jobs_enqueued();
    }
    Ok(decided)
}

/// Requeues or discards dead letter `id` in the caller's transaction. A refusal writes nothing.
async fn decide_in<B: DecisionRows>(
    tx: &mut B::Tx,
    id: i64,
    goal: DeadLetterState,
    decision: &Decision,
) -> Result<Decided, DecisionError> {
    let (state, event_id) = locked_dead_letter::<B>(tx, id).await?;
    let Step::Apply(transition) = dead_letter_step(id, state, goal)? else {
        if goal == DeadLetterState::Requeued
            && let Some(newer) = B::open_dead_letter_of(tx, event_id).await?
        {
            return Err(DecisionError::AlreadyDecided(format!(
                "dead letter {id} was requeued and failed again as dead letter {newer}; act on {newer}"
            )));
        }
        return Ok(decided(id, event_id, false, state.label(), None));
    };
    let (event_goal, action) = match goal {
        DeadLetterState::Requeued => (EventStatus::Recorded, "dead_letter.requeue"),
        _ => (EventStatus::Discarded, "dead_letter.discard"),
    };
    let event = EventStatus::Abandoned.transition(event_goal)?;
    B::set_event_status(tx, event_id, event).await?;
    let job_id = match goal {
        DeadLetterState::Requeued => Some(B::give_fresh_job(tx, event_id).await?),
        _ => None,
    };
    B::write_dead_letter(tx, id, transition, decision, job_id.as_deref()).await?;
    let states = (transition.from().label(), transition.to().label());
    B::audit(tx, decision, action, ("dead_letter", id), event_id, states).await?;
    Ok(decided(id, event_id, true, transition.to().label(), job_id))
}

/// Resolves an open conflict (a reason is required); the original event stays authoritative.
pub(super) async fn resolve_conflict<B: DecisionRows>(
    backend: &B,
    id: i64,
    decision: &Decision,
) -> Result<Decided, DecisionError> {
    decision.require_reason()?;
    let mut tx = backend.begin_write().await?;
    let (state, event_id) = B::lock_conflict(&mut tx, id)
        .await?
        .ok_or(DecisionError::NotFound("conflict"))?;
    let state: ConflictState = parse("conflict", id, &state)?;
    let Step::Apply(transition) = conflict_step(id, state, ConflictState::Resolved)? else {
        return Ok(decided(id, event_id, false, state.label(), None));
    };
    B::write_conflict(&mut tx, id, transition, decision).await?;
    let states = (transition.from().label(), transition.to().label());
    let subject = ("conflict", id);
    B::audit(
        &mut tx,
        decision,
        "conflict.resolve",
        subject,
        event_id,
        states,
    )
    .await?;
    backend.commit(tx).await?;
    Ok(decided(id, event_id, true, transition.to().label(), None))
}
