//! The hostile-input matrix for every provider: deliveries that must be refused, each with the
//! exact status and error code it must get. Used by the suite and by the chaos suite (at volume).

use serde_json::Value;

use crate::app::{
    ADYEN_KEY, ADYEN_KEY_OLD, STANDARD_SECRET, STANDARD_SECRET_OLD, STANDARD_SECRET_UNKNOWN,
    STRIPE_API_KEY, STRIPE_SECRET, STRIPE_SECRET_OLD, charge,
};
use crate::sign::{
    adyen_item, adyen_notification, adyen_signature, now, standard_headers, stripe_header,
};

const UNKNOWN_ADYEN_KEY: &str = "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789";

/// One delivery and what it must get.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub path: &'static str,
    pub headers: Vec<(String, String)>,
    pub content_type: &'static str,
    pub body: String,
    pub status: u16,
    pub code: &'static str,
}

fn case(
    name: &str,
    path: &'static str,
    headers: Vec<(String, String)>,
    body: &str,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        name: name.to_owned(),
        path,
        headers,
        content_type: "application/json",
        body: body.to_owned(),
        status,
        code,
    }
}

fn flip_a_byte(body: &str) -> String {
    let mut bytes = body.as_bytes().to_vec();
    let at = bytes
        .iter()
        .position(|b| b.is_ascii_digit())
        .expect("a digit to flip");
    bytes[at] = if bytes[at] == b'9' {
        b'8'
    } else {
        bytes[at] + 1
    };
    String::from_utf8(bytes).expect("text")
}

fn big_body() -> String {
    format!("{{\"type\": \"x\", \"pad\": \"{}\"}}", "x".repeat(5000))
}

fn standard_cases() -> Vec<Case> {
    let path = "/webhooks/std";
    let body = charge("ch_h", "10.00", "0.30", "9.70");
    let signed =
        |secret: &str, ts: i64, body: &str| standard_headers(secret, "msg_h", ts, body.as_bytes());
    let with_signature = |signature: &str| {
        let mut headers = signed(STANDARD_SECRET, now(), &body);
        headers[2].1 = signature.to_owned();
        headers
    };
    let good = signed(STANDARD_SECRET, now(), &body)[2].1.clone();
    let mut wrong_type = case(
        "standard wrong content type",
        path,
        signed(STANDARD_SECRET, now(), &body),
        &body,
        415,
        "unsupported_media_type",
    );
    wrong_type.content_type = "text/plain";
    vec![
        case(
            "standard missing header",
            path,
            vec![],
            &body,
            401,
            "missing_signature",
        ),
        case(
            "standard garbage header",
            path,
            with_signature("garbage"),
            &body,
            401,
            "invalid_signature",
        ),
        case(
            "standard empty v1",
            path,
            with_signature("v1,"),
            &body,
            401,
            "invalid_signature",
        ),
        case(
            "standard truncated",
            path,
            with_signature(&good[..good.len() - 6]),
            &body,
            401,
            "invalid_signature",
        ),
        case(
            "standard wrong secret",
            path,
            signed(STANDARD_SECRET_UNKNOWN, now(), &body),
            &body,
            401,
            "invalid_signature",
        ),
        case(
            "standard flipped byte",
            path,
            signed(STANDARD_SECRET, now(), &body),
            &flip_a_byte(&body),
            401,
            "invalid_signature",
        ),
        case(
            "standard stale",
            path,
            signed(STANDARD_SECRET, now() - 900, &body),
            &body,
            401,
            "timestamp_out_of_tolerance",
        ),
        case(
            "standard future",
            path,
            signed(STANDARD_SECRET, now() + 900, &body),
            &body,
            401,
            "timestamp_out_of_tolerance",
        ),
        case(
            "standard too large",
            path,
            signed(STANDARD_SECRET, now(), &big_body()),
            &big_body(),
            413,
            "payload_too_large",
        ),
        wrong_type,
        case(
            "standard non-JSON",
            path,
            signed(STANDARD_SECRET, now(), "not json"),
            "not json",
            400,
            "unparseable_payload",
        ),
        case(
            "standard revoked secret",
            "/webhooks/std-rotated",
            signed(STANDARD_SECRET_OLD, now(), &body),
            &body,
            401,
            "invalid_signature",
        ),
    ]
}

