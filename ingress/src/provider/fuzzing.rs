//! The fuzz targets' bodies, public so that `fuzz/` (cargo fuzz, nightly) and the seed-corpus test
//! (`ingress/tests/fuzz_seeds.rs`, stable, in every test run) run the same checks. Each takes
//! arbitrary bytes and panics only when a property fails:
//!
//! - the signature-header parsers never panic and read exactly the entries they should;
//! - a delivery signed the provider's way is never refused for its signature, the same delivery
//!   with one byte changed always is, and neither ever panics;
//! - an event's fingerprint survives its canonical round trip and ignores JSON whitespace.

use axum::http::{HeaderMap, HeaderValue};
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use ledger::{Content, NewEvent, SettlementEvent, SourceName};
use serde_json::Value;
use sha2::Sha256;

use super::signature::SignatureError;
use super::{Adapted, Rejection, adyen, authenticate, standard, stripe};
use crate::source::{Provider, Secret, Source};

/// Every target, by the name its `fuzz/fuzz_targets/<name>.rs` and seed folder carry.
pub const TARGETS: [&str; 6] = [
    "standard_signature_header",
    "stripe_signature_header",
    "standard_delivery",
    "stripe_delivery",
    "adyen_notification",
    "canonical_fingerprint",
];

/// Runs the named target on `data`; `false` when no target has that name.
pub fn run(target: &str, data: &[u8]) -> bool {
    match target {
        "standard_signature_header" => standard_signature_header(data),
        "stripe_signature_header" => stripe_signature_header(data),
        "standard_delivery" => standard_delivery(data),
        "stripe_delivery" => stripe_delivery(data),
        "adyen_notification" => adyen_notification(data),
        "canonical_fingerprint" => canonical_fingerprint(data),
        _ => return false,
    }
    true
}

const NOW: i64 = 1_764_547_200;
const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const STRIPE_SECRET: &str = "whsec_fuzz_stripe_secret";
const ADYEN_KEY_HEX: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

fn source(provider: Provider, secret: &str) -> Source {
    let name = SourceName::parse("fuzz").expect("a valid source name");
    Source::new(name, provider, &[Secret::new(secret)], 300).expect("a valid fuzz source")
}

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// `webhook-signature`: as many decoded entries as there are `v1,` entries.
pub fn standard_signature_header(data: &[u8]) {
    let Ok(list) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = standard::parse_signatures(list);
    let v1_entries = list.split(' ').filter(|e| e.starts_with("v1,")).count();
    assert_eq!(parsed.len(), v1_entries, "one candidate per v1 entry");
}

/// `Stripe-Signature`: the first `t` is the timestamp, every `v1` a candidate, no `t` malformed.
pub fn stripe_signature_header(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let items: Vec<(&str, &str)> = value
        .split(',')
        .filter_map(|item| item.trim().split_once('='))
        .collect();
    let first_t = items.iter().find(|(key, _)| *key == "t").map(|(_, v)| *v);
    let v1_items = items.iter().filter(|(key, _)| *key == "v1").count();
    match stripe::parse_signature_header(value) {
        Ok(signature) => {
            assert_eq!(Some(signature.timestamp), first_t);
            assert_eq!(signature.v1.len(), v1_items);
        }
        Err(error) => {
            assert_eq!(first_t, None, "a header with a t= item parses");
            assert_eq!(error, SignatureError::Malformed("stripe-signature"));
        }
    }
}

/// A Standard Webhooks delivery: the first line is the `webhook-id`, the rest the body.
pub fn standard_delivery(data: &[u8]) {
    let (id, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&b"msg_fuzz"[..], data),
    };
    let Ok(id) = std::str::from_utf8(id) else {
        return;
    };
    let Ok(id_header) = HeaderValue::from_str(id) else {
        return;
    };
    if id_header.to_str().is_err() {
        return;
    }
    let source = source(Provider::Standard, STANDARD_SECRET);
    let key = base64::engine::general_purpose::STANDARD
        .decode(STANDARD_SECRET.trim_start_matches("whsec_"))
        .expect("base64 secret");
    let signed = |body: &[u8]| {
        let timestamp = NOW.to_string();
        let signature = hmac_sha256(
            &key,
            &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
        );
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", id_header.clone());
        headers.insert("webhook-timestamp", header(&timestamp));
        headers.insert(
            "webhook-signature",
            header(&format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode(signature)
            )),
        );
        headers
    };
    let headers = signed(body);
    let first = authentic(authenticate(&source, &headers, body, NOW));
    if let Some(events) = &first {
        assert_eq!(events.len(), 1, "a standard delivery is one event");
        assert_eq!(events[0].external_id.as_str(), id);
    }
    refused_when_altered(&source, &headers, body);

    // The same JSON without its whitespace, signed again: the same facts, the same fingerprint.
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let compact = serde_json::to_vec(&value).expect("a JSON value serializes");
        let again = authentic(authenticate(&source, &signed(&compact), &compact, NOW));
        assert_eq!(
            fingerprints(first.as_deref()),
            fingerprints(again.as_deref())
        );
    }
}

