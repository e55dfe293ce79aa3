//! What Adyen notifications name, kept as their events' facts: a settlement details report to
//! download (`adyen_report`), and a sale (or its failure) to book as a receivable
//! (`adyen_sale`), which the report's `Settled` line for the capture clears. A sale is one
//! movement, built by one function from either document, so it is booked once, by whichever
//! comes first.

use chrono::{DateTime, Utc};
use ledger::movement::{Compared, Counter, Movement, MovementParts};
use ledger::trigger::{Named, Trigger};
use ledger::{Amount, Currency, Kind, MovementId, Reference, SourceName};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The tag of a stored report trigger (`{"adyen_report": {...}}`).
pub(super) const REPORT_TAG: &str = "adyen_report";
/// What the external id of every report's event starts with:
/// `REPORT_AVAILABLE:{merchantAccountCode}:{file}`.
pub(super) const REPORT_PREFIX: &str = "REPORT_AVAILABLE:";
/// A settlement details report's file name: this, its batch number, then `.csv`.
const BATCH_FILE: &str = "settlement_detail_report_batch_";

/// The tag of a stored sale trigger (`{"adyen_sale": {...}}`).
pub(super) const SALE_TAG: &str = "adyen_sale";

/// A stored trigger of this provider, read back.
#[derive(Clone, Debug, PartialEq)]
pub enum AdyenTrigger {
    Report(AdyenReportTrigger),
    Sale(AdyenSaleTrigger),
}

impl AdyenTrigger {
    pub fn from_trigger(trigger: &Trigger) -> Result<Self, String> {
        fn read<T: DeserializeOwned>(trigger: &Trigger) -> Result<T, String> {
            serde_json::from_value(trigger.document().clone())
                .map_err(|e| format!("stored trigger: {e}"))
        }
        match trigger.tag() {
            REPORT_TAG => read(trigger).map(AdyenTrigger::Report),
            SALE_TAG => read(trigger).map(AdyenTrigger::Sale),
            other => Err(format!("an Adyen source has no trigger {other:?}")),
        }
    }
}

/// What a `REPORT_AVAILABLE` notification for a settlement details report names, kept as its
/// event's facts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdyenReportTrigger {
    /// The report's file name (the notification's `pspReference`).
    pub file: String,
    /// Where Adyen says it can be downloaded (the notification's `reason`; not covered by the
    /// notification's HMAC, so its host is checked against the source's `report_hosts`).
    pub url: String,
    /// `merchantAccountCode`.
    pub merchant_account: String,
}

impl AdyenReportTrigger {
    /// Whether a report file name is a settlement details report's (other reports are
    /// acknowledged and not recorded).
    pub fn is_settlement_details(file: &str) -> bool {
        file.starts_with("settlement_detail_report") && file.ends_with(".csv")
    }

    /// The file name of a merchant account's batch `number`.
    pub fn batch_file(number: u64) -> String {
        format!("{BATCH_FILE}{number}.csv")
    }

    /// The batch number a file name is of, if it is a batch's settlement details report.
    pub fn batch_number(file: &str) -> Option<u64> {
        let digits = file.strip_prefix(BATCH_FILE)?.strip_suffix(".csv")?;
        match digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0') {
            true => digits.parse().ok(),
            false => None,
        }
    }

    /// The external id its event is recorded under (as its notification's is).
    pub fn external_id(&self) -> String {
        format!("{REPORT_PREFIX}{}:{}", self.merchant_account, self.file)
    }

    /// As an event's facts: `REPORT_AVAILABLE` is its kind, the file its movement id.
    pub fn named(&self) -> Named {
        Named {
            trigger: Trigger::new(
                REPORT_TAG,
                serde_json::to_value(self).unwrap_or(Value::Null),
            ),
            kind: "REPORT_AVAILABLE".to_owned(),
            object: self.file.clone(),
        }
    }
}

/// What a `CAPTURE` or `CAPTURE_FAILED` notification names, kept as its event's facts when the
/// source's money comes from reports: the sale (or its failure) booked as a receivable in the
/// shopper's currency, which the report's `Settled` line for the capture clears.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdyenSaleTrigger {
    /// `CAPTURE` or `CAPTURE_FAILED`.
    pub event_code: String,
    /// The capture's PSP reference (the report's `Modification Reference` for its line).
    pub psp_reference: String,
    /// The payment's PSP reference (`originalReference`).
    pub original_reference: String,
    pub merchant_account: String,
    pub merchant_reference: String,
    /// The amount as notified: minor units in Adyen's exponent for the currency.
    pub currency: String,
    pub value: i64,
    /// `eventDate`, RFC 3339.
    pub event_date: String,
}

impl AdyenSaleTrigger {
    /// As an event's facts: the event code is its kind, the capture its movement id.
    pub fn named(&self) -> Named {
        Named {
            trigger: Trigger::new(SALE_TAG, serde_json::to_value(self).unwrap_or(Value::Null)),
            kind: self.event_code.clone(),
            object: self.psp_reference.clone(),
        }
    }

