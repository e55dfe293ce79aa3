//! Receiving a `standard` delivery: the canonical settlement schema (README.md, `standard`)
//! signed with Standard Webhooks: HMAC-SHA256 over `{id}.{timestamp}.{body}`, keyed with the
//! base64 secret after `whsec_`, sent base64 as a space-separated list of `v1,<sig>`.
//! `webhook-*` and Svix's `svix-*` headers are both accepted.

use base64::Engine;
use http::HeaderMap;
use ledger::{
    Content, ExternalId, FactsError, Fingerprint, InvalidFacts, Kind, NewEvent, SettlementEvent,
    SourceName,
};
use serde_json::{Value, json};

use crate::seam::{Adapted, Ignore, Receive, Rejection, Unparseable};
use crate::signature::{SignatureError, SigningKey, any_matches, check_tolerance, header};

/// One `standard` source's receiving half.
#[derive(Debug)]
pub(crate) struct Receiver {
    pub(crate) name: SourceName,
    pub(crate) tolerance_secs: u64,
    pub(crate) keys: Vec<SigningKey>,
}

impl Receive for Receiver {
    fn precheck(&self, headers: &HeaderMap, now: i64) -> Result<(), SignatureError> {
        precheck(self, headers, now)
    }

    fn receive(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Adapted, Rejection> {
        let message_id = verify(self, headers, body, now)?;
        Ok(adapt(self, message_id, body)?)
    }
}

/// The key a Standard Webhooks secret signs with: base64 after an optional `whsec_` prefix.
pub(crate) fn signing_key(secret: &str) -> Result<SigningKey, &'static str> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| "expected whsec_ followed by base64")?;
    if key.is_empty() {
        return Err("empty key");
    }
    Ok(SigningKey::new(key))
}

const HEADER_SETS: [[&str; 3]; 2] = [
    ["webhook-id", "webhook-timestamp", "webhook-signature"],
    ["svix-id", "svix-timestamp", "svix-signature"],
];

/// Checks the signature on the raw bytes; returns the message id (the event's external id).
/// The signing headers (`webhook-*` or `svix-*`): the message id, the timestamp as sent, the
/// signature list; present, readable, and the timestamp within tolerance.
fn signing_headers<'h>(
    source: &Receiver,
    headers: &'h HeaderMap,
    now: i64,
) -> Result<(&'h str, &'h str, &'h str), SignatureError> {
    let [id_name, timestamp_name, signature_name] = HEADER_SETS
        .into_iter()
        .find(|[id, ..]| headers.contains_key(*id))
        .unwrap_or(HEADER_SETS[0]);
    let id = header(headers, id_name)?;
    let timestamp_text = header(headers, timestamp_name)?;
    let signatures = header(headers, signature_name)?;
    let timestamp: i64 = timestamp_text
        .parse()
        .map_err(|_| SignatureError::Malformed(timestamp_name))?;
    check_tolerance(timestamp, now, source.tolerance_secs)?;
    Ok((id, timestamp_text, signatures))
}

/// What can be checked before the body is read.
pub(crate) fn precheck(
    source: &Receiver,
    headers: &HeaderMap,
    now: i64,
) -> Result<(), SignatureError> {
    signing_headers(source, headers, now).map(|_| ())
}

