//! Stripe's money, in Stripe's words: the balance transaction is the movement. A webhook only
//! names the money (a charge's or refund's `balance_transaction` is an id, a payout's items are
//! listed by the API); the job fetches the balance transactions and posts each as one entry
//! ([`movement`]), keyed by its `txn_...` id, however many events (and payout listings) reach it.

use chrono::DateTime;
use ledger::minor_units::Exponents;
use ledger::movement::{Counter, Fee, FeeType, Movement, MovementError, MovementParts};
use ledger::posting;
use ledger::{Amount, Currency, Kind, MovementId, PayoutId, Reference, SourceName};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Stripe's exponent table (docs.stripe.com/currencies): zero-decimal currencies, three-decimal
/// ones, and ISK, which Stripe still counts in hundredths for backwards compatibility (so it is
/// in neither list). Everything else has two decimals.
pub const EXPONENTS: Exponents = Exponents {
    zero: &[
        "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV",
        "XAF", "XOF", "XPF",
    ],
    three: &["BHD", "JOD", "KWD", "OMR", "TND"],
};

/// The fee part that is Stripe's own processing fee: booked to the source's fee account itself.
const STRIPE_FEE: &str = "stripe_fee";

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
        let fee_type = match detail.fee_type.as_str() {
            STRIPE_FEE => FeeType::providers_own(STRIPE_FEE),
            other => FeeType::parse(other),
        };
        fees.push(Fee {
            fee_type: fee_type.map_err(|e| MovementError::Field {
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
        compared: ledger::movement::Compared::Everything,
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
    EXPONENTS.amount(value, currency).map_err(|e| {
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
    fn stripes_exponent_table_converts_exactly() {
        let cases: &[(i64, &str, Option<&str>)] = &[
            (1100, "USD", Some("11.00")),
            (500, "JPY", Some("500")),
            (1230, "KWD", Some("1.230")),
            (500, "ISK", Some("5")),
            (550, "ISK", None),
            (150, "MGA", Some("150.00")),
            (10000, "IDR", Some("100.00")),
            (1500, "CLP", Some("1500")),
        ];
        for &(minor, code, want) in cases {
            let got = EXPONENTS.amount(minor, Currency::parse(code).expect("currency"));
            assert_eq!(got.ok().map(|a| a.to_string()).as_deref(), want, "{minor} {code}");
        }
    }

    /// The movement's fingerprint is what settle has always stored for it, and Stripe's own fee
    /// goes to the fee account itself while other parts get their own.
    #[test]
    fn a_movement_keeps_its_fingerprint_and_stripes_fee_its_account() {
        let movement = movement(&source(), None, &transaction(CHARGE)).expect("valid");
        assert_eq!(movement.fingerprint().to_hex(), GOLDEN_MOVEMENT);
        let accounts = ledger::Accounts::defaults(&source());
        let draft = ledger::posting::draft_movement(&movement, &accounts);
        let lines: Vec<(String, String)> = draft
            .lines
            .iter()
            .map(|l| (l.account.clone(), l.amount.to_string()))
            .collect();
        assert_eq!(
            lines,
            [
                ("stripe:balance".to_owned(), "96.80".to_owned()),
                ("fees:stripe".to_owned(), "2.90".to_owned()),
                ("fees:stripe:tax".to_owned(), "0.30".to_owned()),
                ("sales".to_owned(), "-100.00".to_owned()),
            ]
        );
    }

    /// The fingerprint settle has always stored for `CHARGE`.
    const GOLDEN_MOVEMENT: &str =
        "8318ae4db4ff9432875b8e68773c754742e6fe336cc0e3ffc32c847d4f1ce798";
}
