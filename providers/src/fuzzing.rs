//! The fuzz targets' bodies, public so that `fuzz/` (cargo fuzz, nightly) and the seed-corpus test
//! (`providers/tests/fuzz_seeds.rs`, stable, in every test run) run the same checks. Each
//! provider lists its own ([`Provider::fuzz_targets`]); each takes arbitrary bytes and panics
//! only when a property fails:
//!
//! - the signature-header parsers never panic and read exactly the entries they should;
//! - a delivery signed the provider's way is never refused for its signature, the same delivery
//!   with one byte changed always is, and neither ever panics;
//! - an event's fingerprint survives its canonical round trip and ignores JSON whitespace.

use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderValue};
use ledger::{Content, NewEvent, SettlementEvent, SourceName};
use serde_json::Value;
use sha2::Sha256;

use crate::config::{Secret, Section};
use crate::seam::{Adapted, FuzzTarget, Provider, Receive, Rejection};
use crate::signature::SignatureError;

/// Every registered provider's targets.
pub fn targets() -> impl Iterator<Item = &'static FuzzTarget> {
    crate::PROVIDERS
        .iter()
        .flat_map(|provider| provider.fuzz_targets().iter())
}

/// Runs the named target on `data`; `false` when no target has that name.
pub fn run(target: &str, data: &[u8]) -> bool {
    match targets().find(|t| t.name == target) {
        Some(target) => {
            (target.run)(data);
            true
        }
        None => false,
    }
}

/// The time every fuzzed delivery is checked at, and signed for.
pub(crate) const NOW: i64 = 1_764_547_200;

/// A source `fuzz` of `provider` with one secret and `keys` as its own keys.
pub(crate) fn receiver(provider: &dyn Provider, secret: &str, keys: Value) -> Arc<dyn Receive> {
    let name = SourceName::parse("fuzz").expect("a valid source name");
    let keys = keys.as_object().cloned().unwrap_or_default();
    let secrets = [Secret::new(secret)];
    let section = Section {
        source: &name,
        secrets: &secrets,
        tolerance_secs: 300,
        keys: &keys,
    };
    provider.receiver(&section).expect("a valid fuzz source")
}

pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

pub(crate) fn round_trip(event: &SettlementEvent) {
    let canonical = event.to_canonical();
    let again = SettlementEvent::from_stored(&canonical).expect("canonical facts read back");
    assert_eq!(event.fingerprint(), again.fingerprint(), "{canonical}");
    assert_eq!(
        again.to_canonical(),
        canonical,
        "the canonical form is a fixed point"
    );
}

/// A movement read from a provider's document adds up: its net is its amount less its fee, its
/// fee parts sum to its fee, and its entry (unless it moves nothing) balances.
pub(crate) fn check_movement(movement: &ledger::movement::Movement, source: &SourceName) {
    let currency = movement.currency();
    assert_eq!(
        movement.amount().checked_sub(movement.fee()),
        Some(movement.net()),
        "net = amount - fee"
    );
    let parts = movement
        .fees()
        .iter()
        .try_fold(ledger::Amount::zero(currency), |sum, fee| {
            sum.checked_add(fee.amount)
        });
    if !movement.fees().is_empty() {
        assert_eq!(parts, Some(movement.fee()), "the fee parts sum to the fee");
    }
    if !movement.is_zero() {
        let accounts = ledger::posting::Accounts::defaults(source);
        let draft = ledger::posting::draft_movement(movement, &accounts);
        assert!(draft.is_balanced(), "{:?}", draft.lines);
    }
}

pub(crate) fn check_events(events: &[NewEvent]) {
    for event in events {
        if let Content::Valid(facts) = &event.content {
            round_trip(facts);
        }
    }
}

/// The events of a delivery that passed its signature check (`None` when it was ignored or
/// unreadable); panics if an authentic delivery was refused for its signature.
pub(crate) fn authentic(result: Result<Adapted, Rejection>) -> Option<Vec<NewEvent>> {
    match result {
        Ok(Adapted::Events(events)) => {
            check_events(&events);
            Some(events)
        }
        Ok(Adapted::Ignored(_)) | Err(Rejection::Unparseable(_)) => None,
        Err(Rejection::Signature(error)) => panic!("an authentic delivery was refused: {error}"),
    }
}

pub(crate) fn refused_when_altered(source: &dyn Receive, headers: &HeaderMap, body: &[u8]) {
    let mut altered = body.to_vec();
    match altered.first_mut() {
        Some(byte) => *byte ^= 0x01,
        None => altered.push(b' '),
    }
    assert!(
        matches!(
            source.receive(headers, &altered, NOW),
            Err(Rejection::Signature(SignatureError::Mismatch))
        ),
        "an altered body must fail its signature"
    );
}

pub(crate) fn fingerprints(events: Option<&[NewEvent]>) -> Vec<String> {
    events
        .unwrap_or_default()
        .iter()
        .map(|event| event.fingerprint().to_hex())
        .collect()
}

pub(crate) fn header(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("a visible ASCII header value")
}
