//! The `PostSettlement` job: its payload, how its attempts start, what posting can answer, and
//! how a failure is decided. The worker runtime drives it; the store carries it out.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::EventId;
use crate::state::EventStatus;
use crate::state::{AttemptState, StateMachine};

pub use crate::state::QueueStatus;

/// The queue (apalis `job_type`) that carries `PostSettlement` jobs.
pub const POST_SETTLEMENT_QUEUE: &str = "settle::PostSettlement";

/// Post the event `event_id`. Kept tiny: the event row holds everything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostSettlement {
    pub event_id: EventId,
}

/// What a worker decodes from a job row. Decoding any JSON succeeds: a payload of another shape
/// becomes `Unreadable` and is dead-lettered, instead of stopping every worker that fetches it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JobPayload {
    Post(PostSettlement),
    Unreadable(serde_json::Value),
}

/// A job as the store knows it: the queue's id for it and the event it posts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRef {
    pub job_id: String,
    pub event_id: EventId,
}

/// What starting an attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptStart {
    /// Attempt number `attempt` is recorded as started (committed); do the work.
    Run { attempt: u32 },
    /// This job's last attempt died with its worker, so it may be what kills workers: nothing
    /// was started. Start it again with [`crate::Store::start_attempt_alone`] once nothing else
    /// is in flight in this process, so that a second death takes no other job's attempt with
    /// it.
    Suspect,
    /// The event is no longer waiting for this job (posted, closed, or requeued onto a newer
    /// job): nothing to do.
    NothingToDo,
    /// An earlier attempt of this job started and never finished (its worker died). It is now
    /// recorded as died; `attempts` have started in all. Back off before running again.
    Rescued { attempts: u32 },
    /// `attempts_max` attempts have started: the event was moved to the dead letter instead.
    Exhausted,
    /// No event has this id: the job was not written by settle.
    Stray,
    /// The event waits for this job but its source is paused: nothing was started, nothing
    /// counted. Hand the job back for later (resuming the source makes it due at once).
    Paused,
}

/// The start rule, first part: whether the event still waits for this job, and may start now.
/// `event` is the event's status and current job, `None` when no event has the job's event id;
/// `paused`: the event's source is paused. `Some` answers the start (`Stray`: the job is killed;
/// `NothingToDo`: its row is deleted; `Paused`: the job is handed back untouched); `None` goes
/// on to [`start_step`] once the job's unfinished attempts are closed as died.
pub fn start_gate(
    event: Option<(EventStatus, &str)>,
    job_id: &str,
    paused: bool,
) -> Option<AttemptStart> {
    match event {
        None => Some(AttemptStart::Stray),
        Some((EventStatus::Recorded, current)) if current == job_id => {
            paused.then_some(AttemptStart::Paused)
        }
        Some(_) => Some(AttemptStart::NothingToDo),
    }
}

/// Whether a job that has started `started` attempts has none left (`attempts_max` in all): the
/// one rule both the start (an attempt found dead was the last) and a failed attempt's decision
/// apply. (The PostgreSQL start function states it again in SQL; the conformance suite holds
/// the two to the same answers.)
pub fn out_of_attempts(started: u32, attempts_max: u32) -> bool {
    started >= attempts_max
}

/// The start rule, second part, for a job its event waits for: `started` attempts have begun
/// (the last one's number), `died_now` of them were still open and have just been closed as
/// died, and the last one ended `last`. Out of attempts: dead-lettered (`Exhausted`, the job
/// killed). An attempt just found dead: `Rescued` (nothing started; the caller backs off). The
/// last attempt died with its worker earlier: `Suspect` unless started `alone`. Otherwise the
/// next attempt starts.
pub fn start_step(
    started: u32,
    died_now: usize,
    last: Option<AttemptOutcome>,
    attempts_max: u32,
    alone: bool,
) -> AttemptStart {
    if out_of_attempts(started, attempts_max) {
        AttemptStart::Exhausted
    } else if died_now > 0 {
        AttemptStart::Rescued { attempts: started }
    } else if last == Some(AttemptOutcome::Died) && !alone {
        AttemptStart::Suspect
    } else {
        AttemptStart::Run {
            attempt: started + 1,
        }
    }
}

