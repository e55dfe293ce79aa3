//! `standard`'s part of `settle demo`: canonical events in three currencies, a redelivery, a
//! reformatted one, a conflicting one, a payout, an invalid event, the failure of a payout never
//! paid (its job keeps failing) and a type that is not about settlement.

use base64::Engine;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::sign;
use crate::demo::{DemoError, DemoPart, Deliver, Expected, Tally, random_bytes, send_each};
use crate::seam::Sample;

const SOURCE: &str = "std";

pub(super) struct Part {
    secret: String,
}

impl Part {
    pub(super) fn new() -> Self {
        Self {
            secret: format!(
                "whsec_{}",
                base64::engine::general_purpose::STANDARD.encode(random_bytes())
            ),
        }
    }
}

fn settlement(kind: &str, data: Value) -> String {
    json!({"type": format!("settlement.{kind}"), "timestamp": "2026-11-30T12:00:00Z", "data": data})
        .to_string()
}

/// A settled charge; a USD charge is paid out by `po_std_1` (a payout is in one currency: the
/// JPY and KWD charges wait for payouts of their own).
fn charge(movement: &str, currency: &str, gross: &str, fee: &str, net: &str) -> String {
    let mut data = json!({"movement_id": movement, "occurred_at": "2026-11-30T11:59:00Z",
        "currency": currency, "gross": gross, "fee": fee, "net": net, "reference": "order-42"});
    if currency == "USD" {
        data["payout_id"] = json!("po_std_1");
    }
    settlement("charge_settled", data)
}

fn payout(kind: &str, payout: &str, amount: &str) -> String {
    settlement(
        kind,
        json!({"movement_id": payout, "occurred_at": "2026-12-01T09:00:00Z", "currency": "USD",
            "amount": amount, "payout_id": payout}),
    )
}

impl DemoPart for Part {
    fn source_toml(&self) -> String {
        format!(
            "[[sources]]\nname = \"{SOURCE}\"\nprovider = \"standard\"\nsecrets = [\"{}\"]\n",
            self.secret
        )
    }

    fn send<'a>(
        &'a self,
        deliver: &'a dyn Deliver,
        tally: &'a mut Tally,
    ) -> BoxFuture<'a, Result<(), DemoError>> {
        Box::pin(async move {
            let usd = charge("ch_usd_1", "USD", "100.00", "3.20", "96.80");
            let sent = [
                ("std: charge 100.00 USD", "evt_usd_1", usd.clone()),
                (
                    "std: charge 1500 JPY",
                    "evt_jpy_1",
                    charge("ch_jpy_1", "JPY", "1500", "54", "1446"),
                ),
                (
                    "std: charge 12.500 KWD",
                    "evt_kwd_1",
                    charge("ch_kwd_1", "KWD", "12.500", "0.375", "12.125"),
                ),
                ("std: redelivery of the USD charge", "evt_usd_1", usd),
                (
                    "std: redelivery, reformatted (100.0 for 100.00)",
                    "evt_usd_1",
                    charge("ch_usd_1", "USD", "100.0", "3.2", "96.8"),
                ),
                (
                    "std: same event id, amount changed (a conflict)",
                    "evt_usd_1",
                    charge("ch_usd_1", "USD", "100.50", "3.20", "97.30"),
                ),
                (
                    "std: payout po_std_1 of 96.80 USD",
                    "evt_po_1",
                    payout("payout_paid", "po_std_1", "96.80"),
                ),
                (
                    "std: invalid (net is not gross - fee)",
                    "evt_bad_1",
                    charge("ch_bad_1", "USD", "10.00", "1.00", "8.00"),
                ),
                (
                    "std: failure of a payout never paid (keeps failing)",
                    "evt_po_ghost",
                    payout("payout_failed", "po_ghost", "5.00"),
                ),
                (
                    "std: not about settlement (ignored)",
                    "evt_inv_1",
                    json!({"type": "invoice.paid", "data": {}}).to_string(),
                ),
            ];
            let signed = sent
                .into_iter()
                .map(|(label, id, body)| {
                    let headers = sign::headers(&self.secret, id, sign::now(), body.as_bytes());
                    (label, Sample { headers, body })
                })
                .collect();
            send_each(deliver, tally, SOURCE, signed).await
        })
    }

    fn expected(&self) -> Expected {
        Expected {
            recorded: 6,
            duplicates: 2,
            conflicts: 1,
            ignored: 1,
            // The three charges and the payout; the invalid event and the ghost payout's
            // failure are dead-lettered.
            posted: 4,
            dead_letters: 2,
        }
    }
}
