//! What people look at and decide: events, dead letters, conflicts, the audit trail. Views are
//! plain serialisable data; decisions are idempotent transitions, each audited.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::job::{AttemptOutcome, ErrorClass};
use crate::state::EventStatus;

pub use crate::state::{ConflictState, DeadLetterState};
use crate::state::{StateMachine, Transition};

/// The most items one page of a listing holds.
pub const PAGE_LIMIT_MAX: u32 = 500;
/// The most items one bulk action touches.
pub const BULK_LIMIT_MAX: u32 = 1_000;

/// Which dead letters a listing or a bulk action covers. Unset fields match everything;
/// `state` defaults to `open`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterFilter {
    pub state: Option<DeadLetterState>,
    pub source: Option<String>,
    pub kind: Option<String>,
    #[serde(default, with = "error_class_text")]
    #[schema(value_type = Option<String>, example = "permanent")]
    pub error_class: Option<ErrorClass>,
    pub error_code: Option<String>,
    pub abandoned_before: Option<DateTime<Utc>>,
    pub abandoned_after: Option<DateTime<Utc>>,
}

mod error_class_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::job::ErrorClass;

    pub fn serialize<S: Serializer>(
        class: &Option<ErrorClass>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match class {
            Some(class) => serializer.serialize_str(class.as_str()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<ErrorClass>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| {
                ErrorClass::parse(&text).ok_or_else(|| {
                    serde::de::Error::custom("error_class must be permanent or exhausted")
                })
            })
            .transpose()
    }
}

/// A page request: items with ids below `cursor` (newest first), at most `limit`.
#[derive(Clone, Copy, Debug)]
pub struct PageRequest {
    pub cursor: Option<i64>,
    pub limit: u32,
}

impl PageRequest {
    pub fn new(cursor: Option<i64>, limit: Option<u32>) -> Self {
        Self {
            cursor,
            limit: limit.unwrap_or(50).clamp(1, PAGE_LIMIT_MAX),
        }
    }
}

/// One page of a listing; `next_cursor` fetches the next (older) page, `None` at the end.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<i64>,
}

/// An event as stored.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EventView {
    pub id: i64,
    pub source: String,
    pub external_id: String,
    pub status: EventStatus,
    pub kind: Option<String>,
    pub movement_id: Option<String>,
    pub fingerprint: String,
    pub facts: Option<serde_json::Value>,
    pub validation_error: Option<String>,
    /// As received; absent once erased (by retention or on request).
    pub payload: Option<String>,
    /// The erasure that removed the payload.
    pub payload_erased_by: Option<i64>,
    pub job_id: String,
    pub posted_entry_id: Option<i64>,
    pub received_at: DateTime<Utc>,
    pub status_changed_at: DateTime<Utc>,
}

/// What an event search matches: every field set must hold. Newest first (by id).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventFilter {
    pub source: Option<String>,
    /// The external id, exactly.
    pub external_id: Option<String>,
    /// External ids starting with this.
    pub external_id_prefix: Option<String>,
    pub kind: Option<String>,
    /// `recorded`, `posted`, `abandoned` or `discarded`.
    pub status: Option<String>,
    pub movement_id: Option<String>,
    /// A reference (order number) of an entry the event wrote or settled on.
    pub reference: Option<String>,
    /// A payout an entry of the event is tied to or belongs to.
    pub payout_id: Option<String>,
    /// Received at or after (RFC 3339).
    pub received_from: Option<DateTime<Utc>>,
    /// Received before (RFC 3339).
    pub received_to: Option<DateTime<Utc>>,
    /// Of a dead letter the event has had (any state).
    pub error_class: Option<String>,
    pub error_code: Option<String>,
}

impl EventFilter {
    /// Checks what has a closed set of values: a typo is an error, not an empty result.
    pub fn check(&self) -> Result<(), String> {
        if let Some(status) = &self.status
            && EventStatus::ALL.iter().all(|s| s.as_str() != status)
        {
            return Err(format!(
                "status {status:?} is none of recorded, posted, abandoned, discarded"
            ));
        }
        if let Some(class) = &self.error_class
            && !["permanent", "exhausted"].contains(&class.as_str())
        {
            return Err(format!(
                "error_class {class:?} is neither permanent nor exhausted"
            ));
        }
        if let (Some(from), Some(to)) = (self.received_from, self.received_to)
            && from >= to
        {
            return Err("received_from must be before received_to".into());
        }
        Ok(())
    }
}

