//! Pausing a source, on both backends: its deliveries are still verified, recorded and
//! acknowledged while nothing of it posts (no attempt started, none counted) and other sources
//! post as usual; resuming drains it at once; every pause and resume is kept with who and why;
//! the dashboard and the metrics show it; only ops may do it, with a reason, for a configured
//! source.

use std::time::Duration;

use serde_json::json;
use tests::TestApp;
use tests::app::{AppOptions, Backend, FINANCE_TOKEN, OPS_TOKEN, charge, spawn};
use tests::sign::adyen_item;

tests::on_both_backends!(a_paused_source_records_and_acknowledges_and_drains_on_resume);

async fn posted(app: &TestApp, prefix: &str) -> i64 {
    app.scalar(&format!(
        "SELECT count(*) FROM settlement_events WHERE external_id LIKE '{prefix}%' AND status = 'posted'"
    ))
    .await
}

async fn a_paused_source_records_and_acknowledges_and_drains_on_resume(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let pause = |token: &'static str, source: &'static str, reason: &'static str| {
        let app = &app;
        async move {
            app.api_post(
                &format!("/api/sources/{source}/pause"),
                Some(token),
                json!({ "reason": reason }),
            )
            .await
        }
    };
    assert_eq!(pause(FINANCE_TOKEN, "std", "incident").await.0, 403);
    assert_eq!(pause(OPS_TOKEN, "nowhere", "incident").await.0, 404);
    assert_eq!(pause(OPS_TOKEN, "std", " ").await.0, 400);
    let (status, body) = pause(OPS_TOKEN, "std", "bad deploy upstream").await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    let (status, body) = pause(OPS_TOKEN, "std", "bad deploy upstream").await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(false)),
        "a repeat changes nothing: {body}"
    );
    assert_eq!(app.count("source_pauses").await, 1);

    // Deliveries to the paused source: verified, recorded, acknowledged.
    for i in 0..5 {
        let response = app
            .post_standard(
                &format!("msg_paused_{i}"),
                &charge(&format!("ch_{i}"), "10.00", "0.30", "9.70"),
            )
            .await;
        assert_eq!(response.status().as_u16(), 200);
    }
    let unsigned = app.post("/webhooks/std", &[], "{}").await.status().as_u16();
    assert_eq!(unsigned, 401, "still verified");
    // Another source posts meanwhile.
    assert_eq!(
        app.post_adyen(&[adyen_item(
            "CAPTURE",
            "PSPOTHER00000000",
            1130,
            "EUR",
            "true"
        )])
        .await
        .status()
        .as_u16(),
        200
    );
    app.wait_for(
        "the other source posted",
        30,
        "SELECT count(*) = 1 FROM settlement_events WHERE source = 'adyen' AND status = 'posted'",
    )
    .await;
    // The workers have had every paused job in hand by now (they poll every 100 ms): nothing
    // posted, no attempt started or counted.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(posted(&app, "msg_paused_").await, 0);
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE external_id LIKE 'msg_paused_%' AND status = 'recorded'")
            .await,
        5
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id WHERE e.source = 'std'")
            .await,
        0
    );
    assert_eq!(app.count("journal_entries").await, 1, "the other source's");
    assert_eq!(
        app.metric_becoming("settle_source_paused{source=\"std\"}", 1.0)
            .await,
        Some(1.0)
    );
    let (_, sources) = app.api_get("/api/sources", Some(FINANCE_TOKEN)).await;
    let std = sources
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == "std"))
        .expect("std listed");
    assert_eq!(std["paused"]["paused_by"], "olivia");
    assert_eq!(std["paused"]["pause_reason"], "bad deploy upstream");
    let stripe = sources
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == "stripe"))
        .expect("stripe listed");
    assert!(stripe["paused"].is_null());

    // Resumed: the backlog is due at once (not in the ten minutes a paused job waits).
    let (status, body) = app
        .api_post(
            "/api/sources/std/resume",
            Some(OPS_TOKEN),
            json!({"reason": "upstream fixed"}),
        )
        .await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    assert_eq!(body["jobs_released"], 5, "{body}");
    app.wait_for(
        "the paused backlog drained",
        30,
        "SELECT count(*) = 5 FROM settlement_events WHERE external_id LIKE 'msg_paused_%' AND status = 'posted'",
    )
    .await;
    let (status, body) = app
        .api_post(
            "/api/sources/std/resume",
            Some(OPS_TOKEN),
            json!({"reason": "upstream fixed"}),
        )
        .await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(false)),
        "{body}"
    );
    assert_eq!(
        app.texts("SELECT paused_by || ': ' || pause_reason || ' / ' || resumed_by || ': ' || resume_reason FROM source_pauses")
            .await,
        ["olivia: bad deploy upstream / olivia: upstream fixed"],
        "the pause's audit trail"
    );
    assert_eq!(
        app.metric_becoming("settle_source_paused{source=\"std\"}", 0.0)
            .await,
        Some(0.0)
    );
    // A pause is only ever resumed, once; never rewritten or deleted.
    for statement in [
        "UPDATE source_pauses SET pause_reason = 'edited'",
        "UPDATE source_pauses SET resumed_by = 'someone else'",
        "DELETE FROM source_pauses",
    ] {
        assert!(
            app.try_rolled_back(statement).await.is_err(),
            "{statement} was accepted"
        );
    }
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}
