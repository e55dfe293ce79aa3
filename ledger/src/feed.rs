//! A source's feed: the provider's own list of its movements, read window after window so that
//! money reaches the books whether or not a webhook named it (ARCHITECTURE.md, Feeds). Each
//! window is an event of the source, recorded under the natural key `feed:{seq}` with a
//! [`Window`] trigger, so a sweep has a job, attempts, retries, a dead letter and the source's
//! pause like any event, and two processes that open the same window record it once.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::trigger::{Named, Trigger};

/// The tag a window is stored under (`{"feed_window": {...}}`); no provider's tag.
pub const WINDOW_TAG: &str = "feed_window";
/// The kind a window event is stored with.
pub const WINDOW_KIND: &str = "feed.window";
/// What every window's external id starts with; no provider's event id does.
pub const EXTERNAL_ID_PREFIX: &str = "feed:";

/// The movements created in `[from, to)`, the `seq`-th window of its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    pub seq: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Window {
    /// The natural key of window `seq` (zero-padded, so keys sort as windows do).
    pub fn external_id(seq: i64) -> String {
        format!("{EXTERNAL_ID_PREFIX}{seq:012}")
    }

    pub fn named(&self) -> Named {
        Named {
            trigger: Trigger::new(
                WINDOW_TAG,
                serde_json::to_value(self).unwrap_or(Value::Null),
            ),
            kind: WINDOW_KIND.to_owned(),
            object: Self::external_id(self.seq),
        }
    }

    /// The window a trigger holds; `None` for any other trigger, an error for a window trigger
    /// that does not read.
    pub fn from_trigger(trigger: &Trigger) -> Option<Result<Window, String>> {
        (trigger.tag() == WINDOW_TAG).then(|| {
            serde_json::from_value(trigger.document().clone())
                .map_err(|e| format!("stored feed window: {e}"))
        })
    }

    /// The window stored as an event's facts.
    pub fn from_facts(facts: &Value) -> Option<Result<Window, String>> {
        match Trigger::from_stored(facts)? {
            Ok(trigger) => Self::from_trigger(&trigger),
            Err(error) => Some(Err(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_round_trips_through_its_stored_facts() {
        let from = DateTime::from_timestamp(1_764_000_000, 0).expect("time");
        let to = DateTime::from_timestamp(1_764_000_060, 0).expect("time");
        let window = Window { seq: 7, from, to };
        let named = window.named();
        assert_eq!(named.object, "feed:000000000007");
        assert_eq!(
            Window::from_facts(&named.trigger.to_stored()),
            Some(Ok(window))
        );
        let other = Trigger::new("stripe", serde_json::json!({"object": "ch_1"}));
        assert_eq!(Window::from_trigger(&other), None);
        assert!(Window::external_id(9) < Window::external_id(10));
    }
}
