//! Stripe's part of `settle demo`: webhooks in the shapes Stripe sends, their balance
//! transactions served by a fake Stripe API in this process (so the demo runs offline): two
//! charges (one captured asynchronously), a refund, a Stripe fee with no webhook of its own, and
//! the automatic payout whose listing brings it in and reconciles; a redelivery, a connected
//! account's event and a type that is not about money.

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::fake::{FakeStripe, fixture};
use super::sign;
use crate::demo::{
    DemoError, DemoPart, DemoPayout, Deliver, Expected, Tally, random_bytes, send_each,
};
use crate::seam::Sample;

const SOURCE: &str = "stripe";
/// The payout the scenario reconciles.
const PAYOUT: &str = "po_demo_1";

pub(super) struct Part {
    secret: String,
    api_key: String,
    fake: FakeStripe,
}

impl Part {
    pub(super) async fn start() -> Result<Self, DemoError> {
        let api_key = format!("rk_test_{}", hex::encode(random_bytes()));
        let fake = FakeStripe::start(&api_key)
            .await
            .map_err(|e| format!("cannot start the fake Stripe API: {e}"))?;
        stock(&fake);
        Ok(Self {
            secret: format!("whsec_{}", hex::encode(random_bytes())),
            api_key,
            fake,
        })
    }
}

/// A test-mode webhook event in the shape Stripe sends (`fixtures/stripe`).
fn event(id: &str, event_type: &str, object: Value, pending_webhooks: i64) -> Value {
    let mut event = fixture("event");
    event["id"] = json!(id);
    event["type"] = json!(event_type);
    event["pending_webhooks"] = json!(pending_webhooks);
    event["data"]["object"] = object;
    event
}

/// A charge as a webhook carries it: its balance transaction by id, or null (asynchronous
/// capture).
fn charge(id: &str, amount: i64, transaction: Option<&str>) -> Value {
    let mut charge = fixture("charge");
    charge["id"] = json!(id);
    charge["amount"] = json!(amount);
    charge["amount_captured"] = json!(amount);
    charge["balance_transaction"] = json!(transaction);
    charge
}

/// A balance transaction the fake serves.
fn transaction(id: &str, category: &str, amount: i64, fee: i64, source: &str) -> Value {
    let mut transaction = fixture("balance_transaction");
    transaction["id"] = json!(id);
    transaction["type"] = json!(category);
    transaction["reporting_category"] = json!(category);
    transaction["amount"] = json!(amount);
    transaction["fee"] = json!(fee);
    transaction["net"] = json!(amount - fee);
    transaction["source"] = json!(source);
    transaction["fee_details"] = match fee {
        0 => json!([]),
        fee => json!([{"amount": fee, "application": null, "currency": "usd",
                       "description": "Stripe processing fees", "type": "stripe_fee"}]),
    };
    transaction
}

