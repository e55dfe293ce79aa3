//! `provider = "stripe"`: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 over
//! `{t}.{raw body}` keyed with the UTF-8 bytes of the whole `whsec_...` secret. Other schemes
//! (`v0`) are ignored. The event's `id` is its external id; the Stripe object it is about
//! (payout, refund, dispute, charge) is its money movement.
//!
//! Mapped: `payout.paid`, `payout.failed`, `charge.refunded` (its newest refund),
//! `charge.dispute.funds_withdrawn`, `charge.dispute.funds_reinstated`, and `charge.succeeded`
//! when its balance transaction is expanded (amount, fee, net). Everything else is ignored.

use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use jobs::{
    Amount, Amounts, Content, Currency, EventParts, ExternalId, FactsError, Fingerprint,
    InvalidFacts, Kind, MovementId, NewEvent, PayoutId, SettlementEvent,
};
use serde_json::{Map, Value, json};

use super::minor_units::stripe_exponent;
use super::signature::{SignatureError, any_matches, check_tolerance};
use super::{Adapted, Unparseable, header};
use crate::source::Source;

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

pub(crate) fn verify(
    source: &Source,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    let signature = parse_signature_header(header(headers, HEADER)?)?;
    let timestamp: i64 = signature
        .timestamp
        .parse()
        .map_err(|_| SignatureError::Malformed(HEADER))?;
    check_tolerance(timestamp, now, source.tolerance_secs)?;
    let signed = [signature.timestamp.as_bytes(), b".", body];
    if any_matches(&source.keys, &signed, &signature.v1) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

pub(crate) fn adapt(source: &Source, body: &[u8]) -> Result<Adapted, Unparseable> {
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
    let object = event
        .get("data")
        .and_then(|d| d.get("object"))
        .and_then(Value::as_object);
    let Some(mapped) = map_type(event_type, object) else {
        return Ok(Adapted::Ignored);
    };
    let object = object.cloned().unwrap_or_default();
    let content = match mapped(&object) {
        Ok(event) => Content::Valid(event),
        Err(error) => Content::Invalid(InvalidFacts {
            kind: Some(event_type.to_owned()),
            error,
            fingerprint: Fingerprint::of_unvalidated(
                "stripe",
                &json!({"type": event_type, "object": object}),
            ),
        }),
    };
    Ok(Adapted::Events(vec![NewEvent {
        source: source.name.clone(),
        external_id,
        payload: String::from_utf8_lossy(body).into_owned(),
        content,
    }]))
}

type Mapper = fn(&Map<String, Value>) -> Result<SettlementEvent, FactsError>;

/// The adapter for a settlement-relevant type, or `None` to ignore the event.
fn map_type(event_type: &str, object: Option<&Map<String, Value>>) -> Option<Mapper> {
    Some(match event_type {
        "payout.paid" => |o| payout(o, Kind::PayoutPaid),
        "payout.failed" => |o| payout(o, Kind::PayoutFailed),
        "charge.refunded" => refund,
        "charge.dispute.funds_withdrawn" => |o| dispute(o, Kind::Chargeback),
        "charge.dispute.funds_reinstated" => |o| dispute(o, Kind::ChargebackReversed),
        // Only with its balance transaction expanded does a charge carry settled facts.
        "charge.succeeded"
            if object
                .and_then(|o| o.get("balance_transaction"))
                .is_some_and(Value::is_object) =>
        {
            charge
        }
        _ => return None,
    })
}

fn payout(object: &Map<String, Value>, kind: Kind) -> Result<SettlementEvent, FactsError> {
    let id = text(object, "data.object.id")?;
    let currency = currency(object)?;
    let amount = minor(object, "amount", "data.object.amount", currency)?;
    let amounts = match kind {
        Kind::PayoutPaid => Amounts::PayoutPaid { amount },
        _ => Amounts::PayoutFailed { amount },
    };
    let occurred_at = time(object, "arrival_date").or_else(|_| time(object, "created"))?;
    build(id, occurred_at, currency, amounts, Some(id))
}

fn refund(object: &Map<String, Value>) -> Result<SettlementEvent, FactsError> {
    let refund = object
        .get("refunds")
        .and_then(|r| r.get("data"))
        .and_then(Value::as_array)
        .and_then(|list| list.first())
        .and_then(Value::as_object)
        .ok_or_else(|| {
            FactsError::Provider(
                "charge.refunded without refund details (data.object.refunds.data)".into(),
            )
        })?;
    let id = text(refund, "data.object.refunds.data[0].id")?;
    let currency = currency(refund)?;
    let amount = minor(
        refund,
        "amount",
        "data.object.refunds.data[0].amount",
        currency,
    )?;
    let fee = match refund.get("balance_transaction").and_then(Value::as_object) {
        Some(transaction) => minor(
            transaction,
            "fee",
            "refund balance_transaction.fee",
            currency,
        )?,
        None => Amount::zero(currency),
    };
    let occurred_at = time(refund, "created")?;
    build(
        id,
        occurred_at,
        currency,
        Amounts::RefundSettled { amount, fee },
        None,
    )
}

fn dispute(object: &Map<String, Value>, kind: Kind) -> Result<SettlementEvent, FactsError> {
    let id = text(object, "data.object.id")?;
    let currency = currency(object)?;
    let amount = minor(object, "amount", "data.object.amount", currency)?;
    let amounts = match kind {
        Kind::Chargeback => {
            // The dispute fee is on the balance transaction that withdrew the funds.
            let fee = object
                .get("balance_transactions")
                .and_then(Value::as_array)
                .and_then(|list| list.first())
                .and_then(Value::as_object)
                .map(|transaction| {
                    minor(transaction, "fee", "balance_transactions[0].fee", currency)
                })
                .transpose()?
                .unwrap_or_else(|| Amount::zero(currency));
            Amounts::Chargeback { amount, fee }
        }
        _ => Amounts::ChargebackReversed { amount },
    };
    let occurred_at = time(object, "created")?;
    build(id, occurred_at, currency, amounts, None)
}

fn charge(object: &Map<String, Value>) -> Result<SettlementEvent, FactsError> {
    let id = text(object, "data.object.id")?;
    let transaction = object
        .get("balance_transaction")
        .and_then(Value::as_object)
        .ok_or(FactsError::Missing("data.object.balance_transaction"))?;
    // The balance transaction is in the settlement currency, which is what the books hold.
    let currency = currency(transaction)?;
    let gross = minor(
        transaction,
        "amount",
        "balance_transaction.amount",
        currency,
    )?;
    let fee = minor(transaction, "fee", "balance_transaction.fee", currency)?;
    let net = minor(transaction, "net", "balance_transaction.net", currency)?;
    let occurred_at = time(object, "created")?;
    build(
        id,
        occurred_at,
        currency,
        Amounts::ChargeSettled { gross, fee, net },
        None,
    )
}

fn build(
    movement_id: &str,
    occurred_at: DateTime<Utc>,
    currency: Currency,
    amounts: Amounts,
    payout_id: Option<&str>,
) -> Result<SettlementEvent, FactsError> {
    SettlementEvent::new(EventParts {
        movement_id: MovementId::parse(movement_id).map_err(|source| FactsError::Id {
            field: "data.object.id",
            source,
        })?,
        occurred_at,
        currency,
        amounts,
        payout_id: payout_id
            .map(PayoutId::parse)
            .transpose()
            .map_err(|source| FactsError::Id {
                field: "payout id",
                source,
            })?,
        reference: None,
    })
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

/// Stripe sends lower-case ISO codes.
fn currency(object: &Map<String, Value>) -> Result<Currency, FactsError> {
    let code = text(object, "currency")?;
    Currency::parse(&code.to_ascii_uppercase()).map_err(|source| FactsError::Money {
        field: "currency",
        source,
    })
}

/// An integer amount in Stripe's minor units, converted exactly with Stripe's exponent.
fn minor(
    object: &Map<String, Value>,
    key: &str,
    field: &'static str,
    currency: Currency,
) -> Result<Amount, FactsError> {
    let value = object.get(key).ok_or(FactsError::Missing(field))?;
    let minor = value.as_i64().ok_or(FactsError::WrongType {
        field,
        expected: "an integer",
    })?;
    Amount::from_minor(minor, stripe_exponent(currency), currency)
        .map_err(|source| FactsError::Money { field, source })
}

fn time(object: &Map<String, Value>, key: &'static str) -> Result<DateTime<Utc>, FactsError> {
    object
        .get(key)
        .and_then(Value::as_i64)
        .and_then(|secs| DateTime::from_timestamp(secs, 0))
        .ok_or(FactsError::Missing(key))
}

#[cfg(test)]
mod tests {
    use jobs::SourceName;
    use proptest::prelude::*;

    use super::*;
    use crate::source::{Provider, Secret};

    const SECRET: &str = "whsec_test_secret";
    const VECTOR_BODY: &str = r#"{"id":"evt_1TEST","object":"event","type":"payout.paid","pending_webhooks":1,"data":{"object":{"id":"po_1TEST","object":"payout","amount":1100,"currency":"usd","status":"paid"}}}"#;
    const VECTOR_SIGNATURE: &str =
        "f26af5d3ee96e1fb1709c4ce1be19980181bba38547e54d061fc72650354adf2";

    fn source(secrets: &[&str]) -> Source {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Source::new(
            SourceName::parse("stripe").expect("name"),
            Provider::Stripe,
            &secrets,
            300,
        )
        .expect("source")
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

    #[test]
    fn adapts_events() {
        let source = source(&[SECRET]);
        let dated = VECTOR_BODY.replace(
            r#""status":"paid""#,
            r#""status":"paid","arrival_date":1700000000"#,
        );
        let Ok(Adapted::Events(events)) = adapt(&source, dated.as_bytes()) else {
            panic!("not adapted")
        };
        let Content::Valid(event) = &events[0].content else {
            panic!("invalid: {:?}", events[0].content)
        };
        assert_eq!(event.kind(), Kind::PayoutPaid);
        assert_eq!(event.movement_id().as_str(), "po_1TEST");
        assert_eq!(
            event.amounts(),
            &Amounts::PayoutPaid {
                amount: Amount::parse("11.00", event.currency()).expect("amount")
            }
        );
        let Ok(Adapted::Events(undated)) = adapt(&source, VECTOR_BODY.as_bytes()) else {
            panic!("not adapted")
        };
        assert!(
            matches!(&undated[0].content, Content::Invalid(i) if i.error == FactsError::Missing("created"))
        );
        let ignored = VECTOR_BODY.replace("payout.paid", "customer.created");
        assert!(matches!(
            adapt(&source, ignored.as_bytes()),
            Ok(Adapted::Ignored)
        ));
        let unexpanded = r#"{"id":"evt_2","type":"charge.succeeded","data":{"object":{"id":"ch_1","balance_transaction":"txn_1"}}}"#;
        assert!(matches!(
            adapt(&source, unexpanded.as_bytes()),
            Ok(Adapted::Ignored)
        ));
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
