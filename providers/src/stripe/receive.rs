//! Receiving a Stripe delivery: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`,
//! HMAC-SHA256 over `{t}.{raw body}` keyed with the UTF-8 bytes of the whole `whsec_...` secret.
//! Other schemes (`v0`) are ignored. The event's `id` is its external id.
//!
//! A Stripe webhook never carries the settled money: a charge's or refund's
//! `balance_transaction` is an id (null under asynchronous capture), `charge.refunded` lists no
//! refunds (API 2022-11-15 on), a payout's items are only listed by the API. So an event is
//! recorded with what it names (a [`StripeTrigger`]), and its job fetches the balance
//! transactions. Events of the other mode (`livemode`) and, unless the source posts Connect,
//! events of connected accounts (`account`) are acknowledged and ignored.

use http::HeaderMap;
use ledger::{Content, ExternalId, FactsError, Fingerprint, InvalidFacts, NewEvent, SourceName};
use serde_json::{Map, Value, json};

use super::config::{Connect, StripeRules};
use super::trigger::StripeTrigger;
use crate::seam::{Adapted, Ignore, Receive, Rejection, Unparseable};
use crate::signature::{SignatureError, SigningKey, any_matches, check_tolerance, header};

/// One Stripe source's receiving half.
#[derive(Clone, Debug)]
pub(crate) struct Receiver {
    pub(crate) name: SourceName,
    pub(crate) tolerance_secs: u64,
    pub(crate) keys: Vec<SigningKey>,
    pub(crate) rules: StripeRules,
}

impl Receive for Receiver {
    fn precheck(&self, headers: &HeaderMap, now: i64) -> Result<(), SignatureError> {
        precheck(self, headers, now)
    }

    fn receive(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Adapted, Rejection> {
        verify(self, headers, body, now)?;
        Ok(adapt(self, body)?)
    }
}

/// The key a Stripe secret signs with: the UTF-8 bytes of the whole `whsec_...` string.
pub(crate) fn signing_key(secret: &str) -> Result<SigningKey, &'static str> {
    if secret.is_empty() {
        return Err("empty secret");
    }
    Ok(SigningKey::new(secret.as_bytes().to_vec()))
}

const HEADER: &str = "stripe-signature";

/// The parts of a `Stripe-Signature` header settle uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StripeSignature<'h> {
    /// The timestamp exactly as sent (it is part of the signed payload).
    pub timestamp: &'h str,
    /// Every `v1` signature, hex-decoded (one that is not hex decodes to nothing and never
    /// matches).
    pub v1: Vec<Vec<u8>>,
}

/// Parses `t=...,v1=...[,v1=...]`; other keys are ignored. No `t` is malformed.
pub(crate) fn parse_signature_header(value: &str) -> Result<StripeSignature<'_>, SignatureError> {
    let mut timestamp = None;
    let mut v1 = Vec::new();
    for item in value.split(',') {
        let Some((key, content)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" if timestamp.is_none() => timestamp = Some(content),
            "v1" => v1.push(hex::decode(content).unwrap_or_default()),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed(HEADER))?;
    Ok(StripeSignature { timestamp, v1 })
}

/// The `Stripe-Signature` header, present, readable, its timestamp within tolerance.
fn signature_header<'h>(
    source: &Receiver,
    headers: &'h HeaderMap,
    now: i64,
) -> Result<StripeSignature<'h>, SignatureError> {
    let signature = parse_signature_header(header(headers, HEADER)?)?;
    let timestamp: i64 = signature
        .timestamp
        .parse()
        .map_err(|_| SignatureError::Malformed(HEADER))?;
    check_tolerance(timestamp, now, source.tolerance_secs)?;
    Ok(signature)
}

/// What can be checked before the body is read.
pub(crate) fn precheck(
    source: &Receiver,
    headers: &HeaderMap,
    now: i64,
) -> Result<(), SignatureError> {
    signature_header(source, headers, now).map(|_| ())
}

