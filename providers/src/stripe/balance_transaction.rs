//! Stripe's money, in Stripe's words: the balance transaction is the movement. A webhook only
//! names the money (a charge's or refund's `balance_transaction` is an id, a payout's items are
//! listed by the API); the job fetches the balance transactions and posts each as one entry
//! ([`movement`]), keyed by its `txn_...` id, however many events (and payout listings) reach it.

use chrono::DateTime;
use ledger::minor_units::Exponents;
use ledger::movement::{Counter, Fee, FeeType, Movement, MovementError, MovementParts};
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

/// The account a balance transaction of a category settle does not know goes to, for a person
/// to classify: never silently an adjustment, never a refused transaction.
pub use ledger::posting::SUSPENSE;

/// Stripe's chart of accounts: how each reporting category Stripe publishes
/// (`fixtures/stripe/reporting_categories.json` names the source; a test walks the list) posts.
/// The provider balance (`{source}:balance`) always takes the net, the fee accounts the fee
/// parts; the gross goes against the counter account below (`{source}` is the source's name),
/// unless the source names another for the category (`[sources.accounts.chart]`). A category
/// not listed goes to [`SUSPENSE`]. Balance transaction types are listed too, for a transaction
/// that carries no reporting category.
///
/// | reporting_category (types) | kind | counter account |
/// |---|---|---|
/// | `charge` (`payment`) | charge_settled | sales |
/// | `charge_failure` (`payment_failure_refund`), `partial_capture_reversal` | adjustment | sales (a failed debit payment, an uncaptured part: the sale is reversed) |
/// | `refund` (`payment_refund`) | refund_settled | refunds |
/// | `refund_failure` | adjustment | refunds |
/// | `dispute` | chargeback | disputes:{source} |
/// | `dispute_reversal` | chargeback_reversed | disputes:{source} |
/// | `fee` (`stripe_fee`, `stripe_fx_fee`) | fee | fees:{source} |
/// | `tax` (`tax_fee`) | fee | tax:{source} |
/// | `network_cost` | fee | network_costs:{source} |
/// | `platform_earning`, `platform_earning_refund` (`application_fee`, `application_fee_refund`) | adjustment | revenue:application_fees |
/// | `transfer`, `transfer_reversal`, `connect_collection_transfer` | adjustment | transfers:{source} |
/// | `topup`, `topup_reversal` | adjustment | bank |
/// | `payout` | payout_paid | bank |
/// | `payout_reversal` (`payout_failure`, `payout_cancel`) | payout_failed | bank |
/// | `payout_minimum_balance_hold`, `payout_minimum_balance_release` | adjustment | {source}:minimum_balance |
/// | `risk_reserved_funds`, `connect_reserved_funds`, `payment_network_reserve_hold`, `payment_network_reserve_release` | adjustment | {source}:reserved |
/// | `advance`, `advance_funding`, `anticipation_repayment`, `financing_paydown`, `financing_paydown_reversal`, `financing_payout`, `financing_payout_reversal` | adjustment | financing:{source} |
/// | `issuing_authorization_hold`, `issuing_authorization_release`, `issuing_disbursement`, `issuing_dispute`, `issuing_dispute_fraud_liability_debit`, `issuing_dispute_provisional_credit`, `issuing_dispute_provisional_credit_reversal`, `issuing_transaction` | adjustment | issuing:{source} |
/// | `climate_order_purchase`, `climate_order_refund` | adjustment | expenses:climate |
/// | `contribution` | adjustment | expenses:contributions |
/// | `unreconciled_customer_funds` | adjustment | customer_funds:{source} |
/// | `other_adjustment` | adjustment | adjustments |
/// | anything else | adjustment | suspense:{source} |
pub const CHART: &[(&str, Kind, Counter)] = &[
    ("charge", Kind::ChargeSettled, Counter::Sales),
    ("payment", Kind::ChargeSettled, Counter::Sales),
    ("charge_failure", Kind::Adjustment, Counter::Sales),
    ("payment_failure_refund", Kind::Adjustment, Counter::Sales),
    ("partial_capture_reversal", Kind::Adjustment, Counter::Sales),
    ("refund", Kind::RefundSettled, Counter::Refunds),
    ("payment_refund", Kind::RefundSettled, Counter::Refunds),
    ("refund_failure", Kind::Adjustment, Counter::Refunds),

    ("dispute", Kind::Chargeback, Counter::Disputes),
    ("dispute_reversal", Kind::ChargebackReversed, Counter::Disputes),
    ("fee", Kind::Fee, Counter::Fees),
    ("stripe_fee", Kind::Fee, Counter::Fees),
    ("stripe_fx_fee", Kind::Fee, Counter::Fees),
    ("tax", Kind::Fee, Counter::Chart("tax:{source}")),
    ("tax_fee", Kind::Fee, Counter::Chart("tax:{source}")),
    ("network_cost", Kind::Fee, Counter::Chart("network_costs:{source}")),
    ("platform_earning", Kind::Adjustment, Counter::Chart(APPLICATION_FEES)),
    ("platform_earning_refund", Kind::Adjustment, Counter::Chart(APPLICATION_FEES)),
    ("application_fee", Kind::Adjustment, Counter::Chart(APPLICATION_FEES)),
    ("application_fee_refund", Kind::Adjustment, Counter::Chart(APPLICATION_FEES)),
    ("transfer", Kind::Adjustment, Counter::Chart(TRANSFERS)),
    ("transfer_reversal", Kind::Adjustment, Counter::Chart(TRANSFERS)),
    ("connect_collection_transfer", Kind::Adjustment, Counter::Chart(TRANSFERS)),
    ("topup", Kind::Adjustment, Counter::Bank),
    ("topup_reversal", Kind::Adjustment, Counter::Bank),
    ("payout", Kind::PayoutPaid, Counter::Bank),
    ("payout_reversal", Kind::PayoutFailed, Counter::Bank),
    ("payout_failure", Kind::PayoutFailed, Counter::Bank),
    ("payout_cancel", Kind::PayoutFailed, Counter::Bank),
    ("payout_minimum_balance_hold", Kind::Adjustment, Counter::Chart(MINIMUM_BALANCE)),
    ("payout_minimum_balance_release", Kind::Adjustment, Counter::Chart(MINIMUM_BALANCE)),
    ("risk_reserved_funds", Kind::Adjustment, Counter::Chart(RESERVED)),
    ("connect_reserved_funds", Kind::Adjustment, Counter::Chart(RESERVED)),
    ("payment_network_reserve_hold", Kind::Adjustment, Counter::Chart(RESERVED)),
    ("payment_network_reserve_release", Kind::Adjustment, Counter::Chart(RESERVED)),
    ("advance", Kind::Adjustment, Counter::Chart(FINANCING)),
    ("advance_funding", Kind::Adjustment, Counter::Chart(FINANCING)),
    ("anticipation_repayment", Kind::Adjustment, Counter::Chart(FINANCING)),
    ("financing_paydown", Kind::Adjustment, Counter::Chart(FINANCING)),
    ("financing_paydown_reversal", Kind::Adjustment, Counter::Chart(FINANCING)),
    ("financing_payout", Kind::Adjustment, Counter::Chart(FINANCING)),
    ("financing_payout_reversal", Kind::Adjustment, Counter::Chart(FINANCING)),
    ("issuing_authorization_hold", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("issuing_authorization_release", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("issuing_disbursement", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("issuing_dispute", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("issuing_dispute_fraud_liability_debit", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("issuing_dispute_provisional_credit", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("issuing_dispute_provisional_credit_reversal", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("issuing_transaction", Kind::Adjustment, Counter::Chart(ISSUING)),
    ("climate_order_purchase", Kind::Adjustment, Counter::Chart("expenses:climate")),
    ("climate_order_refund", Kind::Adjustment, Counter::Chart("expenses:climate")),
    ("contribution", Kind::Adjustment, Counter::Chart("expenses:contributions")),
    ("unreconciled_customer_funds", Kind::Adjustment, Counter::Chart("customer_funds:{source}")),
    ("other_adjustment", Kind::Adjustment, Counter::Adjustments),
];

const APPLICATION_FEES: &str = "revenue:application_fees";
const TRANSFERS: &str = "transfers:{source}";
const MINIMUM_BALANCE: &str = "{source}:minimum_balance";
const RESERVED: &str = "{source}:reserved";
const FINANCING: &str = "financing:{source}";
const ISSUING: &str = "issuing:{source}";

/// How a category posts, by [`CHART`]; [`SUSPENSE`] when it is not there.
pub fn posting_of(category: &str) -> (Kind, Counter) {
    CHART
        .iter()
        .find(|(listed, ..)| *listed == category)
        .map_or((Kind::Adjustment, Counter::Chart(SUSPENSE)), |(_, kind, counter)| {
            (*kind, *counter)
        })
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
        counter_amount: None,
        compared: ledger::movement::Compared::Everything,
    })
}

/// A listed transaction whose facts do not add up (fee parts that do not sum to the fee, a net
/// that is not the amount less the fee): what it did to the Stripe balance (its net) is booked
/// against [`SUSPENSE`], with what was wrong in its details, for a person to classify. Its
/// neighbours in the listing are booked as usual and the feed moves on. A net the currency
/// cannot hold cannot be booked at all: the error is the caller's.
pub fn suspense_movement(
    source: &SourceName,
    account: Option<&str>,
    transaction: &BalanceTransaction,
    error: &MovementError,
) -> Result<Movement, MovementError> {
    let currency = currency_of(&transaction.currency, "currency")?;
    let net = minor(transaction.net, currency, "net")?;
    let id = MovementId::parse(&transaction.id).map_err(|e| MovementError::Field {
        field: "id",
        detail: e.to_string(),
    })?;
    let occurred_at =
        DateTime::from_timestamp(transaction.created, 0).ok_or(MovementError::Field {
            field: "created",
            detail: "not a time".into(),
        })?;
    let mut details = details(transaction, net);
    details["review"] = json!(format!("does not add up: {error}"));
    details["amount"] = json!(transaction.amount);
    details["fee"] = json!(transaction.fee);
    Movement::new(MovementParts {
        source_key: source_key(source, account, &transaction.id),
        id,
        kind: Kind::Adjustment,
        counter: Counter::Chart(SUSPENSE),
        currency,
        amount: net,
        fee: minor(0, currency, "fee")?,
        fees: Vec::new(),
        net,
        occurred_at,
        payout_id: None,
        reference: None,
        details,
        provider_category: transaction.category().to_owned(),
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
            (Kind::Adjustment, Counter::Chart("transfers:{source}"))
        );
        assert_eq!(
            posting_of("a_category_stripe_adds_tomorrow"),
            (Kind::Adjustment, Counter::Chart(SUSPENSE))
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

    /// Every reporting category Stripe publishes has its own place in the chart (none is left
    /// to suspense), and every category and type the list maps to it is in the chart's table.
    #[test]
    fn every_published_category_and_type_is_in_the_chart() {
        let list: Value = serde_json::from_str(include_str!(
            "../../../fixtures/stripe/reporting_categories.json"
        ))
        .expect("the list is JSON");
        let categories = list["categories"].as_array().expect("categories");
        assert!(categories.len() >= 40, "the list is Stripe's whole list");
        let source = source();
        let accounts = ledger::Accounts::defaults(&source);
        // A type several categories share (`adjustment`, `refund`...) is read only through its
        // category.
        let mut categories_of_type: std::collections::HashMap<&str, usize> = Default::default();
        for entry in categories {
            for kind in entry["types"].as_array().into_iter().flatten() {
                *categories_of_type.entry(kind.as_str().unwrap_or_default()).or_default() += 1;
            }
        }
        for entry in categories {
            let category = entry["category"].as_str().expect("a category");
            let (_, counter) = posting_of(category);
            assert_ne!(counter, Counter::Chart(SUSPENSE), "{category} has no account");
            let account = accounts.counter_account(category, counter);
            assert!(!account.starts_with("suspense"), "{category}: {account}");
            for kind in entry["types"].as_array().expect("types") {
                let kind = kind.as_str().expect("a type");
                if categories_of_type.get(kind) == Some(&1)
                    && CHART.iter().any(|(listed, ..)| *listed == kind)
                {
                    let (_, by_type) = posting_of(kind);
                    assert_eq!(
                        accounts.counter_account(kind, by_type),
                        account,
                        "type {kind} posts as its category {category}"
                    );
                }
            }
        }
    }

    /// The fingerprint settle has always stored for `CHARGE`.
    const GOLDEN_MOVEMENT: &str =
        "8318ae4db4ff9432875b8e68773c754742e6fe336cc0e3ffc32c847d4f1ce798";
}
