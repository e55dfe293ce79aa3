//! Stripe objects in the shapes Stripe publishes, built from `fixtures/stripe` (each file names
//! its source) with a test's own ids and amounts: events as webhooks deliver them, and the
//! balance transactions, refunds and payout listings the fake Stripe API serves.

use serde_json::{Value, json};

use providers::stripe::fake::fixture;

/// A test-mode webhook event of `event_type` about `object`.
pub fn event(id: &str, event_type: &str, object: Value) -> String {
    let mut event = fixture("event");
    event["id"] = json!(id);
    event["type"] = json!(event_type);
    event["data"]["object"] = object;
    event.to_string()
}

/// A `charge.updated` whose update set the charge's balance transaction (asynchronous capture):
/// `data.previous_attributes` says it was null.
pub fn captured_update(id: &str, charge: Value) -> String {
    let mut event: Value =
        serde_json::from_str(&event(id, "charge.updated", charge)).expect("json");
    event["data"]["previous_attributes"] = json!({"balance_transaction": null});
    event.to_string()
}

/// A charge as a webhook carries it: its balance transaction by id (`None`: null, as under
/// asynchronous capture) and no refunds list.
pub fn charge(id: &str, transaction: Option<&str>, amount: i64, currency: &str) -> Value {
    let mut charge = fixture("charge");
    charge["id"] = json!(id);
    charge["balance_transaction"] = json!(transaction);
    charge["amount"] = json!(amount);
    charge["amount_captured"] = json!(amount);
    charge["currency"] = json!(currency);
    charge
}

/// A balance transaction: `category` is both its type and its reporting category unless
/// `transaction_type` differs; `fees` are its fee parts `(type, amount)`; net = amount - fee.
#[derive(Debug)]
pub struct Txn<'a> {
    pub id: &'a str,
    pub category: &'a str,
    pub transaction_type: &'a str,
    pub amount: i64,
    pub fees: &'a [(&'a str, i64)],
    pub currency: &'a str,
    pub source: &'a str,
    pub exchange_rate: Option<f64>,
}

impl<'a> Txn<'a> {
    /// A Stripe fee of `amount` (negative) in USD, named by no object: no webhook reports it.
    pub fn stripe_fee(id: &'a str, amount: i64) -> Value {
        let mut fee = Txn {
            id,
            category: "fee",
            transaction_type: "stripe_fee",
            amount,
            fees: &[],
            currency: "usd",
            source: "",
            exchange_rate: None,
        }
        .value();
        fee["source"] = Value::Null;
        fee
    }

    /// A charge's balance transaction in USD with Stripe's fee.
    pub fn charge(id: &'a str, source: &'a str, amount: i64, fee: i64) -> Value {
        Txn {
            id,
            category: "charge",
            transaction_type: "charge",
            amount,
            fees: &[],
            currency: "usd",
            source,
            exchange_rate: None,
        }
        .with_fee(fee)
    }

    /// This transaction with one `stripe_fee` part of `fee`.
    pub fn with_fee(self, fee: i64) -> Value {
        let fees = [("stripe_fee", fee)];
        Txn {
            fees: if fee == 0 { &[] } else { &fees },
            ..self
        }
        .value()
    }

    pub fn value(&self) -> Value {
        let fee: i64 = self.fees.iter().map(|(_, amount)| amount).sum();
        let mut transaction = fixture("balance_transaction");
        transaction["id"] = json!(self.id);
        transaction["type"] = json!(self.transaction_type);
        transaction["reporting_category"] = json!(self.category);
        transaction["amount"] = json!(self.amount);
        transaction["fee"] = json!(fee);
        transaction["net"] = json!(self.amount - fee);
        transaction["currency"] = json!(self.currency);
        transaction["source"] = json!(self.source);
        transaction["exchange_rate"] = json!(self.exchange_rate);
        transaction["fee_details"] = Value::Array(
            self.fees
                .iter()
                .map(|(fee_type, amount)| {
                    json!({"amount": amount, "application": null, "currency": self.currency,
                           "description": format!("{fee_type} part"), "type": fee_type})
                })
                .collect(),
        );
        transaction
    }
}

/// A refund of `charge` naming its balance transaction (and its failure's, when it failed).
pub fn refund(id: &str, charge: &str, transaction: &str, failure: Option<&str>) -> Value {
    let mut refund = fixture("refund");
    refund["id"] = json!(id);
    refund["charge"] = json!(charge);
    refund["balance_transaction"] = json!(transaction);
    refund["failure_balance_transaction"] = json!(failure);
    if failure.is_some() {
        refund["status"] = json!("failed");
        refund["failure_reason"] = json!("expired_or_canceled_card");
    }
    refund
}

/// A dispute of `amount` in the charge's `currency`, embedding its balance transactions.
pub fn dispute(id: &str, charge: &str, amount: i64, currency: &str, embedded: Vec<Value>) -> Value {
    let mut dispute = fixture("dispute");
    dispute["id"] = json!(id);
    dispute["charge"] = json!(charge);
    dispute["amount"] = json!(amount);
    dispute["currency"] = json!(currency);
    dispute["balance_transactions"] = Value::Array(embedded);
    dispute
}

/// A payout naming its balance transaction (and its failure's).
pub fn payout(
    id: &str,
    amount: i64,
    transaction: &str,
    failure: Option<&str>,
    automatic: bool,
) -> Value {
    let mut payout = fixture("payout");
    payout["id"] = json!(id);
    payout["amount"] = json!(amount);
    payout["balance_transaction"] = json!(transaction);
    payout["failure_balance_transaction"] = json!(failure);
    payout["automatic"] = json!(automatic);
    if failure.is_some() {
        payout["status"] = json!("failed");
        payout["failure_code"] = json!("account_closed");
    }
    payout
}
