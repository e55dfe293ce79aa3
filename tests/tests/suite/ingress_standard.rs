//! The record path for the `standard` provider, through a real socket, on real PostgreSQL.

use std::time::Duration;

use serde_json::{Value, json};
use tests::TestApp;
use tests::app::{
    STANDARD_SECRET, STANDARD_SECRET_OLD, STANDARD_SECRET_UNKNOWN, canonical, charge,
    spawn_ingress_with,
};
use tests::sign::{now, standard_headers, standard_signature};

async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.expect("JSON body");
    (status, body)
}

/// A refused delivery: name, path, headers, body, expected status and error code.
type Case<'a> = (
    &'a str,
    &'a str,
    Vec<(String, String)>,
    String,
    u16,
    &'a str,
);

async fn assert_nothing_written(app: &TestApp) {
    assert_eq!(app.count("settlement_events").await, 0, "no event");
    assert_eq!(app.count("event_conflicts").await, 0, "no conflict");
    assert_eq!(app.jobs().await, 0, "no job");
}

#[tokio::test]
async fn a_new_delivery_records_one_event_and_one_job() {
    let app = spawn_ingress_with("").await;
    let (status, body) = json_of(
        app.post_standard("msg_1", &charge("ch_1", "100.00", "3.20", "96.80"))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "recorded");
    let event_id = body["event_id"].as_i64().expect("event id");

    assert_eq!(app.count("settlement_events").await, 1);
    assert_eq!(app.jobs().await, 1);
    let (source, external_id, status, kind, facts, job_payload): (
        String,
        String,
        String,
        String,
        Value,
        String,
    ) = sqlx::query_as(
        "SELECT e.source, e.external_id, e.status, e.kind, e.facts, convert_from(j.job, 'UTF8')
             FROM settlement_events e JOIN apalis.jobs j ON j.id = e.job_id WHERE e.id = $1",
    )
    .bind(event_id)
    .fetch_one(app.pg())
    .await
    .expect("event with its job");
    assert_eq!(
        (
            source.as_str(),
            external_id.as_str(),
            status.as_str(),
            kind.as_str()
        ),
        ("std", "msg_1", "recorded", "charge_settled")
    );
    assert_eq!(facts["gross"], "100.00");
    assert_eq!(facts["net"], "96.80");
    let job: Value = serde_json::from_str(&job_payload).expect("job payload is JSON");
    assert_eq!(job, json!({"event_id": event_id}));
}

#[tokio::test]
async fn a_reformatted_redelivery_is_a_duplicate_and_writes_nothing() {
    let app = spawn_ingress_with("").await;
    let first = charge("ch_1", "100.00", "3.20", "96.80");
    let (_, body) = json_of(app.post_standard("msg_1", &first).await).await;
    let event_id = body["event_id"].clone();

    // Other key order, other whitespace, "100.0" for "100.00", another timestamp and signature.
    let again = r#"{ "data": {"net": "96.8", "fee": "3.2", "gross": "100.0", "currency": "USD",
        "reference": "order-42", "payout_id": "po_9", "occurred_at": "2026-11-30T12:59:00+01:00",
        "movement_id": "ch_1"}, "timestamp": "2026-12-01T09:00:00Z", "type": "settlement.charge_settled" }"#;
    let headers = standard_headers(STANDARD_SECRET, "msg_1", now() - 100, again.as_bytes());
    let (status, body) = json_of(app.post("/webhooks/std", &headers, again).await).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "duplicate");
    assert_eq!(body["event_id"], event_id);
    assert_eq!(app.count("settlement_events").await, 1);
    assert_eq!(app.jobs().await, 1);
    assert_eq!(app.count("event_conflicts").await, 0);
}

#[tokio::test]
async fn a_changed_amount_under_the_same_key_is_a_conflict_kept_once() {
    let app = spawn_ingress_with("").await;
    let (_, body) = json_of(
        app.post_standard("msg_1", &charge("ch_1", "100.00", "3.20", "96.80"))
            .await,
    )
    .await;
    let event_id = body["event_id"].clone();
    let changed = charge("ch_1", "100.01", "3.20", "96.81");
    for delivery in 1..=2 {
        let (status, body) = json_of(app.post_standard("msg_1", &changed).await).await;
        assert_eq!(status, 409, "delivery {delivery}");
        assert_eq!(body["error"], "event_conflict");
        assert_eq!(body["event_id"], event_id);
    }
    let (gross, conflicts, deliveries): (String, i64, i32) = sqlx::query_as(
        "SELECT e.facts->>'gross', (SELECT count(*) FROM event_conflicts),
                (SELECT deliveries FROM event_conflicts LIMIT 1)
         FROM settlement_events e",
    )
    .fetch_one(app.pg())
    .await
    .expect("rows");
    assert_eq!(gross, "100.00", "the original is untouched");
    assert_eq!(conflicts, 1, "identical conflicting redeliveries collapse");
    assert_eq!(deliveries, 2);
    assert_eq!(app.jobs().await, 1);
}