    /// The sale's movement (its failure's, for `CAPTURE_FAILED`).
    pub fn movement(&self, source: &SourceName) -> Result<Movement, String> {
        let currency = Currency::parse(&self.currency).map_err(|e| e.to_string())?;
        let gross = super::EXPONENTS
            .amount(self.value, currency)
            .map_err(|e| e.to_string())?;
        let occurred_at = DateTime::parse_from_rfc3339(&self.event_date)
            .map_err(|_| format!("eventDate {:?} is not RFC 3339", self.event_date))?
            .with_timezone(&Utc);
        let failed = match self.event_code.as_str() {
            "CAPTURE" => false,
            "CAPTURE_FAILED" => true,
            other => return Err(format!("{other} names no sale")),
        };
        sale(
            source,
            Sale {
                capture: &self.psp_reference,
                payment: &self.original_reference,
                merchant_account: &self.merchant_account,
                reference: Some(self.merchant_reference.as_str()).filter(|r| !r.is_empty()),
                gross,
                currency,
                occurred_at,
                failed,
            },
        )
    }
}

/// A sale as a notification or a report line describes it.
pub(super) struct Sale<'a> {
    pub(super) capture: &'a str,
    pub(super) payment: &'a str,
    pub(super) merchant_account: &'a str,
    pub(super) reference: Option<&'a str>,
    pub(super) gross: Amount,
    pub(super) currency: Currency,
    pub(super) occurred_at: DateTime<Utc>,
    pub(super) failed: bool,
}

/// A sale's movement, keyed `{source}/sale/{capture}` (`{source}/capture_failed/{capture}` for
/// its failure, which takes it back): the same key and fingerprint whether its notification or
/// its report line reached it, so it is booked once, by whichever comes first. Only the money is
/// compared (each document has its own time stamp).
pub(super) fn sale(source: &SourceName, sale: Sale<'_>) -> Result<Movement, String> {
    let (what, kind, amount) = match sale.failed {
        false => ("sale", Kind::ChargeSettled, sale.gross),
        true => ("capture_failed", Kind::Adjustment, sale.gross.negated()),
    };
    let zero = Amount::zero(sale.currency);
    Movement::new(MovementParts {
        source_key: format!("{source}/{what}/{}", sale.capture),
        id: MovementId::parse(sale.capture).map_err(|e| e.to_string())?,
        kind,
        counter: Counter::Sales,
        currency: sale.currency,
        amount,
        fee: zero,
        fees: Vec::new(),
        net: amount,
        occurred_at: sale.occurred_at,
        payout_id: None,
        reference: sale
            .reference
            .map(Reference::parse)
            .transpose()
            .map_err(|e| e.to_string())?,
        details: json!({
            "provider": "adyen",
            "record_type": what,
            "merchant_account": sale.merchant_account,
            "psp_reference": sale.payment,
            "modification_reference": sale.capture,
            "currency": sale.currency.code(),
            "receivable": amount.to_string(),
            "net": zero.to_string(),
        }),
        provider_category: format!("adyen:{what}"),
        counter_amount: None,
        compared: Compared::Money,
    })
    .map_err(|e| e.to_string())
}


/// The `CAPTURE` of a USD 50.00 sale (merchant account `M`), as notified.
#[cfg(test)]
pub(super) fn notified_capture() -> AdyenSaleTrigger {
    AdyenSaleTrigger {
        event_code: "CAPTURE".into(),
        psp_reference: "8816000000000102".into(),
        original_reference: "8816000000000002".into(),
        merchant_account: "M".into(),
        merchant_reference: "order-1002".into(),
        currency: "USD".into(),
        value: 5_000,
        event_date: "2026-11-29T18:00:00+01:00".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A redelivery of a notification already recorded replays it, and a sale reached again
    /// posts nothing new: the fingerprints are the ones stored for them (pinned here, so a change
    /// to the trigger's form shows as a changed fingerprint).
    #[test]
    fn triggers_and_sales_keep_their_fingerprints() {
        let report = AdyenReportTrigger {
            file: "settlement_detail_report_batch_4.csv".into(),
            url: "https://ca-test.adyen.com/reports/download/MerchantAccount/M/settlement_detail_report_batch_4.csv".into(),
            merchant_account: "M".into(),
        };
        let named = report.named();
        assert_eq!(
            named.trigger.fingerprint().to_hex(),
            "fcaad722b4f6ea03bcb66bc29e1f74bed8723c79fbf380272caf12470d4ddca0"
        );
        assert_eq!(named.kind, "REPORT_AVAILABLE");
        assert_eq!(
            AdyenTrigger::from_trigger(&named.trigger),
            Ok(AdyenTrigger::Report(report))
        );
        let sale = notified_capture();
        let named = sale.named();
        assert_eq!(
            named.trigger.fingerprint().to_hex(),
            "f0b2f863e9222e70e499452397e8cfe9123595257e25ecfa9f3dd68646069e67"
        );
        assert_eq!((named.kind.as_str(), named.object.as_str()), ("CAPTURE", "8816000000000102"));
        let source = SourceName::parse("adyen").expect("source");
        assert_eq!(
            sale.movement(&source).expect("a sale").fingerprint().to_hex(),
            "3dbc73045ab2d4da7994ece30463941565f256cb14282579d883d3316b1f9d5d"
        );
        assert_eq!(
            AdyenTrigger::from_trigger(&named.trigger),
            Ok(AdyenTrigger::Sale(sale))
        );
        assert!(AdyenTrigger::from_trigger(&Trigger::new("stripe", json!({}))).is_err());
    }
}
