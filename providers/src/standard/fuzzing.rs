//! `standard`'s fuzz targets: its signature list, its deliveries, and the canonical facts they
//! carry.

use base64::Engine;
use http::{HeaderMap, HeaderValue};
use ledger::SettlementEvent;
use serde_json::{Value, json};

use crate::fuzzing::{
    NOW, authentic, fingerprints, header, hmac_sha256, receiver, refused_when_altered, round_trip,
};
use crate::seam::FuzzTarget;

pub(super) static TARGETS: &[FuzzTarget] = &[
    FuzzTarget {
        name: "standard_signature_header",
        run: signature_header,
    },
    FuzzTarget {
        name: "standard_delivery",
        run: delivery,
    },
    FuzzTarget {
        name: "canonical_fingerprint",
        run: canonical_fingerprint,
    },
];

const SECRET: &str = "whsec_ZnV6emluZyBzZWNyZXQgb2YgdGhlIHRhcmdldA==";

/// `webhook-signature`: as many decoded entries as there are `v1,` entries.
fn signature_header(data: &[u8]) {
    let Ok(list) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = super::receive::parse_signatures(list);
    let v1_entries = list.split(' ').filter(|e| e.starts_with("v1,")).count();
    assert_eq!(parsed.len(), v1_entries, "one candidate per v1 entry");
}

/// A Standard Webhooks delivery: the first line is the `webhook-id`, the rest the body.
fn delivery(data: &[u8]) {
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
    let source = receiver(&super::PROVIDER, SECRET, json!({}));
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.trim_start_matches("whsec_"))
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
    let first = authentic(source.receive(&headers, body, NOW));
    if let Some(events) = &first {
        assert_eq!(events.len(), 1, "a standard delivery is one event");
        assert_eq!(events[0].external_id.as_str(), id);
    }
    refused_when_altered(source.as_ref(), &headers, body);

    // The same JSON without its whitespace, signed again: the same facts, the same fingerprint.
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let compact = serde_json::to_vec(&value).expect("a JSON value serializes");
        let again = authentic(source.receive(&signed(&compact), &compact, NOW));
        assert_eq!(
            fingerprints(first.as_deref()),
            fingerprints(again.as_deref())
        );
    }
}

/// Canonical facts: the fingerprint survives `to_canonical` and `from_stored`, and the canonical
/// form is a fixed point.
fn canonical_fingerprint(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(event) = SettlementEvent::from_stored(&value) else {
        return;
    };
    round_trip(&event);
}