/// A Stripe delivery: the whole input is the body, signed as Stripe signs.
pub fn stripe_delivery(data: &[u8]) {
    let source = source(Provider::Stripe, STRIPE_SECRET);
    let timestamp = NOW.to_string();
    let signature = hmac_sha256(
        STRIPE_SECRET.as_bytes(),
        &[timestamp.as_bytes(), b".", data],
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        "stripe-signature",
        header(&format!("t={timestamp},v1={}", hex::encode(signature))),
    );
    if let Some(events) = authentic(authenticate(&source, &headers, data, NOW)) {
        assert_eq!(events.len(), 1, "a Stripe delivery is at most one event");
    }
    refused_when_altered(&source, &headers, data);
}

/// An Adyen notification: verifying never panics nor passes unsigned items, and adapting gives at
/// most one event per item.
pub fn adyen_notification(data: &[u8]) {
    let source = source(Provider::Adyen, ADYEN_KEY_HEX);
    let Ok(value) = adyen::verify(&source, data) else {
        return;
    };
    // Only a notification whose every item carries a valid HMAC gets here.
    let items = value
        .get("notificationItems")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    assert!(items > 0, "a verified notification has items");
    if let Ok(Adapted::Events(events)) = super::adyen::adapt(&source, &value) {
        // Items that failed or are not about settlement are skipped; none yields two events.
        assert!(events.len() <= items, "at most one event per item");
        check_events(&events);
    }
}

/// Canonical facts: the fingerprint survives `to_canonical` and `from_stored`, and the canonical
/// form is a fixed point.
pub fn canonical_fingerprint(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(event) = SettlementEvent::from_stored(&value) else {
        return;
    };
    round_trip(&event);
}

fn round_trip(event: &SettlementEvent) {
    let canonical = event.to_canonical();
    let again = SettlementEvent::from_stored(&canonical).expect("canonical facts read back");
    assert_eq!(event.fingerprint(), again.fingerprint(), "{canonical}");
    assert_eq!(
        again.to_canonical(),
        canonical,
        "the canonical form is a fixed point"
    );
}

fn check_events(events: &[NewEvent]) {
    for event in events {
        if let Content::Valid(facts) = &event.content {
            round_trip(facts);
        }
    }
}

/// The events of a delivery that passed its signature check (`None` when it was ignored or
/// unreadable); panics if an authentic delivery was refused for its signature.
fn authentic(result: Result<Adapted, Rejection>) -> Option<Vec<NewEvent>> {
    match result {
        Ok(Adapted::Events(events)) => {
            check_events(&events);
            Some(events)
        }
        Ok(Adapted::Ignored(_)) | Err(Rejection::Unparseable(_)) => None,
        Err(Rejection::Signature(error)) => panic!("an authentic delivery was refused: {error}"),
    }
}

fn refused_when_altered(source: &Source, headers: &HeaderMap, body: &[u8]) {
    let mut altered = body.to_vec();
    match altered.first_mut() {
        Some(byte) => *byte ^= 0x01,
        None => altered.push(b' '),
    }
    assert!(
        matches!(
            authenticate(source, headers, &altered, NOW),
            Err(Rejection::Signature(SignatureError::Mismatch))
        ),
        "an altered body must fail its signature"
    );
}

fn fingerprints(events: Option<&[NewEvent]>) -> Vec<String> {
    events
        .unwrap_or_default()
        .iter()
        .map(|event| event.fingerprint().to_hex())
        .collect()
}

fn header(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("a visible ASCII header value")
}
