//! Stripe's fuzz targets: the `Stripe-Signature` header, whole deliveries, and the API's answers
//! the feed reads (a balance transaction, a listing page).

use http::HeaderMap;
use serde_json::json;

use ledger::SourceName;

use super::api::Page;
use super::balance_transaction::BalanceTransaction;
use super::resolve::draft_listed;
use crate::fuzzing::{
    NOW, authentic, check_movement, header, hmac_sha256, receiver, refused_when_altered,
};
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
    FuzzTarget {
        name: "stripe_balance_transaction",
        run: balance_transaction,
    },
    FuzzTarget {
        name: "stripe_listing_page",
        run: listing_page,
    },
];

const SECRET: &str = "whsec_fuzz_stripe_secret";

/// A balance transaction as Stripe's API answers it (`GET /v1/balance_transactions/{id}`):
/// reading it never panics, and what it books adds up (or, when it does not, its net is booked
/// to suspense and nothing else).
fn balance_transaction(data: &[u8]) {
    let Ok(transaction) = serde_json::from_slice::<BalanceTransaction>(data) else {
        return;
    };
    let source = SourceName::parse("fuzz").expect("a valid source name");
    match super::balance_transaction::movement(&source, None, &transaction) {
        Ok(movement) => check_movement(&movement, &source),
        Err(error) => {
            if let Ok(movement) =
                super::balance_transaction::suspense_movement(&source, None, &transaction, &error)
            {
                check_movement(&movement, &source);
                assert!(movement.fee().is_zero(), "suspense books the net alone");
            }
        }
    }
}

/// A listing page (`GET /v1/balance_transactions?created...`, or a payout's `?payout=`), as the
/// feed reads it: never a panic, at most one entry per listed transaction, each balanced.
fn listing_page(data: &[u8]) {
    let Ok(page) = serde_json::from_slice::<Page<BalanceTransaction>>(data) else {
        return;
    };
    let _ = page.has_more;
    let source = SourceName::parse("fuzz").expect("a valid source name");
    let accounts = ledger::posting::Accounts::defaults(&source);
    if let Ok(resolved) = draft_listed(&source, &accounts, None, &page.data) {
        assert!(resolved.entries.len() <= page.data.len(), "at most one entry each");
        for entry in &resolved.entries {
            assert!(entry.draft.is_balanced(), "{:?}", entry.draft.lines);
        }
    }
}

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

