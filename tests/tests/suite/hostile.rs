//! The hostile-input matrix (`tests::hostile`) against a real `settle serve` process, for every
//! provider: each delivery gets its exact status, nothing is written, and no secret reaches the
//! logs.

use std::time::Duration;

use tests::TestDb;
use tests::app::{
    ADYEN_KEY, AppOptions, FINANCE_TOKEN, OPS_TOKEN, STANDARD_SECRET, charge, config_toml,
};
use tests::hostile;
use tests::process::{Listen, Scratch, spawn_settle};
use tests::sign::{adyen_item, adyen_notification, now, standard_headers};

#[tokio::test]
async fn every_provider_refuses_hostile_deliveries_exactly_and_logs_no_secret_or_token() {
    let db = TestDb::create().await;
    let scratch = Scratch::new();
    let options = AppOptions {
        extra: hostile::config_extra(),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    let listen = Listen::new();
    let _serve = spawn_settle(
        &scratch,
        "serve",
        &config,
        &db.url,
        &listen.args("serve"),
        // Text logs: a line a request could forge would show there.
        &[("RUST_LOG", "debug"), ("SETTLE_LOG__FORMAT", "text")],
    );
    let http = reqwest::Client::new();
    let base = listen.base();
    let ops = listen.ops_base();
    for _ in 0..600 {
        if http
            .get(format!("{ops}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let cases = hostile::all_cases();
    // 100 of each, under load, is the chaos suite's job; here each case is sent 3 times.
    for case in &cases {
        for _ in 0..3 {
            let (status, json) = hostile::send(&http, &base, case).await;
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
        &[adyen_item(
            "CAPTURE",
            "PSPROT0000000000",
            100,
            "EUR",
            "true",
        )],
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
            .get(format!("{ops}/api/dead-letters"))
            .bearer_auth(token)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status().as_u16(), read);
        let response = http
            .post(format!("{ops}/api/dead-letters/requeue"))
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

    // A path whose source segment decodes to a newline and a forged log line.
    let response = http
        .post(format!(
            "{base}/webhooks/std%0A2026-01-01T00:00:00Z%20INFO%20forged"
        ))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 404);

    let logs = scratch.logs();
    assert!(
        logs.contains("delivery refused"),
        "the refusals were logged"
    );
    assert!(
        logs.contains("source=unknown"),
        "an unknown source is logged as such"
    );
    assert!(
        !logs
            .lines()
            .any(|line| line.starts_with("2026-01-01T00:00:00Z INFO forged")),
        "no request forged a log line"
    );
    for secret in hostile::secrets() {
        assert!(!logs.contains(secret), "a secret appeared in the logs");
        assert!(
            !logs.to_lowercase().contains(&secret.to_lowercase()),
            "a secret appeared in the logs"
        );
    }
    // `charge()` bodies carry the reference "order-42": no payload field reaches the logs.
    assert!(!logs.contains("order-42"), "no payload in the logs");
}
