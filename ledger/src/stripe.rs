//! Stripe's money, in Stripe's words. A webhook only names the money: a charge's or refund's
//! `balance_transaction` is an id, a payout's items are listed by the API. What a webhook names
//! is kept as the event's facts ([`StripeTrigger`]); the job fetches the balance transactions
//! and posts each as one entry ([`movement`]), keyed by its `txn_...` id, however many events
//! (and payout listings) reach it.

use chrono::DateTime;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::event::Kind;
use crate::fingerprint::Fingerprint;
use crate::ids::{MovementId, PayoutId, Reference, SourceName};
use crate::minor_units::stripe_exponent;
use crate::money::{Amount, Currency};
use crate::movement::{Counter, Fee, FeeType, Movement, MovementError, MovementParts};
use crate::posting;

/// What a Stripe webhook names, kept as its event's facts. The job resolves it through the API:
/// the balance transactions named by id are fetched, those embedded (a dispute's) are used as
/// sent when complete, a charge's refunds and an automatic payout's balance transactions are
/// listed to the end.
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
    /// SHA-256 over the trigger in canonical JSON: a redelivery names the same things.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_trigger("stripe", &self.to_value())
    }

    fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// An event's facts when its webhook only names the money: the job resolves them through the
/// provider's API. Stored as `{"stripe": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Trigger {
    Stripe(StripeTrigger),
    /// An Adyen settlement details report to download and post line by line.
    #[serde(rename = "adyen_report")]
    AdyenReport(crate::adyen::AdyenReportTrigger),
    /// An Adyen sale (or its failure) to book as a receivable, resolved without a call.
    #[serde(rename = "adyen_sale")]
    AdyenSale(crate::adyen::AdyenSaleTrigger),
}

/// The keys a stored trigger is found by.
pub const TRIGGER_KEYS: [&str; 3] = ["stripe", "adyen_report", "adyen_sale"];

impl Trigger {
    /// Reads stored facts; `None` when they are canonical settlement facts instead.
    pub fn from_stored(facts: &Value) -> Option<Result<Trigger, String>> {
        let object = facts.as_object()?;
        TRIGGER_KEYS
            .iter()
            .any(|key| object.contains_key(*key))
            .then(|| {
                serde_json::from_value(facts.clone()).map_err(|e| format!("stored trigger: {e}"))
            })
    }

    pub fn to_stored(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Trigger::Stripe(trigger) => trigger.fingerprint(),
            Trigger::AdyenReport(trigger) => trigger.fingerprint(),
            Trigger::AdyenSale(trigger) => trigger.fingerprint(),
        }
    }

    /// The provider's event type, stored as the event's kind.
    pub fn kind(&self) -> &str {
        match self {
            Trigger::Stripe(trigger) => &trigger.event_type,
            Trigger::AdyenReport(_) => "REPORT_AVAILABLE",
            Trigger::AdyenSale(trigger) => &trigger.event_code,
        }
    }

    /// The provider object the event is about, stored as the event's movement id.
    pub fn object(&self) -> &str {
        match self {
            Trigger::Stripe(trigger) => &trigger.object,
            Trigger::AdyenReport(trigger) => &trigger.file,
            Trigger::AdyenSale(trigger) => &trigger.psp_reference,
        }
    }
}

/// A Stripe balance transaction as the API returns it (`GET /v1/balance_transactions/{id}`).
/// Fields settle does not use are ignored.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct BalanceTransaction {
    pub id: String,
    /// Gross in minor units, signed (a refund or a payout is negative).
    pub amount: i64,
    pub available_on: Option<i64>,
    pub created: i64,
    /// The settlement currency, lower case.
    pub currency: String,
    /// Set when the charge was in another currency: a JSON number, kept as sent (never used in
    /// arithmetic).
    #[serde(default)]
    pub exchange_rate: Option<serde_json::Number>,
    pub fee: i64,
    #[serde(default)]
    pub fee_details: Vec<FeeDetail>,
    pub net: i64,
    #[serde(default)]
    pub reporting_category: Option<String>,
    /// The object this transaction belongs to: an id, or the object when expanded.
    #[serde(default)]
    pub source: Option<Value>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(rename = "type")]
    pub transaction_type: String,
}