pub(crate) fn verify(
    source: &Receiver,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    let signature = signature_header(source, headers, now)?;
    let signed = [signature.timestamp.as_bytes(), b".", body];
    if any_matches(&source.keys, &signed, &signature.v1) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

pub(crate) fn adapt(source: &Receiver, body: &[u8]) -> Result<Adapted, Unparseable> {
    let value: Value = serde_json::from_slice(body).map_err(|_| Unparseable("body is not JSON"))?;
    let event = value
        .as_object()
        .ok_or(Unparseable("body is not a JSON object"))?;
    let id = event
        .get("id")
        .and_then(Value::as_str)
        .ok_or(Unparseable("missing string field `id`"))?;
    let external_id =
        ExternalId::parse(id).map_err(|_| Unparseable("`id` is not a usable event id"))?;
    let event_type = event
        .get("type")
        .and_then(Value::as_str)
        .ok_or(Unparseable("missing string field `type`"))?;
    let Some(names) = names_of(event_type) else {
        return Ok(Adapted::Ignored(Ignore::NotSettlement));
    };
    let rules = source.rules;
    if event
        .get("livemode")
        .and_then(Value::as_bool)
        .is_some_and(|livemode| livemode != rules.livemode)
    {
        return Ok(Adapted::Ignored(Ignore::OtherMode));
    }
    let account = event.get("account").and_then(Value::as_str);
    if account.is_some() && rules.connect == Connect::Ignore {
        return Ok(Adapted::Ignored(Ignore::ConnectedAccount));
    }
    let object = event
        .get("data")
        .and_then(|d| d.get("object"))
        .and_then(Value::as_object);
    if event_type == "charge.updated" && !changes_balance_transaction(event) {
        return Ok(Adapted::Ignored(Ignore::NoMovement));
    }
    let content = match object
        .ok_or(FactsError::Missing("data.object"))
        .and_then(|object| trigger(event_type, names, object, account))
    {
        Ok(trigger) => Content::Named(trigger.named()),
        Err(error) => {
            let object = object.cloned().unwrap_or_default();
            Content::Invalid(InvalidFacts {
                kind: Some(event_type.to_owned()),
                error,
                fingerprint: Fingerprint::of_unvalidated(
                    "stripe",
                    &json!({"type": event_type, "object": object}),
                ),
            })
        }
    };
    Ok(Adapted::Events(vec![NewEvent {
        source: source.name.clone(),
        external_id,
        payload: String::from_utf8_lossy(body).into_owned(),
        content,
    }]))
}

/// What an event's object names, by event type: the one table of which Stripe webhooks settle
/// reads and what it fetches for each. Every other type is acknowledged and ignored.
///
/// | event | names |
/// |---|---|
/// | `charge.succeeded`, `charge.captured`, `charge.updated` | the charge's `balance_transaction` (null under asynchronous capture: nothing yet) |
/// | `charge.refunded` | the charge's `balance_transaction`, and its refunds, listed |
/// | `refund.created`, `refund.updated`, `refund.failed`, `charge.refund.updated` | the refund's `balance_transaction` and `failure_balance_transaction` |
/// | `charge.dispute.funds_withdrawn`, `charge.dispute.funds_reinstated` | the dispute's embedded `balance_transactions` |
/// | `payout.paid`, `payout.reconciliation_completed` | the payout's `balance_transaction`, and its balance transactions listed (automatic payouts) |
/// | `payout.failed` | the payout's `balance_transaction` and `failure_balance_transaction` |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Names {
    Charge,
    ChargeAndRefunds,
    Refund,
    Dispute,
    PayoutAndListing,
    PayoutFailure,
}

fn names_of(event_type: &str) -> Option<Names> {
    Some(match event_type {
        "charge.succeeded" | "charge.captured" | "charge.updated" => Names::Charge,
        "charge.refunded" => Names::ChargeAndRefunds,
        "refund.created" | "refund.updated" | "refund.failed" | "charge.refund.updated" => {
            Names::Refund
        }
        "charge.dispute.funds_withdrawn" | "charge.dispute.funds_reinstated" => Names::Dispute,
        "payout.paid" | "payout.reconciliation_completed" => Names::PayoutAndListing,
        "payout.failed" => Names::PayoutFailure,
        _ => return None,
    })
}