/// An event in a search's results.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub external_id: String,
    pub status: String,
    pub kind: Option<String>,
    pub movement_id: Option<String>,
    pub received_at: DateTime<Utc>,
    pub posted_entry_id: Option<i64>,
    /// Its open dead letter's id, class and code, if it has one.
    pub dead_letter_id: Option<i64>,
    pub error_class: Option<String>,
    pub error_code: Option<String>,
}

/// A dead letter in a listing.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct DeadLetterSummary {
    pub id: i64,
    pub event_id: i64,
    pub source: String,
    pub external_id: String,
    pub kind: Option<String>,
    pub state: DeadLetterState,
    pub error_class: ErrorClass,
    pub error_code: String,
    pub last_error: String,
    pub attempts: i32,
    pub abandoned_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
}

/// One attempt of one of the event's jobs.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub job_id: String,
    pub attempt: i32,
    pub worker: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: Option<AttemptOutcome>,
    pub error_code: Option<String>,
    pub error: Option<String>,
}

/// A row of the audit log.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub reason: String,
    pub subject_type: String,
    pub subject_id: i64,
    pub event_id: Option<i64>,
    pub before_state: String,
    pub after_state: String,
}

/// Everything about one dead letter: its event, every attempt of every job the event had (so a
/// requeued item that failed again shows its whole history), and the audit trail.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct DeadLetterDetail {
    pub dead_letter: DeadLetterSummary,
    pub event: EventView,
    pub attempts: Vec<AttemptView>,
    pub audit: Vec<AuditView>,
}

/// Everything about one event: its payload's erasure, every attempt, every dead letter and
/// conflicting delivery it had, the entries it wrote or settled on, and the audit trail.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EventDetail {
    pub event: EventView,
    pub erasure: Option<PayloadErasure>,
    pub attempts: Vec<AttemptView>,
    pub dead_letters: Vec<DeadLetterSummary>,
    pub conflicts: Vec<ConflictView>,
    pub entries: Vec<EntryRef>,
    pub audit: Vec<AuditView>,
}

/// An entry an event wrote (or, for an event of a movement already posted, settled on).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EntryRef {
    pub id: i64,
    pub source_key: String,
    pub kind: String,
    pub reference: Option<String>,
    /// Whether this event wrote it (false: another event of the same movement did).
    pub own: bool,
}

/// A conflicting delivery beside the original it conflicts with.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ConflictView {
    pub id: i64,
    pub event_id: i64,
    pub source: String,
    pub external_id: String,
    pub state: ConflictState,
    pub deliveries: i32,
    pub first_seen_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub fingerprint: String,
    pub facts: Option<serde_json::Value>,
    pub validation_error: Option<String>,
    /// As received; absent once erased.
    pub payload: Option<String>,
    pub payload_erased_by: Option<i64>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolved_by: Option<String>,
    pub resolution_reason: Option<String>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ConflictDetail {
    pub conflict: ConflictView,
    /// The original, which stays authoritative.
    pub original: EventView,
    pub audit: Vec<AuditView>,
}

/// Who decides, and why.
#[derive(Clone, Debug)]
pub struct Decision {
    pub actor: String,
    pub reason: String,
}

/// What a decision did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Decided {
    pub subject_id: i64,
    pub event_id: i64,
    /// `false` when the goal state already held: success, nothing written, no audit row.
    pub changed: bool,
    pub state: String,
    /// The fresh job a requeue gave the event.
    pub job_id: Option<String>,
}

impl Decision {
    /// Discarding a dead letter and resolving a conflict need a reason; refused before anything
    /// is read.
    pub fn require_reason(&self) -> Result<(), DecisionError> {
        if self.reason.trim().is_empty() {
            Err(DecisionError::ReasonRequired)
        } else {
            Ok(())
        }
    }
}

