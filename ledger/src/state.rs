//! The state machines (ARCHITECTURE.md, State machines): an event, an attempt, a queue row, a dead
//! letter and a conflict. Each is an enum whose edges are listed once, in [`StateMachine::EDGES`];
//! [`StateMachine::transition`] is the only way to make the [`Transition`] value the store's
//! writes take, so a move that is not an edge is refused here, before any SQL, and the store's
//! conditional `UPDATE ... WHERE state = from` refuses one another process made stale.
//!
//! The labels (`label`) are what the tables store and what their `CHECK` constraints accept
//! (`tests::suite::conformance::*::every_state_label_is_one_the_tables_accept`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// A state machine: its states, its edges, and the label each state is stored as.
pub trait StateMachine: Copy + Eq + fmt::Debug + 'static {
    /// What it is the state of, for messages ("event", "dead letter", ...).
    const MACHINE: &'static str;
    /// Every state.
    const STATES: &'static [Self];
    /// Every legal move; nothing else changes a row's state.
    const EDGES: &'static [(Self, Self)];

    /// The state as stored.
    fn label(self) -> &'static str;

    fn parse(text: &str) -> Option<Self> {
        Self::STATES.iter().copied().find(|s| s.label() == text)
    }

    fn can_become(self, next: Self) -> bool {
        Self::EDGES.contains(&(self, next))
    }

    /// The move from `self` to `next`, if it is an edge.
    fn transition(self, next: Self) -> Result<Transition<Self>, StoreError> {
        if self.can_become(next) {
            Ok(Transition {
                from: self,
                to: next,
            })
        } else {
            Err(StoreError::InvalidTransition {
                from: self.label(),
                to: next.label(),
            })
        }
    }
}

/// A legal move of a state machine: made only by [`StateMachine::transition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition<S> {
    from: S,
    to: S,
}

impl<S: StateMachine> Transition<S> {
    pub fn from(self) -> S {
        self.from
    }

    pub fn to(self) -> S {
        self.to
    }

    /// The error for a row that was no longer in `from` when the move was written (another
    /// process moved it first).
    pub fn stale(self) -> StoreError {
        StoreError::InvalidTransition {
            from: self.from.label(),
            to: self.to.label(),
        }
    }
}

/// Implements `Display` (the label) for a state machine's enum.
macro_rules! display_label {
    ($($state:ty),*) => {$(
        impl fmt::Display for $state {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.label())
            }
        }
    )*};
}

/// An event: `recorded` -> `posted`; `recorded` -> `abandoned` (its dead letter open) ->
/// `recorded` (requeued) or `discarded`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventStatus {
    Recorded,
    Posted,
    Abandoned,
    Discarded,
}

impl EventStatus {
    pub const ALL: [EventStatus; 4] = [
        EventStatus::Recorded,
        EventStatus::Posted,
        EventStatus::Abandoned,
        EventStatus::Discarded,
    ];

    pub fn as_str(self) -> &'static str {
        self.label()
    }
}

impl StateMachine for EventStatus {
    const MACHINE: &'static str = "event";
    const STATES: &'static [Self] = &EventStatus::ALL;
    const EDGES: &'static [(Self, Self)] = &[
        (EventStatus::Recorded, EventStatus::Posted),
        (EventStatus::Recorded, EventStatus::Abandoned),
        (EventStatus::Abandoned, EventStatus::Recorded),
        (EventStatus::Abandoned, EventStatus::Discarded),
    ];

    fn label(self) -> &'static str {
        match self {
            EventStatus::Recorded => "recorded",
            EventStatus::Posted => "posted",
            EventStatus::Abandoned => "abandoned",
            EventStatus::Discarded => "discarded",
        }
    }
}

/// An attempt (`job_attempts`): `started` (no outcome yet) -> one outcome, written once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    /// Begun and not ended: its worker is running it, or died running it.
    Started,
    /// It wrote the event's entry.
    Posted,
    /// The event was settled without a new entry (a replay, or its movements already posted).
    Settled,
    /// It failed in a way a later attempt may not.
    Transient,
    /// It failed in a way no attempt can fix.
    Permanent,
    /// Its worker stopped before it ended (closed by the next start of its job).
    Died,
}

impl StateMachine for AttemptState {
    const MACHINE: &'static str = "attempt";
    const STATES: &'static [Self] = &[
        AttemptState::Started,
        AttemptState::Posted,
        AttemptState::Settled,
        AttemptState::Transient,
        AttemptState::Permanent,
        AttemptState::Died,
    ];
    const EDGES: &'static [(Self, Self)] = &[
        (AttemptState::Started, AttemptState::Posted),
        (AttemptState::Started, AttemptState::Settled),
        (AttemptState::Started, AttemptState::Transient),
        (AttemptState::Started, AttemptState::Permanent),
        (AttemptState::Started, AttemptState::Died),
    ];

    fn label(self) -> &'static str {
        match self {
            AttemptState::Started => "started",
            AttemptState::Posted => "posted",
            AttemptState::Settled => "settled",
            AttemptState::Transient => "transient",
            AttemptState::Permanent => "permanent",
            AttemptState::Died => "died",
        }
    }
}

/// A queue row, in apalis' vocabulary. apalis moves `Pending` -> `Queued` when a worker fetches
/// it (and back to `Pending` when the worker's heartbeat lapses); settle, not apalis, writes how
/// each of its jobs ended, in the transaction that decided it: a job that settled its event is
/// `Done` (its row deleted there), one that will not run again is `Killed` (dead-lettered,
/// unreadable, or naming no event), one that must run again later is `Pending` with a later
/// `run_at` and no lock. (`Running` and `Failed` are apalis states settle never writes.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueStatus {
    /// Waiting for its `run_at`; any worker may fetch it then.
    Pending,
    /// Fetched and locked by a worker.
    Queued,
    /// Settled its event: the row is deleted.
    Done,
    /// Nothing runs it again.
    Killed,
}

