//! What a webhook names when it only names the money: a provider's own document (the balance
//! transactions a charge names, the report a notification announces), kept as the event's facts
//! and read back by the same provider when the event's job resolves it. settle itself never
//! looks inside: a trigger is a tag and a JSON document.
//!
//! Stored as `{"<tag>": <document>}`. Canonical settlement facts always carry `kind`
//! ([`crate::SettlementEvent::to_canonical`]); facts without it are a trigger. That one rule is
//! what the store (and `settle verify`'s SQL, [`STORED_AS_TRIGGER_POSTGRES`]) tells the two
//! apart by, so a provider's tag is never `kind`.

use serde_json::{Map, Value};

use crate::fingerprint::Fingerprint;

/// The member canonical settlement facts always carry and a trigger never does.
pub const CANONICAL_MEMBER: &str = "kind";

/// Whether stored facts are a trigger, in PostgreSQL (`e` is `settlement_events`).
pub const STORED_AS_TRIGGER_POSTGRES: &str = "(e.facts IS NOT NULL AND NOT e.facts ? 'kind')";
/// The same in SQLite.
pub const STORED_AS_TRIGGER_SQLITE: &str =
    "(e.facts IS NOT NULL AND json_extract(e.facts, '$.kind') IS NULL)";

/// A provider's document under its tag.
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger {
    tag: String,
    document: Value,
}

impl Trigger {
    /// `tag` names the provider's kind of document (a provider may have several): each
    /// provider's tags are its own, and never [`CANONICAL_MEMBER`].
    pub fn new(tag: impl Into<String>, document: Value) -> Self {
        Self {
            tag: tag.into(),
            document,
        }
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    pub fn document(&self) -> &Value {
        &self.document
    }

    /// Reads stored facts; `None` when they are canonical settlement facts instead, an error
    /// when they are neither.
    pub fn from_stored(facts: &Value) -> Option<Result<Trigger, String>> {
        let object = facts.as_object()?;
        if object.contains_key(CANONICAL_MEMBER) {
            return None;
        }
        let mut members = object.iter();
        Some(match (members.next(), members.next()) {
            (Some((tag, document)), None) => Ok(Trigger::new(tag.clone(), document.clone())),
            _ => Err(format!(
                "stored facts hold {} members and no `kind`: neither canonical facts nor a trigger",
                object.len()
            )),
        })
    }

    pub fn to_stored(&self) -> Value {
        let mut object = Map::with_capacity(1);
        object.insert(self.tag.clone(), self.document.clone());
        Value::Object(object)
    }

    /// SHA-256 over the document in canonical JSON, under its tag: a redelivery that names the
    /// same things has the same fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_trigger(&self.tag, &self.document)
    }
}

/// A trigger with what the event row keeps beside it: the provider's event type (stored as the
/// event's kind) and the object the event is about (stored as its movement id).
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    pub trigger: Trigger,
    pub kind: String,
    pub object: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stored_triggers_round_trip_and_canonical_facts_are_not_triggers() {
        let trigger = Trigger::new("toy", json!({"object": "o_1", "names": ["m_1"]}));
        let stored = trigger.to_stored();
        assert_eq!(stored, json!({"toy": {"object": "o_1", "names": ["m_1"]}}));
        assert_eq!(Trigger::from_stored(&stored), Some(Ok(trigger.clone())));
        assert_eq!(Trigger::from_stored(&json!({"kind": "fee", "x": 1})), None);
        assert!(matches!(
            Trigger::from_stored(&json!({"a": 1, "b": 2})),
            Some(Err(_))
        ));
        assert_eq!(
            trigger.fingerprint(),
            Trigger::new("toy", json!({"names": ["m_1"], "object": "o_1"})).fingerprint(),
            "key order is not part of the fingerprint"
        );
        assert_ne!(
            trigger.fingerprint(),
            Trigger::new("other", trigger.document().clone()).fingerprint()
        );
    }
}