/// What posting did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posted {
    /// A new entry was written. `received_at`: when the event's delivery was recorded.
    New {
        entry_id: i64,
        received_at: DateTime<Utc>,
    },
    /// An entry with the same source key and the same facts already existed: the event now
    /// points at it, no entry was written.
    Replayed {
        entry_id: i64,
        received_at: DateTime<Utc>,
    },
    /// The event was already posted or closed when its lock was taken: nothing was written.
    AlreadySettled,
    /// The provider movements the event resolved to are posted: `written` new entries, and
    /// `existing` ones already posted with the same facts (by another event, or an earlier
    /// listing). Both may be zero (the event names no movement yet).
    Movements {
        written: u32,
        existing: u32,
        received_at: DateTime<Utc>,
    },
}

/// What an event's job must do, read from its stored facts.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// Post the facts the event carries (or dead-letter them if they are invalid).
    Post,
    /// Resolve what the webhook names through the source's provider (its API, a report), then
    /// post it.
    Resolve {
        source: crate::ids::SourceName,
        trigger: crate::trigger::Trigger,
    },
    /// The event's stored trigger cannot be read by this build: the job dead-letters it (and
    /// only it).
    Unreadable(String),
}

/// Why an event went to the dead letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    /// It cannot succeed as it is: no retry would help.
    Permanent,
    /// Transient failures (or worker deaths) used up every attempt.
    Exhausted,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Permanent => "permanent",
            ErrorClass::Exhausted => "exhausted",
        }
    }

    pub fn parse(text: &str) -> Option<ErrorClass> {
        [ErrorClass::Permanent, ErrorClass::Exhausted]
            .into_iter()
            .find(|class| class.as_str() == text)
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do with a failed attempt, decided by the worker's retry policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureDecision {
    /// Run again after this many milliseconds.
    RetryAfterMs(u64),
    /// Move the event to the dead letter; nothing retries it by itself.
    DeadLetter(ErrorClass),
}

/// How an attempt ended (`job_attempts.outcome`): the states an attempt moves to from
/// `started` (`state::AttemptState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttemptOutcome {
    Posted,
    Settled,
    Transient,
    Permanent,
    Died,
}

impl AttemptOutcome {
    pub const ALL: [AttemptOutcome; 5] = [
        AttemptOutcome::Posted,
        AttemptOutcome::Settled,
        AttemptOutcome::Transient,
        AttemptOutcome::Permanent,
        AttemptOutcome::Died,
    ];

    pub fn as_str(self) -> &'static str {
        AttemptState::from(self).label()
    }

    pub fn parse(text: &str) -> Option<AttemptOutcome> {
        AttemptOutcome::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == text)
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<AttemptOutcome> for AttemptState {
    /// The state an attempt ends in.
    fn from(outcome: AttemptOutcome) -> Self {
        match outcome {
            AttemptOutcome::Posted => AttemptState::Posted,
            AttemptOutcome::Settled => AttemptState::Settled,
            AttemptOutcome::Transient => AttemptState::Transient,
            AttemptOutcome::Permanent => AttemptState::Permanent,
            AttemptOutcome::Died => AttemptState::Died,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_json_payload_decodes() {
        let ok: JobPayload = serde_json::from_str(r#"{"event_id": 7}"#).expect("decodes");
        assert_eq!(
            ok,
            JobPayload::Post(PostSettlement {
                event_id: EventId::new(7)
            })
        );
        for other in [
            r#"{"event_id": "7"}"#,
            r#"{"event": 7}"#,
            r#"{"event_id": 7, "x": 1}"#,
            "[]",
            "null",
            "3",
        ] {
            let payload: JobPayload = serde_json::from_str(other).expect("decodes");
            assert!(matches!(payload, JobPayload::Unreadable(_)), "{other}");
        }
    }
}