/// A `charge.updated` names money only when the update set its balance transaction (Stripe
/// lists the changed fields' old values in `data.previous_attributes`); an update of anything
/// else (a description, metadata) names nothing new. Without `previous_attributes` it is read.
fn changes_balance_transaction(event: &Map<String, Value>) -> bool {
    match event
        .get("data")
        .and_then(|d| d.get("previous_attributes"))
        .and_then(Value::as_object)
    {
        Some(previous) => previous.contains_key("balance_transaction"),
        None => true,
    }
}

fn trigger(
    event_type: &str,
    names: Names,
    object: &Map<String, Value>,
    account: Option<&str>,
) -> Result<StripeTrigger, FactsError> {
    let id = text(object, "data.object.id")?.to_owned();
    let mut trigger = StripeTrigger {
        event_type: event_type.to_owned(),
        object: id.clone(),
        account: account.map(str::to_owned),
        balance_transactions: Vec::new(),
        embedded: Vec::new(),
        refunds_of_charge: None,
        payout_listing: None,
    };
    let mut name = |field: &'static str| -> Result<(), FactsError> {
        if let Some(txn) = transaction_id(object, field)? {
            trigger.balance_transactions.push(txn);
        }
        Ok(())
    };
    match names {
        Names::Charge => name("balance_transaction")?,
        Names::ChargeAndRefunds => {
            name("balance_transaction")?;
            trigger.refunds_of_charge = Some(id);
        }
        Names::Refund | Names::PayoutFailure => {
            name("balance_transaction")?;
            name("failure_balance_transaction")?;
        }
        Names::Dispute => {
            trigger.embedded = match object.get("balance_transactions") {
                Some(Value::Array(items)) => items.clone(),
                None | Some(Value::Null) => Vec::new(),
                Some(_) => {
                    return Err(FactsError::WrongType {
                        field: "data.object.balance_transactions",
                        expected: "a list",
                    });
                }
            };
        }
        Names::PayoutAndListing => {
            name("balance_transaction")?;
            // Stripe lists the balance transactions of automatic payouts only; a payout it
            // cannot reconcile says `not_applicable`.
            let automatic = object.get("automatic").and_then(Value::as_bool) == Some(true);
            let reconcilable = object.get("reconciliation_status").and_then(Value::as_str)
                != Some("not_applicable");
            if automatic && reconcilable {
                trigger.payout_listing = Some(id);
            }
        }
    }
    Ok(trigger)
}

/// A `balance_transaction`-like field: an id, null (none yet), or the object when expanded.
fn transaction_id(
    object: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, FactsError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) => Ok(Some(id.clone())),
        Some(Value::Object(expanded)) => Ok(expanded
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)),
        Some(_) => Err(FactsError::WrongType {
            field,
            expected: "a balance transaction id",
        }),
    }
}