/// One part of a balance transaction's fee.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct FeeDetail {
    pub amount: i64,
    pub currency: String,
    #[serde(rename = "type")]
    pub fee_type: String,
}

impl BalanceTransaction {
    /// The id of the object it belongs to (`ch_...`, `re_...`, `po_...`), expanded or not.
    pub fn source_id(&self) -> Option<&str> {
        match self.source.as_ref()? {
            Value::String(id) => Some(id),
            Value::Object(object) => object.get("id").and_then(Value::as_str),
            _ => None,
        }
    }

    /// The category Stripe reports it under: `reporting_category`, else derived from `type`.
    pub fn category(&self) -> &str {
        self.reporting_category
            .as_deref()
            .unwrap_or(&self.transaction_type)
    }
}

/// How each reporting category posts (Stripe's "reporting categories"), the one table of
/// Stripe's money in settle. The provider balance (`{source}:balance`) always takes the net,
/// the fee accounts the fee parts; the gross goes against the counter account. Anything not
/// listed is booked to adjustments, never refused: money moved, a person may reclassify it.
///
/// | reporting_category (or type) | kind | counter |
/// |---|---|---|
/// | `charge`, `payment` | charge_settled | sales |
/// | `refund`, `payment_refund` | refund_settled | refunds |
/// | `refund_failure`, `payment_failure_refund` | adjustment | refunds |
/// | `dispute` | chargeback | disputes |
/// | `dispute_reversal` | chargeback_reversed | disputes |
/// | `fee` (Stripe, Radar, Billing, Connect fees...), `stripe_fee`, `application_fee`, `tax_fee`, `stripe_fx_fee` | fee | fees |
/// | `payout` | payout_paid | bank |
/// | `payout_reversal`, `payout_failure`, `payout_cancel` | payout_failed | bank |
/// | anything else (`transfer`, `topup`, `other_adjustment`, reserves...) | adjustment | adjustments |
pub fn posting_of(category: &str) -> (Kind, Counter) {
    match category {
        "charge" | "payment" => (Kind::ChargeSettled, Counter::Sales),
        "refund" | "payment_refund" => (Kind::RefundSettled, Counter::Refunds),
        "refund_failure" | "payment_failure_refund" => (Kind::Adjustment, Counter::Refunds),
        "dispute" => (Kind::Chargeback, Counter::Disputes),
        "dispute_reversal" => (Kind::ChargebackReversed, Counter::Disputes),
        "fee" | "stripe_fee" | "application_fee" | "tax_fee" | "stripe_fx_fee" => {
            (Kind::Fee, Counter::Fees)
        }
        "payout" => (Kind::PayoutPaid, Counter::Bank),
        "payout_reversal" | "payout_failure" | "payout_cancel" => {
            (Kind::PayoutFailed, Counter::Bank)
        }
        _ => (Kind::Adjustment, Counter::Adjustments),
    }
}

/// The source key of a balance transaction's entry: `{source}/balance_transaction/{txn}`, or
/// `{source}/{account}/balance_transaction/{txn}` for a connected account's.
pub fn source_key(source: &SourceName, account: Option<&str>, txn: &str) -> String {
    match account {
        Some(account) => format!("{source}/{account}/balance_transaction/{txn}"),
        None => format!("{source}/balance_transaction/{txn}"),
    }
}