fn stripe_cases() -> Vec<Case> {
    let path = "/webhooks/stripe";
    let body = r#"{"id":"evt_h","object":"event","type":"payout.paid","created":1764500000,"pending_webhooks":1,"data":{"object":{"id":"po_h","object":"payout","amount":1100,"currency":"usd","arrival_date":1764500000}}}"#;
    let signed = |secret: &str, ts: i64, body: &str| {
        vec![(
            "stripe-signature".to_owned(),
            stripe_header(secret, ts, body.as_bytes()),
        )]
    };
    let header = |value: String| vec![("stripe-signature".to_owned(), value)];
    let good = stripe_header(STRIPE_SECRET, now(), body.as_bytes());
    let mut wrong_type = case(
        "stripe wrong content type",
        path,
        signed(STRIPE_SECRET, now(), body),
        body,
        415,
        "unsupported_media_type",
    );
    wrong_type.content_type = "application/x-www-form-urlencoded";
    vec![
        case(
            "stripe missing header",
            path,
            vec![],
            body,
            401,
            "missing_signature",
        ),
        case(
            "stripe garbage header",
            path,
            header("garbage".into()),
            body,
            401,
            "invalid_signature",
        ),
        case(
            "stripe empty v1",
            path,
            header(format!("t={},v1=", now())),
            body,
            401,
            "invalid_signature",
        ),
        case(
            "stripe truncated",
            path,
            header(good[..good.len() - 6].to_owned()),
            body,
            401,
            "invalid_signature",
        ),
        case(
            "stripe wrong secret",
            path,
            signed("whsec_not_ours", now(), body),
            body,
            401,
            "invalid_signature",
        ),
        case(
            "stripe flipped byte",
            path,
            signed(STRIPE_SECRET, now(), body),
            &flip_a_byte(body),
            401,
            "invalid_signature",
        ),
        case(
            "stripe stale",
            path,
            signed(STRIPE_SECRET, now() - 900, body),
            body,
            401,
            "timestamp_out_of_tolerance",
        ),
        case(
            "stripe future",
            path,
            signed(STRIPE_SECRET, now() + 900, body),
            body,
            401,
            "timestamp_out_of_tolerance",
        ),
        case(
            "stripe too large",
            path,
            signed(STRIPE_SECRET, now(), &big_body()),
            &big_body(),
            413,
            "payload_too_large",
        ),
        wrong_type,
        case(
            "stripe non-JSON",
            path,
            signed(STRIPE_SECRET, now(), "not json"),
            "not json",
            400,
            "unparseable_payload",
        ),
        case(
            "stripe revoked secret",
            "/webhooks/stripe-rotated",
            signed(STRIPE_SECRET_OLD, now(), body),
            body,
            401,
            "invalid_signature",
        ),
    ]
}

/// A genuine item whose merchant reference holds a colon (`ord:7`), signed, and then the colon
/// moved into its PSP reference with every field shifted along: the signed text, and so the
/// signature, are the same, and the PSP reference (the event's key) is new.
fn colon_shifted(item: &Value) -> String {
    let mut genuine = item.clone();
    genuine["merchantReference"] = "ord:7".into();
    let signature = adyen_signature(ADYEN_KEY, &genuine);
    let mut shifted = genuine.clone();
    shifted["pspReference"] = format!("{}:", genuine["pspReference"].as_str().expect("psp")).into();
    shifted["originalReference"] = genuine["merchantAccountCode"].clone();
    shifted["merchantAccountCode"] = "ord".into();
    shifted["merchantReference"] = "7".into();
    assert_eq!(
        adyen_signature(ADYEN_KEY, &shifted),
        signature,
        "the same signed text"
    );
    shifted["additionalData"] = serde_json::json!({"hmacSignature": signature});
    serde_json::json!({"live": "false", "notificationItems": [{"NotificationRequestItem": shifted}]})
        .to_string()
}