#[tokio::test]
async fn every_rejection_has_its_status_and_writes_nothing() {
    let app = spawn_ingress_with("body_bytes_max = 4096").await;
    let body = charge("ch_1", "100.00", "3.20", "96.80");
    let signed = |secret: &str, ts: i64, bytes: &[u8]| standard_headers(secret, "msg_1", ts, bytes);
    let with_signature = |signature: &str| {
        let mut headers = signed(STANDARD_SECRET, now(), body.as_bytes());
        headers[2].1 = signature.to_owned();
        headers
    };
    let mut flipped = body.clone().into_bytes();
    flipped[20] ^= 0x01;
    let flipped = String::from_utf8(flipped).expect("still text");
    let big = format!("{{\"type\": \"x\", \"pad\": \"{}\"}}", "x".repeat(5000));
    let valid_signature = standard_signature(STANDARD_SECRET, "msg_1", now(), body.as_bytes());
    let truncated = valid_signature[..valid_signature.len() - 4].to_owned();

    let cases: Vec<Case> = vec![
        (
            "unknown source",
            "/webhooks/nope",
            signed(STANDARD_SECRET, now(), body.as_bytes()),
            body.clone(),
            404,
            "unknown_source",
        ),
        (
            "missing headers",
            "/webhooks/std",
            vec![],
            body.clone(),
            401,
            "missing_signature",
        ),
        (
            "garbage signature",
            "/webhooks/std",
            with_signature("garbage"),
            body.clone(),
            401,
            "invalid_signature",
        ),
        (
            "empty v1 signature",
            "/webhooks/std",
            with_signature("v1,"),
            body.clone(),
            401,
            "invalid_signature",
        ),
        (
            "truncated signature",
            "/webhooks/std",
            with_signature(&truncated),
            body.clone(),
            401,
            "invalid_signature",
        ),
        (
            "wrong secret",
            "/webhooks/std",
            signed(STANDARD_SECRET_UNKNOWN, now(), body.as_bytes()),
            body.clone(),
            401,
            "invalid_signature",
        ),
        (
            "flipped byte",
            "/webhooks/std",
            signed(STANDARD_SECRET, now(), body.as_bytes()),
            flipped,
            401,
            "invalid_signature",
        ),
        (
            "stale",
            "/webhooks/std",
            signed(STANDARD_SECRET, now() - 301, body.as_bytes()),
            body.clone(),
            401,
            "timestamp_out_of_tolerance",
        ),
        (
            "future",
            "/webhooks/std",
            // Signed when the list is built and sent later: 30 s of slack, or a busy machine
            // lets the clock catch up with a timestamp 301 s ahead before it is sent.
            signed(STANDARD_SECRET, now() + 330, body.as_bytes()),
            body.clone(),
            401,
            "timestamp_out_of_tolerance",
        ),
        (
            "too large",
            "/webhooks/std",
            signed(STANDARD_SECRET, now(), big.as_bytes()),
            big.clone(),
            413,
            "payload_too_large",
        ),
        (
            "not JSON",
            "/webhooks/std",
            signed(STANDARD_SECRET, now(), b"hello"),
            "hello".into(),
            400,
            "unparseable_payload",
        ),
        (
            "no type",
            "/webhooks/std",
            signed(STANDARD_SECRET, now(), b"{\"data\":{}}"),
            "{\"data\":{}}".into(),
            400,
            "unparseable_payload",
        ),
    ];
    for (name, path, headers, body, status, code) in cases {
        let (got, json) = json_of(app.post(path, &headers, &body).await).await;
        assert_eq!(got, status, "{name}");
        assert_eq!(json["error"], code, "{name}");
        assert!(
            json["message"]
                .as_str()
                .is_some_and(|m| !m.contains("whsec")),
            "{name}"
        );
    }

    let headers = signed(STANDARD_SECRET, now(), body.as_bytes());
    let mut request = app
        .http
        .post(app.url("/webhooks/std"))
        .header("content-type", "text/plain")
        .body(body.clone());
    for (name, value) in &headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let (status, json) = json_of(request.send().await.expect("sent")).await;
    assert_eq!(
        (status, json["error"].as_str()),
        (415, Some("unsupported_media_type"))
    );

    assert_nothing_written(&app).await;
}

