//! What the ingress hands to the store, and what the store answers: the first layer of dedup,
//! delivery -> event by `(source, external_id)`.

use crate::event::{FactsError, SettlementEvent};
use crate::fingerprint::Fingerprint;
use crate::ids::{ConflictId, EventId, ExternalId, SourceName};
use crate::trigger::Named;

/// An authentic delivery's event, ready to be recorded.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub source: SourceName,
    pub external_id: ExternalId,
    /// This event's part of the delivery as received (the whole body, or one item of a batch).
    pub payload: String,
    pub content: Content,
}

/// An event's facts: valid, kept as received with the reason they are not, or (for a provider
/// whose webhook only names the money) what the webhook names, for the job to fetch.
#[derive(Clone, Debug)]
pub enum Content {
    Valid(SettlementEvent),
    Invalid(InvalidFacts),
    Named(Named),
}

/// Facts that failed validation. The event is still recorded (the provider must stop
/// redelivering, nothing may be lost) and its job dead-letters it for a person.
#[derive(Clone, Debug)]
pub struct InvalidFacts {
    /// The kind as the delivery named it, when it named one.
    pub kind: Option<String>,
    pub error: FactsError,
    /// [`Fingerprint::of_unvalidated`] over the delivery's settlement-relevant JSON.
    pub fingerprint: Fingerprint,
}

impl NewEvent {
    pub fn fingerprint(&self) -> Fingerprint {
        match &self.content {
            Content::Valid(event) => event.fingerprint(),
            Content::Invalid(invalid) => invalid.fingerprint,
            Content::Named(named) => named.trigger.fingerprint(),
        }
    }
}

/// What recording one event did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Recorded {
    /// A new event, committed with its job.
    New(EventId),
    /// The same key with the same fingerprint: nothing written.
    Duplicate(EventId),
    /// The same key with a different fingerprint: the original is untouched, the delivery kept in
    /// `event_conflicts` (identical conflicting redeliveries collapse onto one row).
    Conflict {
        event_id: EventId,
        conflict_id: ConflictId,
    },
}

impl Recorded {
    pub fn event_id(self) -> EventId {
        match self {
            Recorded::New(id) | Recorded::Duplicate(id) => id,
            Recorded::Conflict { event_id, .. } => event_id,
        }
    }
}
