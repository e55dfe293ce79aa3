//! Requests signed the way each provider signs them, written from the providers' documentation
//! (independently of the ingress' own verification code).

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// Standard Webhooks: `v1,` + base64(HMAC-SHA256(base64-decoded secret, "{id}.{ts}.{body}")).
pub fn standard_signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .expect("base64 secret");
    let mut message = format!("{id}.{timestamp}.").into_bytes();
    message.extend_from_slice(body);
    let signature = base64::engine::general_purpose::STANDARD.encode(hmac_sha256(&key, &message));
    format!("v1,{signature}")
}

/// The three `webhook-*` headers of a Standard Webhooks delivery.
pub fn standard_headers(
    secret: &str,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(String, String)> {
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        (
            "webhook-signature".into(),
            standard_signature(secret, id, timestamp, body),
        ),
    ]
}