pub(crate) fn verify<'h>(
    source: &Receiver,
    headers: &'h HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<&'h str, SignatureError> {
    let (id, timestamp_text, signatures) = signing_headers(source, headers, now)?;
    let candidates = parse_signatures(signatures);
    let signed = [id.as_bytes(), b".", timestamp_text.as_bytes(), b".", body];
    if any_matches(&source.keys, &signed, &candidates) {
        Ok(id)
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// The `v1` entries of a space-separated signature list, base64-decoded (an entry that is not
/// base64 decodes to nothing and never matches). Other versions are ignored.
pub(crate) fn parse_signatures(list: &str) -> Vec<Vec<u8>> {
    list.split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .map(|sig| {
            base64::engine::general_purpose::STANDARD
                .decode(sig)
                .unwrap_or_default()
        })
        .collect()
}

/// Reads an authentic delivery: `settlement.<kind>` types become one event, other types are
/// ignored, and facts that do not validate are kept as received with their error.
pub(crate) fn adapt(
    source: &Receiver,
    message_id: &str,
    body: &[u8],
) -> Result<Adapted, Unparseable> {
    let external_id = ExternalId::parse(message_id)
        .map_err(|_| Unparseable("webhook-id is not a usable event id"))?;
    let value: Value = serde_json::from_slice(body).map_err(|_| Unparseable("body is not JSON"))?;
    let envelope = value
        .as_object()
        .ok_or(Unparseable("body is not a JSON object"))?;
    let event_type = envelope
        .get("type")
        .and_then(Value::as_str)
        .ok_or(Unparseable("missing string field `type`"))?;
    let Some(kind_text) = event_type.strip_prefix("settlement.") else {
        return Ok(Adapted::Ignored(Ignore::NotSettlement));
    };
    let data = envelope.get("data");
    let facts = match (Kind::parse(kind_text), data) {
        (None, _) => Err(FactsError::UnknownKind(kind_text.to_owned())),
        (Some(kind), Some(Value::Object(data))) => SettlementEvent::from_canonical(kind, data),
        (Some(_), None | Some(Value::Null)) => Err(FactsError::Missing("data")),
        (Some(_), Some(_)) => Err(FactsError::WrongType {
            field: "data",
            expected: "an object",
        }),
    };
    let content = match facts {
        Ok(event) => Content::Valid(event),
        Err(error) => Content::Invalid(InvalidFacts {
            kind: Some(kind_text.to_owned()),
            error,
            fingerprint: Fingerprint::of_unvalidated(
                "standard",
                &json!({"type": event_type, "data": data}),
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

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn source(secrets: &[&str]) -> Receiver {
        Receiver {
            name: SourceName::parse("std").expect("name"),
            tolerance_secs: 300,
            keys: secrets
                .iter()
                .map(|s| signing_key(s).expect("a valid secret"))
                .collect(),
        }
    }

    fn headers(prefix: &str, id: &str, timestamp: &str, signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("id", id),
            ("timestamp", timestamp),
            ("signature", signature),
        ] {
            let name: http::HeaderName = format!("{prefix}-{name}").parse().expect("name");
            headers.insert(name, HeaderValue::from_str(value).expect("value"));
        }
        headers
    }

    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TS: i64 = 1_614_265_330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn public_test_vector_verifies_with_both_header_sets() {
        let source = source(&[VECTOR_SECRET]);
        for prefix in ["webhook", "svix"] {
            let headers = headers(prefix, VECTOR_ID, &VECTOR_TS.to_string(), VECTOR_SIG);
            assert_eq!(
                verify(&source, &headers, VECTOR_BODY, VECTOR_TS),
                Ok(VECTOR_ID),
                "{prefix}"
            );
        }
    }

    #[test]
    fn any_listed_signature_and_any_active_secret_may_match() {
        let rotated = source(&["whsec_b2xkIHNlY3JldCBrZXk=", VECTOR_SECRET]);
        let list = format!("v1,AAAA v2,xyz {VECTOR_SIG}");
        let headers = headers("webhook", VECTOR_ID, &VECTOR_TS.to_string(), &list);
        assert_eq!(
            verify(&rotated, &headers, VECTOR_BODY, VECTOR_TS),
            Ok(VECTOR_ID)
        );
    }

    #[test]
    fn forged_empty_stale_and_missing_signatures_fail() {
        let source = source(&[VECTOR_SECRET]);
        let ts = VECTOR_TS.to_string();
        let check = |headers: HeaderMap, body: &[u8], now: i64, want: SignatureError| {
            assert_eq!(verify(&source, &headers, body, now), Err(want));
        };
        check(
            headers("webhook", VECTOR_ID, &ts, "v1,"),
            VECTOR_BODY,
            VECTOR_TS,
            SignatureError::Mismatch,
        );
        check(
            headers("webhook", VECTOR_ID, &ts, "v1"),
            VECTOR_BODY,
            VECTOR_TS,
            SignatureError::Mismatch,
        );
        check(
            headers("webhook", VECTOR_ID, &ts, &VECTOR_SIG[..20]),
            VECTOR_BODY,
            VECTOR_TS,
            SignatureError::Mismatch,
        );
        check(
            headers("webhook", VECTOR_ID, &ts, VECTOR_SIG),
            br#"{"test": 2432232315}"#,
            VECTOR_TS,
            SignatureError::Mismatch,
        );
        check(
            headers("webhook", "msg_other", &ts, VECTOR_SIG),
            VECTOR_BODY,
            VECTOR_TS,
            SignatureError::Mismatch,
        );
        check(
            headers("webhook", VECTOR_ID, &ts, VECTOR_SIG),
            VECTOR_BODY,
            VECTOR_TS + 301,
            SignatureError::OutOfTolerance,
        );
        check(
            headers("webhook", VECTOR_ID, &ts, VECTOR_SIG),
            VECTOR_BODY,
            VECTOR_TS - 301,
            SignatureError::OutOfTolerance,
        );
        check(
            headers("webhook", VECTOR_ID, "soon", VECTOR_SIG),
            VECTOR_BODY,
            VECTOR_TS,
            SignatureError::Malformed("webhook-timestamp"),
        );
        check(
            HeaderMap::new(),
            VECTOR_BODY,
            VECTOR_TS,
            SignatureError::Missing("webhook-id"),
        );
        let other_secret = source_with("whsec_b2xkIHNlY3JldCBrZXk=");
        let headers = headers("webhook", VECTOR_ID, &ts, VECTOR_SIG);
        assert_eq!(
            verify(&other_secret, &headers, VECTOR_BODY, VECTOR_TS),
            Err(SignatureError::Mismatch)
        );
    }

    fn source_with(secret: &str) -> Receiver {
        source(&[secret])
    }

    proptest::proptest! {
        #[test]
        fn the_signature_list_parser_never_panics(list in ".{0,300}") {
            let _ = parse_signatures(&list);
        }

        #[test]
        fn every_v1_signature_is_parsed(sigs in proptest::collection::vec(proptest::array::uniform32(0u8..), 0..5)) {
            let list: Vec<String> = sigs
                .iter()
                .flat_map(|s| [format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(s)), "v2,zz".into()])
                .collect();
            let parsed = parse_signatures(&list.join(" "));
            proptest::prop_assert_eq!(parsed, sigs.iter().map(|s| s.to_vec()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn bad_secrets_are_refused() {
        for bad in ["whsec_!!!", "whsec_", ""] {
            assert!(signing_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn adapts_types() {
        let source = source(&[VECTOR_SECRET]);
        let ignored = adapt(&source, "msg_1", br#"{"type": "invoice.paid", "data": {}}"#);
        assert!(matches!(
            ignored,
            Ok(Adapted::Ignored(Ignore::NotSettlement))
        ));
        let unknown = adapt(
            &source,
            "msg_1",
            br#"{"type": "settlement.bonus", "data": {}}"#,
        );
        let Ok(Adapted::Events(events)) = unknown else {
            panic!("{unknown:?}")
        };
        assert!(
            matches!(&events[0].content, Content::Invalid(i) if i.error == FactsError::UnknownKind("bonus".into()))
        );
        assert!(matches!(
            adapt(&source, "msg_1", b"not json"),
            Err(Unparseable(_))
        ));
        assert!(matches!(
            adapt(&source, "msg_1", br#"{"data": {}}"#),
            Err(Unparseable(_))
        ));
        assert!(matches!(
            adapt(&source, "msg_1", br#"[1]"#),
            Err(Unparseable(_))
        ));
    }
}
