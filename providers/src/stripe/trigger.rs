//! What a Stripe webhook names, kept as its event's facts under the tag `stripe`. The job
//! resolves it through the API: the balance transactions named by id are fetched, those embedded
//! (a dispute's) are used as sent when complete, a charge's refunds and an automatic payout's
//! balance transactions are listed to the end.

use ledger::trigger::{Named, Trigger};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tag of a stored Stripe trigger (`{"stripe": {...}}`).
pub(super) const TAG: &str = "stripe";

/// What one webhook names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeTrigger {
    /// `event.type`, e.g. `charge.succeeded`.
    pub event_type: String,
    /// `data.object.id`.
    pub object: String,
    /// `event.account`: the connected account the event is about (Connect), when it is posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Balance transactions the object names by id, in the order it names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balance_transactions: Vec<String>,
    /// Balance transactions the object embeds whole (a dispute's), as sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embedded: Vec<Value>,
    /// A charge whose refunds are listed (`charge.refunded` carries none since API 2022-11-15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refunds_of_charge: Option<String>,
    /// An automatic payout whose balance transactions are listed and tied to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payout_listing: Option<String>,
}

impl StripeTrigger {
    /// As an event's facts: the event type is its kind, the object its movement id.
    pub fn named(&self) -> Named {
        Named {
            trigger: Trigger::new(
                TAG,
                serde_json::to_value(self).unwrap_or(Value::Null),
            ),
            kind: self.event_type.clone(),
            object: self.object.clone(),
        }
    }

    /// Reads a stored trigger back.
    pub fn from_trigger(trigger: &Trigger) -> Result<Self, String> {
        if trigger.tag() != TAG {
            return Err(format!("a Stripe source has no trigger {:?}", trigger.tag()));
        }
        serde_json::from_value(trigger.document().clone())
            .map_err(|e| format!("stored trigger: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stored_triggers_round_trip_with_the_fingerprint_they_always_had() {
        let trigger = StripeTrigger {
            event_type: "charge.succeeded".into(),
            object: "ch_1".into(),
            account: None,
            balance_transactions: vec!["txn_1".into()],
            embedded: vec![],
            refunds_of_charge: None,
            payout_listing: None,
        };
        let named = trigger.named();
        let stored = named.trigger.to_stored();
        assert_eq!(
            stored,
            json!({"stripe": {"event_type": "charge.succeeded", "object": "ch_1",
                              "balance_transactions": ["txn_1"]}})
        );
        let back = Trigger::from_stored(&stored).expect("a trigger").expect("readable");
        assert_eq!(StripeTrigger::from_trigger(&back), Ok(trigger));
        assert_eq!((named.kind.as_str(), named.object.as_str()), ("charge.succeeded", "ch_1"));
        assert_eq!(
            named.trigger.fingerprint().to_hex(),
            GOLDEN_FINGERPRINT,
            "a redelivery of an event already recorded replays it"
        );
    }

    /// The fingerprint settle has always stored for this trigger.
    const GOLDEN_FINGERPRINT: &str =
        "d3adc3c48cd0687508cc31eb226b2653eae8c9407390342a1d115719c8fdb2bd";
}