/// Checks a balance transaction and turns it into a movement: amounts converted exactly with
/// Stripe's exponent for its currency, the fee parts summing to the fee, the net equal to the
/// amount minus the fee, every part in the transaction's currency.
pub fn movement(
    source: &SourceName,
    account: Option<&str>,
    transaction: &BalanceTransaction,
) -> Result<Movement, MovementError> {
    let currency = currency_of(&transaction.currency, "currency")?;
    let amount = minor(transaction.amount, currency, "amount")?;
    let fee = minor(transaction.fee, currency, "fee")?;
    let net = minor(transaction.net, currency, "net")?;
    let mut fees = Vec::with_capacity(transaction.fee_details.len());
    for detail in &transaction.fee_details {
        let found = currency_of(&detail.currency, "fee_details.currency")?;
        if found != currency {
            return Err(MovementError::FeeCurrency {
                expected: currency,
                found,
            });
        }
        fees.push(Fee {
            fee_type: FeeType::parse(&detail.fee_type).map_err(|e| MovementError::Field {
                field: "fee_details.type",
                detail: e.to_string(),
            })?,
            amount: minor(detail.amount, currency, "fee_details.amount")?,
        });
    }
    let id = MovementId::parse(&transaction.id).map_err(|e| MovementError::Field {
        field: "id",
        detail: e.to_string(),
    })?;
    let occurred_at =
        DateTime::from_timestamp(transaction.created, 0).ok_or(MovementError::Field {
            field: "created",
            detail: "not a time".into(),
        })?;
    let (kind, counter) = posting_of(transaction.category());
    let reference = transaction
        .source_id()
        .map(Reference::parse)
        .transpose()
        .map_err(|e| MovementError::Field {
            field: "source",
            detail: e.to_string(),
        })?;
    let payout_id = match kind {
        Kind::PayoutPaid | Kind::PayoutFailed => transaction
            .source_id()
            .filter(|id| id.starts_with("po_"))
            .map(PayoutId::parse)
            .transpose()
            .map_err(|e| MovementError::Field {
                field: "source",
                detail: e.to_string(),
            })?,
        _ => None,
    };
    // An earlier settle posted a charge, refund, dispute or payout from the webhook's own
    // object, under `{source}/{kind}/{object id}`.
    let legacy_source_key = match (account, &reference, kind) {
        (
            None,
            Some(object),
            Kind::ChargeSettled
            | Kind::RefundSettled
            | Kind::Chargeback
            | Kind::ChargebackReversed
            | Kind::PayoutPaid
            | Kind::PayoutFailed,
        ) => Some(posting::source_key(source, kind, object.as_str())),
        _ => None,
    };
    Movement::new(MovementParts {
        source_key: source_key(source, account, &transaction.id),
        id,
        kind,
        counter,
        currency,
        amount,
        fee,
        fees,
        net,
        occurred_at,
        payout_id,
        reference,
        details: details(transaction, net),
        provider_category: transaction.category().to_owned(),
        legacy_source_key,
        counter_amount: None,
        compared: crate::movement::Compared::Everything,
    })
}

/// What is kept with the entry: Stripe's own description of the transaction, and its net in
/// major units (what it did to the Stripe balance, for reconciliation).
fn details(transaction: &BalanceTransaction, net: Amount) -> Value {
    json!({
        "provider": "stripe",
        "type": transaction.transaction_type,
        "reporting_category": transaction.reporting_category,
        "currency": transaction.currency.to_ascii_uppercase(),
        "net": net.to_string(),
        "exchange_rate": transaction.exchange_rate,
        "available_on": transaction.available_on,
        "source": transaction.source_id(),
        "fee_details": transaction.fee_details.iter()
            .map(|d| json!({"type": d.fee_type, "amount": d.amount}))
            .collect::<Vec<_>>(),
    })
}

/// Stripe sends lower-case ISO codes.
fn currency_of(code: &str, field: &'static str) -> Result<Currency, MovementError> {
    Currency::parse(&code.to_ascii_uppercase()).map_err(|e| MovementError::Field {
        field,
        detail: e.to_string(),
    })
}

