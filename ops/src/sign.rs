//! Deliveries signed the way each provider signs them, written from the providers' documentation
//! (independently of the ingress' verification code). Used by `settle demo`, the load generator
//! and the test suite.

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
    // Secrets are checked when configuration loads; an invalid one signs with an empty key.
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap_or_default();
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

/// Stripe: `t=<unix>,v1=<hex HMAC-SHA256(UTF-8 bytes of the whole secret, "{t}.{body}")>`.
pub fn stripe_header(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut message = format!("{timestamp}.").into_bytes();
    message.extend_from_slice(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(hmac_sha256(secret.as_bytes(), &message))
    )
}

/// An Adyen notification item (`success` as given).
pub fn adyen_item(
    event_code: &str,
    psp_reference: &str,
    value: i64,
    currency: &str,
    success: &str,
) -> serde_json::Value {
    serde_json::json!({
        "amount": {"currency": currency, "value": value},
        "eventCode": event_code, "eventDate": "2026-11-30T12:00:00+01:00",
        "merchantAccountCode": "TestMerchant", "merchantReference": "order-42",
        "originalReference": "", "pspReference": psp_reference, "reason": "", "success": success,
    })
}

/// Adyen's signing string for an item, and its base64 HMAC-SHA256 under the hex key.
pub fn adyen_signature(key_hex: &str, item: &serde_json::Value) -> String {
    let text = |key: &str| {
        item.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let amount = &item["amount"];
    let value = match &amount["value"] {
        serde_json::Value::Null => String::new(),
        value => value.to_string(),
    };
    let signing = [
        text("pspReference"),
        text("originalReference"),
        text("merchantAccountCode"),
        text("merchantReference"),
        value,
        amount["currency"].as_str().unwrap_or("").to_owned(),
        text("eventCode"),
        text("success"),
    ]
    .join(":");
    let key = hex::decode(key_hex).unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(hmac_sha256(&key, signing.as_bytes()))
}

/// A notification body with each item signed under `key_hex`.
pub fn adyen_notification(key_hex: &str, items: &[serde_json::Value]) -> String {
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            item["additionalData"] =
                serde_json::json!({"hmacSignature": adyen_signature(key_hex, &item)});
            serde_json::json!({"NotificationRequestItem": item})
        })
        .collect();
    serde_json::json!({"live": "false", "notificationItems": items}).to_string()
}