/// What a decision does to a subject whose state is `current`, asked to reach `goal`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<S> {
    /// The goal already holds: success, nothing written, no audit row.
    Unchanged,
    /// Write this move, with its audit row.
    Apply(Transition<S>),
}

/// The rule of a dead-letter decision (requeue or discard) on dead letter `id`: a repeat is
/// idempotent, the other decision after one was made is refused. (A requeued dead letter whose
/// event failed again has a newer open one: the store refuses a repeat that names the old one.)
pub fn dead_letter_step(
    id: i64,
    current: DeadLetterState,
    goal: DeadLetterState,
) -> Result<Step<DeadLetterState>, DecisionError> {
    if current == goal {
        return Ok(Step::Unchanged);
    }
    current.transition(goal).map(Step::Apply).map_err(|_| {
        DecisionError::AlreadyDecided(match current {
            DeadLetterState::Requeued => {
                format!("dead letter {id} was requeued; its event is no longer in the dead letter")
            }
            _ => format!("dead letter {id} was {current}"),
        })
    })
}

/// The rule of resolving a conflict: once resolved, resolving again changes nothing.
pub fn conflict_step(
    id: i64,
    current: ConflictState,
    goal: ConflictState,
) -> Result<Step<ConflictState>, DecisionError> {
    if current == goal {
        return Ok(Step::Unchanged);
    }
    current
        .transition(goal)
        .map(Step::Apply)
        .map_err(|_| DecisionError::AlreadyDecided(format!("conflict {id} is {current}")))
}

/// Why a decision was refused; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error("no such {0}")]
    NotFound(&'static str),
    #[error("already decided: {0}")]
    AlreadyDecided(String),
    #[error("a reason is required")]
    ReasonRequired,
    /// What was asked cannot be done as asked (lines that do not balance, ...).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The subject is still needed as it is (an event in flight, in an open dead letter or in an
    /// open conflict keeps its payload).
    #[error("in use: {0}")]
    InUse(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for DecisionError {
    fn from(error: sqlx::Error) -> Self {
        DecisionError::Store(error.into())
    }
}

/// An erasure as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PayloadErasure {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub reason: String,
    /// `expiry` (retention ran out) or `request` (a person erased it).
    pub scope: String,
    pub source: Option<String>,
    pub received_before: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod rules {
    use super::*;

    #[test]
    fn dead_letter_decisions() {
        use DeadLetterState::*;
        for goal in [Requeued, Discarded] {
            let Ok(Step::Apply(t)) = dead_letter_step(7, Open, goal) else {
                panic!("open -> {goal}");
            };
            assert_eq!((t.from(), t.to()), (Open, goal));
            assert_eq!(dead_letter_step(7, goal, goal).ok(), Some(Step::Unchanged));
        }
        let refused = |current, goal| match dead_letter_step(7, current, goal) {
            Err(DecisionError::AlreadyDecided(why)) => why,
            other => panic!("{current} -> {goal}: {other:?}"),
        };
        assert_eq!(refused(Discarded, Requeued), "dead letter 7 was discarded");
        assert_eq!(
            refused(Requeued, Discarded),
            "dead letter 7 was requeued; its event is no longer in the dead letter"
        );
    }

    #[test]
    fn conflict_decisions() {
        use ConflictState::*;
        assert!(matches!(
            conflict_step(3, Open, Resolved),
            Ok(Step::Apply(t)) if t.to() == Resolved
        ));
        assert_eq!(
            conflict_step(3, Resolved, Resolved).ok(),
            Some(Step::Unchanged)
        );
        assert!(matches!(
            conflict_step(3, Resolved, Open),
            Err(DecisionError::AlreadyDecided(_))
        ));
    }

    #[test]
    fn a_reason_is_required_and_blank_is_none() {
        let decision = |reason: &str| Decision {
            actor: "ops".into(),
            reason: reason.into(),
        };
        assert!(matches!(
            decision(" \t").require_reason(),
            Err(DecisionError::ReasonRequired)
        ));
        assert!(decision("duplicate of ch_1").require_reason().is_ok());
    }
}