fn minor(value: i64, currency: Currency, field: &'static str) -> Result<Amount, MovementError> {
    Amount::from_minor(value, stripe_exponent(currency), currency).map_err(|e| {
        MovementError::Field {
            field,
            detail: e.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transaction(text: &str) -> BalanceTransaction {
        serde_json::from_str(text).expect("balance transaction")
    }

    fn source() -> SourceName {
        SourceName::parse("stripe").expect("source")
    }

    const CHARGE: &str = r#"{"id": "txn_1", "object": "balance_transaction", "amount": 10000,
        "available_on": 1700600000, "created": 1700000000, "currency": "usd",
        "description": null, "exchange_rate": null, "fee": 320,
        "fee_details": [{"amount": 290, "application": null, "currency": "usd",
                         "description": "Stripe processing fees", "type": "stripe_fee"},
                        {"amount": 30, "application": null, "currency": "usd",
                         "description": "Sales tax", "type": "tax"}],
        "net": 9680, "reporting_category": "charge", "source": "ch_1", "status": "pending",
        "type": "charge"}"#;

    #[test]
    fn a_charge_becomes_a_movement_in_its_settlement_currency() {
        let movement = movement(&source(), None, &transaction(CHARGE)).expect("valid");
        assert_eq!(movement.source_key(), "stripe/balance_transaction/txn_1");
        assert_eq!(movement.kind(), Kind::ChargeSettled);
        assert_eq!(movement.net().to_string(), "96.80");
        assert_eq!(movement.fees().len(), 2);
        assert_eq!(
            movement.reference().map(Reference::as_str),
            Some("ch_1"),
            "the source object is the entry's reference"
        );
        assert_eq!(movement.details()["net"], "96.80");
    }

    #[test]
    fn inconsistent_facts_are_refused() {
        let check = |change: &dyn Fn(&mut Value), want: &str| {
            let mut value: Value = serde_json::from_str(CHARGE).expect("json");
            change(&mut value);
            let transaction: BalanceTransaction = serde_json::from_value(value).expect("shape");
            let error = movement(&source(), None, &transaction).expect_err(want);
            assert!(error.to_string().contains(want), "{error} vs {want}");
        };
        check(&|v| v["net"] = json!(9681), "net 96.81");
        check(
            &|v| v["fee_details"][1]["amount"] = json!(31),
            "fee_details sum to 3.21",
        );
        check(
            &|v| v["fee_details"][1]["currency"] = json!("eur"),
            "fee_details are in EUR",
        );
        check(&|v| v["currency"] = json!("usx"), "unknown currency");
        check(
            &|v| v["amount"] = json!(10001),
            "net 96.80 is not amount 100.01",
        );
    }

    #[test]
    fn a_payout_is_tied_to_itself_and_categories_post_by_the_table() {
        let payout = CHARGE
            .replace("\"amount\": 10000", "\"amount\": -9680")
            .replace("\"fee\": 320", "\"fee\": 0")
            .replace("\"fee_details\": [", "\"fee_details\": [], \"x\": [")
            .replace("\"net\": 9680", "\"net\": -9680")
            .replace(
                "\"reporting_category\": \"charge\"",
                "\"reporting_category\": \"payout\"",
            )
            .replace("\"ch_1\"", "\"po_1\"");
        let movement = movement(&source(), Some("acct_1"), &transaction(&payout)).expect("valid");
        assert_eq!(movement.kind(), Kind::PayoutPaid);
        assert_eq!(movement.payout_id().map(PayoutId::as_str), Some("po_1"));
        assert_eq!(
            movement.source_key(),
            "stripe/acct_1/balance_transaction/txn_1"
        );
        assert_eq!(
            posting_of("transfer"),
            (Kind::Adjustment, Counter::Adjustments)
        );
        assert_eq!(posting_of("dispute"), (Kind::Chargeback, Counter::Disputes));
    }

    #[test]
    fn stored_triggers_round_trip_and_canonical_facts_are_not_triggers() {
        let trigger = Trigger::Stripe(StripeTrigger {
            event_type: "charge.succeeded".into(),
            object: "ch_1".into(),
            account: None,
            balance_transactions: vec!["txn_1".into()],
            embedded: vec![],
            refunds_of_charge: None,
            payout_listing: None,
        });
        let stored = trigger.to_stored();
        assert_eq!(stored["stripe"]["object"], "ch_1");
        assert_eq!(Trigger::from_stored(&stored), Some(Ok(trigger)));
        assert_eq!(Trigger::from_stored(&json!({"kind": "fee"})), None);
    }
}
