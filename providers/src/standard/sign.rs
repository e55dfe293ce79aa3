//! Deliveries signed the way a Standard Webhooks sender signs them, written from the
//! specification (standardwebhooks.com), independently of the verification in `receive`. Used by
//! `settle demo`, the load generator and the tests.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Now, in Unix seconds, as a timestamp header carries it.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// `v1,` + base64(HMAC-SHA256(base64-decoded secret, "{id}.{ts}.{body}")).
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    // Secrets are checked when configuration loads; an invalid one signs with an empty key.
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap_or_default();
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!("v1,{signature}")
}

/// The three `webhook-*` headers of a delivery.
pub fn headers(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Vec<(String, String)> {
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        (
            "webhook-signature".into(),
            signature(secret, id, timestamp, body),
        ),
    ]
}