#[tokio::test]
async fn both_rotated_secrets_and_svix_headers_are_accepted() {
    let app = spawn_ingress_with("").await;
    for (id, secret) in [
        ("msg_new", STANDARD_SECRET),
        ("msg_old", STANDARD_SECRET_OLD),
    ] {
        let body = charge(&format!("ch_{id}"), "10.00", "0.30", "9.70");
        let headers = standard_headers(secret, id, now(), body.as_bytes());
        let (status, json) = json_of(app.post("/webhooks/std", &headers, &body).await).await;
        assert_eq!(
            (status, json["status"].as_str()),
            (200, Some("recorded")),
            "{id}"
        );
    }
    let body = charge("ch_svix", "10.00", "0.30", "9.70");
    let svix: Vec<(String, String)> =
        standard_headers(STANDARD_SECRET, "msg_svix", now(), body.as_bytes())
            .into_iter()
            .map(|(name, value)| (name.replace("webhook-", "svix-"), value))
            .collect();
    let (status, json) = json_of(app.post("/webhooks/std", &svix, &body).await).await;
    assert_eq!((status, json["status"].as_str()), (200, Some("recorded")));
    assert_eq!(app.count("settlement_events").await, 3);
}

#[tokio::test]
async fn other_types_are_ignored_and_invalid_facts_are_recorded_for_a_person() {
    let app = spawn_ingress_with("").await;
    let ignored = json!({"type": "invoice.paid", "data": {"id": "in_1"}}).to_string();
    let (status, json) = json_of(app.post_standard("msg_ignored", &ignored).await).await;
    assert_eq!((status, json["status"].as_str()), (200, Some("ignored")));
    assert_nothing_written(&app).await;

    let cases = [
        (
            "msg_net",
            charge("ch_1", "100.00", "3.20", "96.00"),
            "net 96.00 is not gross 100.00 minus fee 3.20",
        ),
        (
            "msg_cur",
            canonical(
                "fee",
                json!({"movement_id": "f", "occurred_at": "2026-11-30T11:59:00Z", "currency": "XYZ", "amount": "1.00"}),
            ),
            "unknown currency",
        ),
        (
            "msg_dp",
            canonical(
                "fee",
                json!({"movement_id": "f", "occurred_at": "2026-11-30T11:59:00Z", "currency": "JPY", "amount": "1.5"}),
            ),
            "more decimals",
        ),
        (
            "msg_float",
            canonical(
                "fee",
                json!({"movement_id": "f", "occurred_at": "2026-11-30T11:59:00Z", "currency": "USD", "amount": 1.5}),
            ),
            "must be a string",
        ),
        (
            "msg_kind",
            canonical("bonus", json!({})),
            "unknown settlement kind",
        ),
    ];
    for (id, body, error) in &cases {
        let (status, json) = json_of(app.post_standard(id, body).await).await;
        assert_eq!(
            (status, json["status"].as_str()),
            (200, Some("recorded")),
            "{id}"
        );
        let stored: (Option<String>, Option<Value>) = sqlx::query_as(
            "SELECT validation_error, facts FROM settlement_events WHERE external_id = $1",
        )
        .bind(id)
        .fetch_one(app.pg())
        .await
        .expect("stored");
        assert!(
            stored.0.as_deref().is_some_and(|e| e.contains(error)),
            "{id}: {stored:?}"
        );
        assert_eq!(stored.1, None, "{id}");
        // Redelivering the same invalid event is a duplicate, not a new row.
        let (status, json) = json_of(app.post_standard(id, body).await).await;
        assert_eq!(
            (status, json["status"].as_str()),
            (200, Some("duplicate")),
            "{id}"
        );
    }
    assert_eq!(app.count("settlement_events").await, cases.len() as i64);
    assert_eq!(
        app.jobs().await,
        cases.len() as i64,
        "each invalid event has its job"
    );
}

#[tokio::test]
async fn fifty_concurrent_identical_deliveries_record_once() {
    let app = spawn_ingress_with("").await;
    let body = charge("ch_1", "100.00", "3.20", "96.80");
    let responses =
        futures::future::join_all((0..50).map(|_| app.post_standard("msg_race", &body))).await;
    let mut recorded = 0;
    let mut duplicate = 0;
    let mut ids = std::collections::HashSet::new();
    for response in responses {
        let (status, json) = json_of(response).await;
        assert_eq!(status, 200, "{json}");
        match json["status"].as_str() {
            Some("recorded") => recorded += 1,
            Some("duplicate") => duplicate += 1,
            other => panic!("unexpected {other:?}"),
        }
        ids.insert(json["event_id"].as_i64());
    }
    assert_eq!((recorded, duplicate), (1, 49));
    assert_eq!(ids.len(), 1, "every answer names the same event");
    assert_eq!(app.count("settlement_events").await, 1);
    assert_eq!(app.jobs().await, 1);
}

