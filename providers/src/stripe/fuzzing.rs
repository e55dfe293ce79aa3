//! Stripe's fuzz targets: the `Stripe-Signature` header and whole deliveries.

use http::HeaderMap;
use serde_json::json;

use crate::fuzzing::{NOW, authentic, header, hmac_sha256, receiver, refused_when_altered};
use crate::seam::FuzzTarget;
use crate::signature::SignatureError;

pub(super) static TARGETS: &[FuzzTarget] = &[
    FuzzTarget {
        name: "stripe_signature_header",
        run: signature_header,
    },
    FuzzTarget {
        name: "stripe_delivery",
        run: delivery,
    },
];

const SECRET: &str = "whsec_fuzz_stripe_secret";

/// `Stripe-Signature`: the first `t` is the timestamp, every `v1` a candidate, no `t` malformed.
fn signature_header(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let items: Vec<(&str, &str)> = value
        .split(',')
        .filter_map(|item| item.trim().split_once('='))
        .collect();
    let first_t = items.iter().find(|(key, _)| *key == "t").map(|(_, v)| *v);
    let v1_items = items.iter().filter(|(key, _)| *key == "v1").count();
    match super::receive::parse_signature_header(value) {
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

/// A Stripe delivery: the whole input is the body, signed as Stripe signs.
fn delivery(data: &[u8]) {
    let source = receiver(
        &super::PROVIDER,
        SECRET,
        json!({"livemode": false, "api_key": "rk_test_fuzz"}),
    );
    let timestamp = NOW.to_string();
    let signature = hmac_sha256(
        SECRET.as_bytes(),
        &[timestamp.as_bytes(), b".", data],
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        "stripe-signature",
        header(&format!("t={timestamp},v1={}", hex::encode(signature))),
    );
    if let Some(events) = authentic(source.receive(&headers, data, NOW)) {
        assert_eq!(events.len(), 1, "a Stripe delivery is at most one event");
    }
    refused_when_altered(source.as_ref(), &headers, data);
}

