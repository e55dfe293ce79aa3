//! Notifications signed the way Adyen signs them, written from Adyen's documentation
//! (docs.adyen.com, "Verify HMAC signatures"), independently of the verification in `receive`.
//! Used by `settle demo`, the load generator and the tests.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// A notification item (`success` as given) of merchant account `TestMerchant`.
pub fn item(
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

/// A PSP reference of Adyen's form (16 letters and digits) standing for `name`: for
/// `{run}-{n}` (event `n` of a load run) the run's [`reference_prefix`] then `n` in 8 digits, so
/// a run's references share their first 8 characters; else the first 16 hex digits of the
/// name's SHA-256, in capitals.
pub fn reference(name: &str) -> String {
    if let Some((run, n)) = name.rsplit_once('-')
        && let Ok(n) = n.parse::<u32>()
        && n < 100_000_000
    {
        return format!("{}{n:08}", reference_prefix(run));
    }
    hex_of(name)[..16].to_owned()
}

/// The first 8 characters of every [`reference`] of a load run's events.
pub fn reference_prefix(run: &str) -> String {
    hex_of(run)[..8].to_owned()
}

fn hex_of(name: &str) -> String {
    use sha2::Digest;
    hex::encode_upper(Sha256::digest(name.as_bytes()))
}

/// An item's signing string, and its base64 HMAC-SHA256 under the hex key.
pub fn signature(key_hex: &str, item: &serde_json::Value) -> String {
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
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).expect("any key length");
    mac.update(signing.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// A notification body with each item signed under `key_hex`.
pub fn notification(key_hex: &str, items: &[serde_json::Value]) -> String {
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            item["additionalData"] =
                serde_json::json!({"hmacSignature": signature(key_hex, &item)});
            serde_json::json!({"NotificationRequestItem": item})
        })
        .collect();
    serde_json::json!({"live": "false", "notificationItems": items}).to_string()
}