#[tokio::test]
async fn fifty_concurrent_different_deliveries_under_one_key_conflict_without_errors() {
    let app = spawn_ingress_with("").await;
    let bodies: Vec<String> = (0..50)
        .map(|i| {
            charge(
                "ch_1",
                &format!("{}.00", 100 + i),
                "3.00",
                &format!("{}.00", 97 + i),
            )
        })
        .collect();
    let responses = futures::future::join_all(
        bodies
            .iter()
            .map(|body| app.post_standard("msg_race", body)),
    )
    .await;
    let mut statuses = std::collections::BTreeMap::new();
    for response in responses {
        *statuses.entry(response.status().as_u16()).or_insert(0) += 1;
    }
    assert_eq!(statuses, [(200, 1), (409, 49)].into_iter().collect());
    assert_eq!(app.count("settlement_events").await, 1);
    assert_eq!(app.jobs().await, 1);
    assert_eq!(app.count("event_conflicts").await, 49);
}

#[tokio::test]
async fn a_failed_commit_answers_503_and_leaves_no_event() {
    let app = spawn_ingress_with("").await;
    // A deferred constraint trigger runs at COMMIT, after the insert itself succeeded.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_commit() RETURNS trigger AS $$
         BEGIN RAISE EXCEPTION 'commit refused by the test'; END; $$ LANGUAGE plpgsql;
         CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON settlement_events
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit();",
    )
    .execute(app.pg())
    .await
    .expect("install trigger");
    let body = charge("ch_1", "100.00", "3.20", "96.80");
    let response = app.post_standard("msg_1", &body).await;
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let (_, json) = json_of(response).await;
    assert_eq!(json["error"], "unavailable");
    assert!(
        !json["message"]
            .as_str()
            .unwrap_or_default()
            .contains("refused by the test"),
        "no internals leak"
    );
    assert_nothing_written(&app).await;

    sqlx::query("DROP TRIGGER refuse_commit ON settlement_events")
        .execute(app.pg())
        .await
        .expect("drop trigger");
    let (status, json) = json_of(app.post_standard("msg_1", &body).await).await;
    assert_eq!(
        (status, json["status"].as_str()),
        (200, Some("recorded")),
        "the redelivery records it"
    );
}

#[tokio::test]
async fn a_connection_killed_mid_request_answers_503_and_leaves_no_event() {
    let app = spawn_ingress_with("").await;
    // Hold the key in an open transaction so the ingress' insert waits on it, then kill the
    // ingress' backend while it waits.
    let mut blocker = app.pg().begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO settlement_events (source, external_id, status, fingerprint, validation_error, payload, job_id)
         VALUES ('std', 'msg_1', 'recorded', repeat('0', 64), 'held by the test', '{}', 'none')",
    )
    .execute(&mut *blocker)
    .await
    .expect("hold the key");
    let body = charge("ch_1", "100.00", "3.20", "96.80");
    let request = app.post_standard("msg_1", &body);
    let killer = async {
        for _ in 0..200 {
            let killed: Vec<bool> = sqlx::query_scalar(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = 'settle' AND wait_event_type = 'Lock'",
            )
            .fetch_all(app.pg())
            .await
            .expect("terminate");
            if killed.contains(&true) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    };
    let (response, killed) = tokio::join!(request, killer);
    assert!(
        killed,
        "the ingress' insert was seen waiting and was killed"
    );
    assert_eq!(response.status().as_u16(), 503);
    blocker.rollback().await.expect("rollback");
    assert_nothing_written(&app).await;

    let (status, json) = json_of(app.post_standard("msg_1", &body).await).await;
    assert_eq!((status, json["status"].as_str()), (200, Some("recorded")));
    assert_eq!(app.count("settlement_events").await, 1);
}

#[tokio::test]
async fn an_unreachable_database_answers_503_and_readyz_says_so() {
    let app = spawn_ingress_with("[database]\nacquire_timeout_ms = 500").await;
    let ready = app
        .http
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status().as_u16(), 200);
    let health = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status().as_u16(), 200);

    app.pg_db().set_reachable(false).await;
    let response = app
        .post_standard("msg_1", &charge("ch_1", "100.00", "3.20", "96.80"))
        .await;
    assert_eq!(response.status().as_u16(), 503);
    let ready = app
        .http
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status().as_u16(), 503);
    let health = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status().as_u16(), 200, "the process itself is up");

    app.pg_db().set_reachable(true).await;
    let ready = app
        .http
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(
        ready.status().as_u16(),
        200,
        "ready again once the database is back"
    );
    assert_nothing_written(&app).await;
}
