//! Adyen's fuzz targets: whole notifications, and settlement details reports.

use ledger::SourceName;
use serde_json::Value;

use super::config::MoneyFrom;
use super::receive::{Receiver, adapt, signing_key, verify};
use crate::fuzzing::{check_events, check_movement};
use crate::seam::{Adapted, FuzzTarget};

pub(super) static TARGETS: &[FuzzTarget] = &[
    FuzzTarget {
        name: "adyen_notification",
        run: notification,
    },
    FuzzTarget {
        name: "adyen_report",
        run: report,
    },
];

/// The most lines of one input read (a mutated report can be long; its lines are alike).
const REPORT_LINES_MAX: usize = 2_000;

/// A settlement details report, as downloaded: reading it never panics, and every line it books
/// adds up (its net the gross less the fees, its fee parts the fee, its entry balanced); a line
/// that does not add up is booked to suspense with why, never as if it did.
fn report(data: &[u8]) {
    let source = SourceName::parse("fuzz").expect("a valid source name");
    let file = "settlement_detail_report_batch_1.csv";
    let Ok(mut report) = super::report::Report::new(data) else {
        return;
    };
    for _ in 0..REPORT_LINES_MAX {
        let Some(Ok(line)) = report.next_line() else {
            return;
        };
        let batch = line.batch(file);
        let Ok(payout) = super::report::batch_payout(line.merchant_account("FuzzShop"), &batch)
        else {
            continue;
        };
        if let Ok(movement) = line.movement(&source, &batch, &payout) {
            check_movement(&movement, &source);
            let suspense = movement.details().get("review").is_some();
            assert_eq!(
                suspense,
                movement.counter() == ledger::movement::Counter::Chart(ledger::posting::SUSPENSE),
                "a line is booked to suspense exactly when it says why"
            );
        }
        if let Ok(Some(sale)) = line.sale(&source) {
            check_movement(&sale, &source);
        }
    }
}

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
