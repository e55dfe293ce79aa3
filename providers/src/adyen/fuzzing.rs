//! Adyen's fuzz target: whole notifications.

use ledger::SourceName;
use serde_json::Value;

use super::config::MoneyFrom;
use super::receive::{Receiver, adapt, signing_key, verify};
use crate::fuzzing::check_events;
use crate::seam::{Adapted, FuzzTarget};

pub(super) static TARGETS: &[FuzzTarget] = &[FuzzTarget {
    name: "adyen_notification",
    run: notification,
}];

const KEY_HEX: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

/// An Adyen notification: verifying never panics nor passes unsigned items, and adapting gives at
/// most one event per item.
fn notification(data: &[u8]) {
    let source = Receiver {
        name: SourceName::parse("fuzz").expect("a valid source name"),
        keys: vec![signing_key(KEY_HEX).expect("a hex key")],
        money_from: MoneyFrom::Notifications,
        merchant_accounts: None,
    };
    let Ok(value) = verify(&source, data) else {
        return;
    };
    // Only a notification whose every item carries a valid HMAC gets here.
    let items = value
        .get("notificationItems")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    assert!(items > 0, "a verified notification has items");
    if let Ok(Adapted::Events(events)) = adapt(&source, &value) {
        // Items that failed or are not about settlement are skipped; none yields two events.
        assert!(events.len() <= items, "at most one event per item");
        check_events(&events);
    }
}