fn text<'a>(object: &'a Map<String, Value>, field: &'static str) -> Result<&'a str, FactsError> {
    let key = field.rsplit('.').next().unwrap_or(field);
    match object.get(key) {
        Some(Value::String(text)) => Ok(text),
        None | Some(Value::Null) => Err(FactsError::Missing(field)),
        Some(_) => Err(FactsError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SECRET: &str = "whsec_test_secret";
    const VECTOR_BODY: &str = r#"{"id":"evt_1TEST","object":"event","type":"payout.paid","pending_webhooks":1,"data":{"object":{"id":"po_1TEST","object":"payout","amount":1100,"currency":"usd","status":"paid"}}}"#;
    const VECTOR_SIGNATURE: &str =
        "f26af5d3ee96e1fb1709c4ce1be19980181bba38547e54d061fc72650354adf2";

    fn source(secrets: &[&str]) -> Receiver {
        Receiver {
            name: SourceName::parse("stripe").expect("name"),
            tolerance_secs: 300,
            keys: secrets
                .iter()
                .map(|s| signing_key(s).expect("a valid secret"))
                .collect(),
            rules: StripeRules::default(),
        }
    }

    impl Receiver {
        fn with_stripe(mut self, rules: StripeRules) -> Self {
            self.rules = rules;
            self
        }
    }

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, value.parse().expect("header"));
        headers
    }

    #[test]
    fn public_test_vector_verifies() {
        let value = format!("t=1700000000,v1={VECTOR_SIGNATURE}");
        assert_eq!(
            verify(
                &source(&[SECRET]),
                &headers(&value),
                VECTOR_BODY.as_bytes(),
                1_700_000_000
            ),
            Ok(())
        );
        // Among other schemes and signatures, with a rotated secret beside it.
        let value = format!("t=1700000000,v0=abc,v1=00ff,v1={VECTOR_SIGNATURE}");
        let rotated = source(&["whsec_other", SECRET]);
        assert_eq!(
            verify(
                &rotated,
                &headers(&value),
                VECTOR_BODY.as_bytes(),
                1_700_000_100
            ),
            Ok(())
        );
    }

    #[test]
    fn forged_stale_and_malformed_headers_fail() {
        let source = source(&[SECRET]);
        let body = VECTOR_BODY.as_bytes();
        let check = |value: &str, now: i64, want: SignatureError| {
            assert_eq!(
                verify(&source, &headers(value), body, now),
                Err(want),
                "{value}"
            );
        };
        let good = format!("t=1700000000,v1={VECTOR_SIGNATURE}");
        check(&good, 1_700_000_301, SignatureError::OutOfTolerance);
        check(&good, 1_699_999_699, SignatureError::OutOfTolerance);
        check("t=1700000000,v1=", 1_700_000_000, SignatureError::Mismatch);
        check(
            &format!("t=1700000000,v1={}", &VECTOR_SIGNATURE[..60]),
            1_700_000_000,
            SignatureError::Mismatch,
        );
        check(
            &format!("t=1700000000,v0={VECTOR_SIGNATURE}"),
            1_700_000_000,
            SignatureError::Mismatch,
        );
        check(
            &format!("v1={VECTOR_SIGNATURE}"),
            1_700_000_000,
            SignatureError::Malformed(HEADER),
        );
        check("garbage", 1_700_000_000, SignatureError::Malformed(HEADER));
        check(
            &format!("t=soon,v1={VECTOR_SIGNATURE}"),
            1_700_000_000,
            SignatureError::Malformed(HEADER),
        );
        assert_eq!(
            verify(&source, &HeaderMap::new(), body, 1_700_000_000),
            Err(SignatureError::Missing(HEADER))
        );
    }

    /// The trigger an event adapts to, or why it was not recorded.
    fn adapted(source: &Receiver, body: &Value) -> Result<StripeTrigger, String> {
        match adapt(source, body.to_string().as_bytes()) {
            Ok(Adapted::Events(events)) => match &events[0].content {
                Content::Named(named) => StripeTrigger::from_trigger(&named.trigger),
                Content::Invalid(invalid) => Err(format!("invalid: {}", invalid.error)),
                Content::Valid(_) => Err("canonical facts".into()),
            },
            Ok(Adapted::Ignored(why)) => Err(format!("ignored: {}", why.as_str())),
            Err(error) => Err(format!("unparseable: {error}")),
        }
    }

    fn event(event_type: &str, object: Value) -> Value {
        json!({"id": "evt_1", "object": "event", "type": event_type, "livemode": false,
               "data": {"object": object}})
    }

    #[test]
    fn events_adapt_to_what_they_name() {
        let source = source(&[SECRET]).with_stripe(StripeRules::default());
        let charge = json!({"id": "ch_1", "object": "charge", "balance_transaction": "txn_1"});
        let got = adapted(&source, &event("charge.succeeded", charge.clone())).expect("named");
        assert_eq!(got.balance_transactions, ["txn_1"]);
        assert_eq!(got.object, "ch_1");
        // Asynchronous capture: nothing to fetch yet; the event is still recorded.
        let pending = json!({"id": "ch_1", "object": "charge", "balance_transaction": null});
        let got = adapted(&source, &event("charge.succeeded", pending)).expect("named");
        assert!(got.balance_transactions.is_empty());
        let refunded = json!({"id": "ch_1", "balance_transaction": "txn_1", "refunds": null});
        let got = adapted(&source, &event("charge.refunded", refunded)).expect("named");
        assert_eq!(got.refunds_of_charge.as_deref(), Some("ch_1"));
        let refund = json!({"id": "re_1", "object": "refund", "balance_transaction": "txn_r",
                            "failure_balance_transaction": "txn_f", "status": "failed"});
        let got = adapted(&source, &event("refund.failed", refund)).expect("named");
        assert_eq!(got.balance_transactions, ["txn_r", "txn_f"]);
        let payout = json!({"id": "po_1", "object": "payout", "automatic": true,
                            "balance_transaction": "txn_po"});
        let got = adapted(&source, &event("payout.paid", payout.clone())).expect("named");
        assert_eq!(
            (
                got.balance_transactions.as_slice(),
                got.payout_listing.as_deref()
            ),
            (&["txn_po".to_owned()][..], Some("po_1"))
        );
        let manual = json!({"id": "po_2", "automatic": false, "balance_transaction": "txn_p2"});
        let got = adapted(&source, &event("payout.paid", manual)).expect("named");
        assert_eq!(got.payout_listing, None, "manual payouts cannot be listed");
        let dispute = json!({"id": "dp_1", "balance_transactions": [{"id": "txn_d"}]});
        let got =
            adapted(&source, &event("charge.dispute.funds_withdrawn", dispute)).expect("named");
        assert_eq!(got.embedded, [json!({"id": "txn_d"})]);
        let bad = json!({"id": "ch_1", "balance_transaction": 5});
        assert_eq!(
            adapted(&source, &event("charge.succeeded", bad)),
            Err("invalid: field `balance_transaction` must be a balance transaction id".into())
        );
    }

    #[test]
    fn what_names_no_money_of_this_source_is_ignored() {
        let source = source(&[SECRET]).with_stripe(StripeRules::default());
        let charge = json!({"id": "ch_1", "balance_transaction": "txn_1"});
        let check = |body: Value, why: &str| {
            assert_eq!(
                adapted(&source, &body),
                Err(format!("ignored: {why}")),
                "{body}"
            );
        };
        check(
            event("customer.created", json!({"id": "cus_1"})),
            "not_settlement",
        );
        let mut live = event("charge.succeeded", charge.clone());
        live["livemode"] = json!(true);
        check(live, "other_mode");
        let mut connected = event("charge.succeeded", charge.clone());
        connected["account"] = json!("acct_1");
        check(connected.clone(), "connected_account");
        let mut described = event("charge.updated", charge.clone());
        described["data"]["previous_attributes"] = json!({"description": null});
        check(described, "no_movement");
        let mut captured = event("charge.updated", charge);
        captured["data"]["previous_attributes"] = json!({"balance_transaction": null});
        assert!(adapted(&source, &captured).is_ok());

        let posting = source.clone().with_stripe(StripeRules {
            livemode: false,
            connect: Connect::Post,
        });
        let got = adapted(&posting, &connected).expect("named");
        assert_eq!(got.account.as_deref(), Some("acct_1"));
        assert!(
            adapt(&source, br#"{"type":"payout.paid"}"#).is_err(),
            "no id"
        );
    }

    proptest! {
        #[test]
        fn the_header_parser_never_panics(value in ".{0,200}") {
            let _ = parse_signature_header(&value);
        }

        #[test]
        fn every_v1_is_parsed(t in 0i64..4_000_000_000, sigs in prop::collection::vec(prop::array::uniform32(any::<u8>()), 0..4)) {
            let mut value = format!("t={t}");
            for sig in &sigs {
                value.push_str(&format!(",v1={},v0=ignored", hex::encode(sig)));
            }
            let parsed = parse_signature_header(&value).expect("parses");
            let timestamp = t.to_string();
            prop_assert_eq!(parsed.timestamp, timestamp.as_str());
            prop_assert_eq!(parsed.v1, sigs.iter().map(|s| s.to_vec()).collect::<Vec<_>>());
        }
    }
}