impl QueueStatus {
    pub fn as_str(self) -> &'static str {
        self.label()
    }
}

impl StateMachine for QueueStatus {
    const MACHINE: &'static str = "queue row";
    const STATES: &'static [Self] = &[
        QueueStatus::Pending,
        QueueStatus::Queued,
        QueueStatus::Done,
        QueueStatus::Killed,
    ];
    const EDGES: &'static [(Self, Self)] = &[
        (QueueStatus::Pending, QueueStatus::Queued),
        (QueueStatus::Queued, QueueStatus::Pending),
        (QueueStatus::Queued, QueueStatus::Done),
        (QueueStatus::Queued, QueueStatus::Killed),
    ];

    fn label(self) -> &'static str {
        match self {
            QueueStatus::Pending => "Pending",
            QueueStatus::Queued => "Queued",
            QueueStatus::Done => "Done",
            QueueStatus::Killed => "Killed",
        }
    }
}

/// A dead letter: `open` -> `requeued` | `discarded`, by an ops action only.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeadLetterState {
    Open,
    Requeued,
    Discarded,
}

impl DeadLetterState {
    pub fn as_str(self) -> &'static str {
        self.label()
    }
}

impl StateMachine for DeadLetterState {
    const MACHINE: &'static str = "dead letter";
    const STATES: &'static [Self] = &[
        DeadLetterState::Open,
        DeadLetterState::Requeued,
        DeadLetterState::Discarded,
    ];
    const EDGES: &'static [(Self, Self)] = &[
        (DeadLetterState::Open, DeadLetterState::Requeued),
        (DeadLetterState::Open, DeadLetterState::Discarded),
    ];

    fn label(self) -> &'static str {
        match self {
            DeadLetterState::Open => "open",
            DeadLetterState::Requeued => "requeued",
            DeadLetterState::Discarded => "discarded",
        }
    }
}

/// A conflicting delivery kept for a person: `open` -> `resolved`, by an ops action only (the
/// original event stays authoritative either way).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConflictState {
    Open,
    Resolved,
}

impl ConflictState {
    pub fn as_str(self) -> &'static str {
        self.label()
    }
}

impl StateMachine for ConflictState {
    const MACHINE: &'static str = "conflict";
    const STATES: &'static [Self] = &[ConflictState::Open, ConflictState::Resolved];
    const EDGES: &'static [(Self, Self)] = &[(ConflictState::Open, ConflictState::Resolved)];

    fn label(self) -> &'static str {
        match self {
            ConflictState::Open => "open",
            ConflictState::Resolved => "resolved",
        }
    }
}

display_label!(
    EventStatus,
    AttemptState,
    QueueStatus,
    DeadLetterState,
    ConflictState
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks every pair of states: the move is made exactly when it is one of `legal`, and a
    /// refused move names both states.
    fn walk<S: StateMachine>(legal: &[(S, S)]) {
        let mut made = 0;
        for &from in S::STATES {
            for &to in S::STATES {
                match from.transition(to) {
                    Ok(t) => {
                        assert!(legal.contains(&(from, to)), "{from:?} -> {to:?} was made");
                        assert_eq!((t.from(), t.to()), (from, to));
                        made += 1;
                    }
                    Err(StoreError::InvalidTransition { from: f, to: t }) => {
                        assert!(!legal.contains(&(from, to)), "{from:?} -> {to:?} refused");
                        assert_eq!((f, t), (from.label(), to.label()));
                    }
                    Err(other) => panic!("{other:?}"),
                }
            }
            assert_eq!(S::parse(from.label()), Some(from), "{} label", S::MACHINE);
        }
        assert_eq!(
            made,
            legal.len(),
            "every legal move of the {} is made",
            S::MACHINE
        );
        assert_eq!(S::parse("unknown"), None);
    }

    #[test]
    fn the_event_machine() {
        use EventStatus::*;
        walk(&[
            (Recorded, Posted),
            (Recorded, Abandoned),
            (Abandoned, Recorded),
            (Abandoned, Discarded),
        ]);
    }

    #[test]
    fn the_attempt_machine() {
        use AttemptState::*;
        walk(&[
            (Started, Posted),
            (Started, Settled),
            (Started, Transient),
            (Started, Permanent),
            (Started, Died),
        ]);
    }

    #[test]
    fn the_queue_row_machine() {
        use QueueStatus::*;
        walk(&[
            (Pending, Queued),
            (Queued, Pending),
            (Queued, Done),
            (Queued, Killed),
        ]);
    }

    #[test]
    fn the_dead_letter_machine() {
        use DeadLetterState::*;
        walk(&[(Open, Requeued), (Open, Discarded)]);
    }

    #[test]
    fn the_conflict_machine() {
        use ConflictState::*;
        walk(&[(Open, Resolved)]);
    }

    #[test]
    fn labels_serialize_as_stored() {
        assert_eq!(
            serde_json::to_value(EventStatus::Abandoned).expect("json"),
            "abandoned"
        );
        assert_eq!(
            serde_json::to_value(DeadLetterState::Requeued).expect("json"),
            "requeued"
        );
        assert_eq!(
            serde_json::to_value(ConflictState::Resolved).expect("json"),
            "resolved"
        );
    }
}