/// The account behind the demo: two charges, a refund, a Stripe fee (which has no webhook of its
/// own) and the automatic payout that paid them out.
fn stock(fake: &FakeStripe) {
    let items = [
        transaction("txn_demo_ch1", "charge", 2_000, 88, "ch_demo_1"),
        transaction("txn_demo_ch2", "charge", 5_000, 175, "ch_demo_2"),
        transaction("txn_demo_re1", "refund", -500, 0, "re_demo_1"),
        transaction("txn_demo_fee", "fee", -200, 0, "fee_demo_radar"),
        transaction("txn_demo_po1", "payout", -6_037, 0, PAYOUT),
    ];
    let ids: Vec<String> = items
        .iter()
        .map(|t| t["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    for item in items {
        fake.add_transaction(None, item);
    }
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    fake.set_payout_listing(None, PAYOUT, &ids);
}

/// The deliveries, in order, with their labels.
fn deliveries() -> Vec<(&'static str, Value)> {
    let mut payout = fixture("payout");
    payout["id"] = json!(PAYOUT);
    payout["amount"] = json!(6_037);
    payout["balance_transaction"] = json!("txn_demo_po1");
    let mut captured = event(
        "evt_st_ch2_captured",
        "charge.updated",
        charge("ch_demo_2", 5_000, Some("txn_demo_ch2")),
        1,
    );
    captured["data"]["previous_attributes"] = json!({"balance_transaction": null});
    let mut refund = fixture("refund");
    refund["id"] = json!("re_demo_1");
    refund["amount"] = json!(500);
    refund["charge"] = json!("ch_demo_1");
    refund["balance_transaction"] = json!("txn_demo_re1");
    let mut connected = event(
        "evt_st_connect",
        "charge.succeeded",
        charge("ch_other", 900, Some("txn_other")),
        1,
    );
    connected["account"] = json!("acct_demo_connected");
    let charge_1 = charge("ch_demo_1", 2_000, Some("txn_demo_ch1"));
    vec![
        (
            "stripe: charge.succeeded 20.00 USD (names txn)",
            event("evt_st_ch1", "charge.succeeded", charge_1.clone(), 1),
        ),
        (
            "stripe: charge.succeeded redelivered (pending_webhooks 2)",
            event("evt_st_ch1", "charge.succeeded", charge_1, 2),
        ),
        (
            "stripe: charge.succeeded, async capture (txn null)",
            event(
                "evt_st_ch2",
                "charge.succeeded",
                charge("ch_demo_2", 5_000, None),
                1,
            ),
        ),
        ("stripe: charge.updated, captured (names txn)", captured),
        (
            "stripe: refund.created 5.00 USD",
            event("evt_st_re1", "refund.created", refund, 1),
        ),
        (
            "stripe: payout.paid 60.37 USD (lists its items)",
            event("evt_st_paid", "payout.paid", payout.clone(), 1),
        ),
        (
            "stripe: payout.reconciliation_completed",
            event("evt_st_recon", "payout.reconciliation_completed", payout, 1),
        ),
        ("stripe: a connected account's charge (ignored)", connected),
        (
            "stripe: customer.created (ignored)",
            event("evt_st_cus", "customer.created", json!({"id": "cus_1"}), 1),
        ),
    ]
}

impl DemoPart for Part {
    fn source_toml(&self) -> String {
        format!(
            "[[sources]]\nname = \"{SOURCE}\"\nprovider = \"stripe\"\nsecrets = [\"{}\"]\n\
             livemode = false\napi_key = \"{}\"\napi_base = \"{}\"\nfeed = false\n",
            self.secret,
            self.api_key,
            self.fake.url()
        )
    }

    fn banner(&self) -> Option<String> {
        Some(format!(
            "Stripe's API is a fake in this process at {} (the demo runs offline)",
            self.fake.url()
        ))
    }

    fn send<'a>(
        &'a self,
        deliver: &'a dyn Deliver,
        tally: &'a mut Tally,
    ) -> BoxFuture<'a, Result<(), DemoError>> {
        Box::pin(async move {
            let signed = deliveries()
                .into_iter()
                .map(|(label, body)| {
                    let body = body.to_string();
                    let header =
                        sign::header(&self.secret, chrono::Utc::now().timestamp(), body.as_bytes());
                    let headers = vec![("stripe-signature".to_owned(), header)];
                    (label, Sample { headers, body })
                })
                .collect();
            send_each(deliver, tally, SOURCE, signed).await
        })
    }

    fn expected(&self) -> Expected {
        Expected {
            recorded: 6,
            duplicates: 1,
            conflicts: 0,
            ignored: 2,
            // Both charges, the refund, the fee (from the payout's listing) and the payout.
            posted: 5,
            dead_letters: 0,
        }
    }

    fn payouts(&self) -> Vec<DemoPayout> {
        vec![DemoPayout {
            title: format!("Stripe payout {PAYOUT} (its balance transactions, listed)"),
            payout_id: PAYOUT.to_owned(),
            items: "items",
        }]
    }
}
