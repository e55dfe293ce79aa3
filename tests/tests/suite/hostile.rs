//! The hostile-input matrix against a real `settle ingress` process, for every provider: each
//! delivery gets its exact status, nothing is written, and no secret reaches the logs.

use std::time::Duration;

use serde_json::Value;
use tests::TestDb;
use tests::app::{
    ADYEN_KEY, ADYEN_KEY_OLD, AppOptions, FINANCE_TOKEN, OPS_TOKEN, STANDARD_SECRET,
    STANDARD_SECRET_OLD, STANDARD_SECRET_UNKNOWN, STRIPE_SECRET, STRIPE_SECRET_OLD, charge,
    config_toml,
};
use tests::process::{Scratch, free_port, spawn_settle};
use tests::sign::{adyen_item, adyen_notification, now, standard_headers, stripe_header};

const UNKNOWN_ADYEN_KEY: &str = "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789";

/// One delivery and what it must get.
struct Case {
    name: String,
    path: &'static str,
    headers: Vec<(String, String)>,
    content_type: &'static str,
    body: String,
    status: u16,
    code: &'static str,
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
            signed(STANDARD_SECRET, now() - 301, &body),
            &body,
            401,
            "timestamp_out_of_tolerance",
        ),
        case(
            "standard future",
            path,
            signed(STANDARD_SECRET, now() + 301, &body),
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
            signed(STRIPE_SECRET, now() - 301, body),
            body,
            401,
            "timestamp_out_of_tolerance",
        ),
        case(
            "stripe future",
            path,
            signed(STRIPE_SECRET, now() + 301, body),
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

/// Adyen signs fields inside the body and no timestamp: there is no header to strip and no
/// tolerance window; a body that is not a notification cannot be authenticated at all (401).
fn adyen_cases() -> Vec<Case> {
    let path = "/webhooks/adyen";
    let item = adyen_item("CAPTURE", "psp_h", 1130, "EUR", "true");
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
            "adyen revoked key",
            "/webhooks/adyen-rotated",
            vec![],
            &adyen_notification(ADYEN_KEY_OLD, &[item]),
            401,
            "invalid_signature",
        ),
    ]
}

#[tokio::test]
async fn every_provider_refuses_hostile_deliveries_exactly_and_logs_no_secret_or_token() {
    let db = TestDb::create().await;
    let scratch = Scratch::new();
    let port = free_port();
    let rotated = format!(
        "body_bytes_max = 4096\n\
         [[sources]]\nname = \"std-rotated\"\nprovider = \"standard\"\nsecrets = [\"{STANDARD_SECRET}\"]\n\
         [[sources]]\nname = \"stripe-rotated\"\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         [[sources]]\nname = \"adyen-rotated\"\nprovider = \"adyen\"\nsecrets = [\"{ADYEN_KEY}\"]\n"
    );
    let options = AppOptions {
        extra: rotated,
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    let listen = format!("127.0.0.1:{port}");
    let _serve = spawn_settle(
        &scratch,
        "serve",
        &config,
        &db.url,
        &["serve", "--listen", &listen],
        &[("RUST_LOG", "debug")],
    );
    let http = reqwest::Client::new();
    let base = format!("http://{listen}");
    for _ in 0..600 {
        if http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let cases: Vec<Case> = standard_cases()
        .into_iter()
        .chain(stripe_cases())
        .chain(adyen_cases())
        .collect();
    // 100 of each would be the chaos suite's job; here each case is sent 3 times.
    for case in &cases {
        for _ in 0..3 {
            let mut request = http
                .post(format!("{base}{}", case.path))
                .header("content-type", case.content_type)
                .body(case.body.clone());
            for (name, value) in &case.headers {
                request = request.header(name.as_str(), value.as_str());
            }
            let response = request.send().await.expect("sent");
            let status = response.status().as_u16();
            let json: Value = response.json().await.unwrap_or(Value::Null);
            assert_eq!(status, case.status, "{}", case.name);
            assert_eq!(json["error"], case.code, "{}", case.name);
        }
    }

    let pool = db.pool().await;
    let written: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM settlement_events) + (SELECT count(*) FROM event_conflicts)
              + (SELECT count(*) FROM apalis.jobs)",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(written, 0, "no refused delivery wrote anything");

    // The rotated-in secrets pass on the same sources.
    let body = charge("ch_rot", "10.00", "0.30", "9.70");
    let mut request = http
        .post(format!("{base}/webhooks/std-rotated"))
        .header("content-type", "application/json")
        .body(body.clone());
    for (name, value) in standard_headers(STANDARD_SECRET, "msg_rot", now(), body.as_bytes()) {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.expect("sent").status().as_u16(), 200);
    let notification = adyen_notification(
        ADYEN_KEY,
        &[adyen_item("CAPTURE", "psp_rot", 100, "EUR", "true")],
    );
    let response = http
        .post(format!("{base}/webhooks/adyen-rotated"))
        .header("content-type", "application/json")
        .body(notification)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.text().await.expect("body"), "[accepted]");

    // The API, with good, wrong and under-privileged tokens.
    for (token, read, act) in [
        (OPS_TOKEN, 200, 200),
        (FINANCE_TOKEN, 200, 403),
        ("wrong-token", 401, 401),
    ] {
        let response = http
            .get(format!("{base}/api/dead-letters"))
            .bearer_auth(token)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status().as_u16(), read);
        let response = http
            .post(format!("{base}/api/dead-letters/requeue"))
            .bearer_auth(token)
            .json(&serde_json::json!({"dry_run": true}))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status().as_u16(), act);
    }
    for token in [OPS_TOKEN, FINANCE_TOKEN] {
        assert!(
            !scratch.logs().contains(token),
            "a token appeared in the logs"
        );
    }

    let logs = scratch.logs();
    assert!(
        logs.contains("delivery refused"),
        "the refusals were logged"
    );
    let standard_key = STANDARD_SECRET.trim_start_matches("whsec_");
    for secret in [
        STANDARD_SECRET,
        standard_key,
        STANDARD_SECRET_OLD,
        STRIPE_SECRET,
        STRIPE_SECRET_OLD,
        ADYEN_KEY,
        ADYEN_KEY_OLD,
    ] {
        assert!(!logs.contains(secret), "a secret appeared in the logs");
        assert!(
            !logs.to_lowercase().contains(&secret.to_lowercase()),
            "a secret appeared in the logs"
        );
    }
    // `charge()` bodies carry the reference "order-42": no payload field reaches the logs.
    assert!(!logs.contains("order-42"), "no payload in the logs");
}