/// Adyen signs fields inside the body and no timestamp: there is no header to strip and no
/// tolerance window; a body that is not a notification cannot be authenticated at all (401).
fn adyen_cases() -> Vec<Case> {
    let path = "/webhooks/adyen";
    let item = adyen_item("CAPTURE", "PSPH000000000000", 1130, "EUR", "true");
    let good = adyen_notification(ADYEN_KEY, std::slice::from_ref(&item));
    let with_signature = |signature: &str| {
        let mut body: Value = serde_json::from_str(&good).expect("json");
        body["notificationItems"][0]["NotificationRequestItem"]["additionalData"]["hmacSignature"] =
            signature.into();
        body.to_string()
    };
    let unsigned = {
        let mut body: Value = serde_json::from_str(&good).expect("json");
        body["notificationItems"][0]["NotificationRequestItem"]
            .as_object_mut()
            .expect("item")
            .remove("additionalData");
        body.to_string()
    };
    let signature: Value = serde_json::from_str(&good).expect("json");
    let signature = signature["notificationItems"][0]["NotificationRequestItem"]["additionalData"]
        ["hmacSignature"]
        .as_str()
        .expect("signature")
        .to_owned();
    let mut wrong_type = case(
        "adyen wrong content type",
        path,
        vec![],
        &good,
        415,
        "unsupported_media_type",
    );
    wrong_type.content_type = "text/xml";
    let big = adyen_notification(ADYEN_KEY, &[serde_json::json!({"pad": "x".repeat(5000)})]);
    let colon_shifted = colon_shifted(&item);
    vec![
        case(
            "adyen missing signature",
            path,
            vec![],
            &unsigned,
            401,
            "missing_signature",
        ),
        case(
            "adyen garbage signature",
            path,
            vec![],
            &with_signature("garbage!"),
            401,
            "invalid_signature",
        ),
        case(
            "adyen empty signature",
            path,
            vec![],
            &with_signature(""),
            401,
            "invalid_signature",
        ),
        case(
            "adyen truncated",
            path,
            vec![],
            &with_signature(&signature[..signature.len() - 6]),
            401,
            "invalid_signature",
        ),
        case(
            "adyen wrong key",
            path,
            vec![],
            &adyen_notification(UNKNOWN_ADYEN_KEY, std::slice::from_ref(&item)),
            401,
            "invalid_signature",
        ),
        case(
            "adyen flipped byte",
            path,
            vec![],
            &good.replace("1130", "1131"),
            401,
            "invalid_signature",
        ),
        case(
            "adyen too large",
            path,
            vec![],
            &big,
            413,
            "payload_too_large",
        ),
        wrong_type,
        case(
            "adyen non-JSON",
            path,
            vec![],
            "not json",
            401,
            "missing_signature",
        ),
        case(
            "adyen colon shifted into the PSP reference",
            path,
            vec![],
            &colon_shifted,
            401,
            "invalid_signature",
        ),
        case(
            "adyen revoked key",
            "/webhooks/adyen-rotated",
            vec![],
            &adyen_notification(ADYEN_KEY_OLD, &[item]),
            401,
            "invalid_signature",
        ),
    ]
}

/// Every case of every provider (timestamps signed now: send them within the tolerance window).
pub fn all_cases() -> Vec<Case> {
    standard_cases()
        .into_iter()
        .chain(stripe_cases())
        .chain(adyen_cases())
        .collect()
}

/// The configuration the matrix expects beside the test sources: a 4 KiB body limit and
/// sources holding only the rotated-in secrets.
pub fn config_extra() -> String {
    format!(
        "body_bytes_max = 4096\n\
         [[sources]]\nname = \"std-rotated\"\nprovider = \"standard\"\nsecrets = [\"{STANDARD_SECRET}\"]\n\
         [[sources]]\nname = \"stripe-rotated\"\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         livemode = false\napi_key = \"{STRIPE_API_KEY}\"\nfeed = false\n\
         [[sources]]\nname = \"adyen-rotated\"\nprovider = \"adyen\"\nsecrets = [\"{ADYEN_KEY}\"]\n\
         money_from = \"notifications\"\n"
    )
}

/// Sends `case` to the ingress at `base`; its status and JSON body.
pub async fn send(http: &reqwest::Client, base: &str, case: &Case) -> (u16, Value) {
    let mut request = http
        .post(format!("{base}{}", case.path))
        .header("content-type", case.content_type)
        .body(case.body.clone());
    for (name, value) in &case.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let response = request.send().await.expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every secret of the test configuration, as configured and as keys, for log scans.
pub fn secrets() -> Vec<&'static str> {
    vec![
        STANDARD_SECRET,
        STANDARD_SECRET.trim_start_matches("whsec_"),
        STANDARD_SECRET_OLD,
        STRIPE_SECRET,
        STRIPE_SECRET_OLD,
        ADYEN_KEY,
        ADYEN_KEY_OLD,
        STRIPE_API_KEY,
    ]
}
