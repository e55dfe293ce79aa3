//! Payload retention on both backends: an expiry erases only the payloads of settled events (never
//! one in flight, in an open dead letter or in an open conflict), under one audited erasure, and
//! is idempotent; a person erases one payload on request through the API; and the database itself
//! refuses every other change to a payload or to an erasure.

use chrono::{Duration, Utc};
use ledger::review::Decision;
use ledger::store::RetentionPolicy;
use serde_json::{Value, json};
use tests::TestApp;
use tests::app::{AppOptions, Backend, FINANCE_TOKEN, OPS_TOKEN, charge, config_toml, spawn};
use tests::process::{Scratch, run_settle};

tests::on_both_backends!(
    expiry_erases_only_settled_payloads_under_one_audited_erasure,
    a_person_erases_one_payload_on_request,
    workers_expire_payloads_on_their_own,
);

fn ninety_days() -> RetentionPolicy {
    RetentionPolicy {
        default_days: Some(90),
        sources: vec![],
    }
}

async fn event_id(app: &TestApp, external_id: &str) -> i64 {
    app.scalar(&format!(
        "SELECT id FROM settlement_events WHERE external_id = '{external_id}'"
    ))
    .await
}

async fn erased(app: &TestApp) -> Vec<String> {
    app.texts(
        "SELECT external_id FROM settlement_events WHERE payload_erased_by IS NOT NULL AND payload = '' ORDER BY external_id",
    )
    .await
}

/// Four events and a conflict of each state that matters, all settled by the workers.
async fn deliver_every_state(app: &TestApp) {
    for (id, body) in [
        ("msg_posted", charge("ch_1", "100.00", "3.20", "96.80")),
        ("msg_discarded", charge("ch_2", "1.00", "0.10", "0.50")),
        ("msg_dead", charge("ch_3", "1.00", "0.10", "0.50")),
        ("msg_conflict", charge("ch_4", "10.00", "0.30", "9.70")),
        ("msg_resolved", charge("ch_5", "10.00", "0.30", "9.70")),
    ] {
        assert_eq!(app.post_standard(id, &body).await.status().as_u16(), 200);
    }
    // The same keys again with other facts: two conflicting deliveries (kept, answered 409),
    // one to be resolved.
    for (id, body) in [
        ("msg_conflict", charge("ch_4", "11.00", "0.30", "10.70")),
        ("msg_resolved", charge("ch_5", "11.00", "0.30", "10.70")),
    ] {
        assert_eq!(app.post_standard(id, &body).await.status().as_u16(), 409);
    }
    app.wait_settled(30).await;
    let discard = app.open_dead_letter("msg_discarded").await;
    let (status, _) = app
        .api_post(
            &format!("/api/dead-letters/{discard}/discard"),
            Some(OPS_TOKEN),
            json!({"reason": "test charge"}),
        )
        .await;
    assert_eq!(status, 200);
    let resolved = app
        .scalar("SELECT c.id FROM event_conflicts c JOIN settlement_events e ON e.id = c.event_id WHERE e.external_id = 'msg_resolved'")
        .await;
    let (status, _) = app
        .api_post(
            &format!("/api/conflicts/{resolved}/resolve"),
            Some(OPS_TOKEN),
            json!({"reason": "provider confirmed the original"}),
        )
        .await;
    assert_eq!(status, 200);
}

async fn expiry_erases_only_settled_payloads_under_one_audited_erasure(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    deliver_every_state(&app).await;
    let later = Utc::now() + Duration::days(91);

    // Nothing is 90 days old yet.
    let today = app
        .store
        .prune_payloads(&ninety_days(), Utc::now(), "ops", false)
        .await
        .expect("prune");
    assert_eq!((today[0].events, today[0].conflicts), (0, 0));
    // A source kept for ever is left out, whatever its age.
    let kept = RetentionPolicy {
        default_days: Some(90),
        sources: vec![("std".into(), None)],
    };
    let lines = app
        .store
        .prune_payloads(&kept, later, "ops", true)
        .await
        .expect("dry run");
    assert_eq!(lines.len(), 1, "only the default rule: {lines:?}");
    assert_eq!(lines[0].events, 0, "std is kept for ever");

    // A dry run counts and changes nothing.
    let dry = app
        .store
        .prune_payloads(&ninety_days(), later, "ops", true)
        .await
        .expect("dry run");
    assert_eq!(
        (dry[0].events, dry[0].conflicts, dry[0].erasure_id),
        (3, 1, None),
        "posted, discarded, and posted with its conflict resolved; the resolved conflict"
    );
    assert!(erased(&app).await.is_empty());
    assert_eq!(app.count("payload_erasures").await, 0);

    let done = app
        .store
        .prune_payloads(&ninety_days(), later, "settle (retention)", false)
        .await
        .expect("prune");
    assert_eq!((done[0].events, done[0].conflicts), (3, 1));
    let erasure = done[0].erasure_id.expect("an erasure");
    assert_eq!(
        erased(&app).await,
        ["msg_discarded", "msg_posted", "msg_resolved"]
    );
    assert_eq!(
        app.texts("SELECT e.external_id FROM event_conflicts c JOIN settlement_events e ON e.id = c.event_id WHERE c.payload_erased_by IS NOT NULL AND c.payload = ''")
            .await,
        ["msg_resolved"],
        "the open conflict keeps its payload"
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE external_id IN ('msg_dead', 'msg_conflict') AND payload <> '' AND payload_erased_by IS NULL")
            .await,
        2,
        "the open dead letter and the open conflict keep theirs"
    );
    let recorded = app
        .store
        .payload_erasure(erasure)
        .await
        .expect("read")
        .expect("the erasure");
    assert_eq!(
        (recorded.actor.as_str(), recorded.scope.as_str()),
        ("settle (retention)", "expiry")
    );
    assert!(recorded.reason.contains("90 day"), "{}", recorded.reason);
    assert!(recorded.received_before.is_some());

    // Again: nothing left to expire, no second erasure.
    let again = app
        .store
        .prune_payloads(&ninety_days(), later, "settle (retention)", false)
        .await
        .expect("prune again");
    assert_eq!(
        (again[0].events, again[0].conflicts, again[0].erasure_id),
        (0, 0, None)
    );
    assert_eq!(app.count("payload_erasures").await, 1);

    // What the invariants need stays: the event answers with its facts, no payload, and who
    // erased it; a redelivery is still a duplicate; every invariant holds.
    let posted = event_id(&app, "msg_posted").await;
    let (status, detail) = app
        .api_get(&format!("/api/events/{posted}/detail"), Some(FINANCE_TOKEN))
        .await;
    assert_eq!(status, 200);
    assert_eq!(detail["event"]["payload"], Value::Null);
    assert_eq!(detail["event"]["facts"]["movement_id"], "ch_1");
    assert_eq!(detail["erasure"]["id"], erasure);
    assert_eq!(detail["erasure"]["scope"], "expiry");
    assert_eq!(detail["entries"].as_array().map(Vec::len), Some(1));
    let again = app
        .post_standard("msg_posted", &charge("ch_1", "100.00", "3.20", "96.80"))
        .await;
    assert_eq!(again.status().as_u16(), 200);
    assert_eq!(app.count("settlement_events").await, 5);
    assert_eq!(app.count("event_conflicts").await, 2);

    // The database refuses every other way: a payload changed or blanked without an erasure, an
    // erasure of a payload still in use, an erasure undone, an erasure row edited or deleted.
    for statement in [
        "UPDATE settlement_events SET payload = '' WHERE external_id = 'msg_dead'".to_owned(),
        format!(
            "UPDATE settlement_events SET payload = '', payload_erased_by = {erasure} WHERE external_id = 'msg_dead'"
        ),
        format!(
            "UPDATE settlement_events SET payload = '', payload_erased_by = {erasure} WHERE external_id = 'msg_conflict'"
        ),
        "UPDATE settlement_events SET payload = '{}', payload_erased_by = NULL WHERE external_id = 'msg_posted'".to_owned(),
        format!(
            "UPDATE settlement_events SET payload_erased_by = NULL WHERE id = {posted}"
        ),
        "UPDATE payload_erasures SET actor = 'someone else'".to_owned(),
        "DELETE FROM payload_erasures".to_owned(),
    ] {
        let message = app
            .try_rolled_back(&statement)
            .await
            .expect_err(&statement);
        assert!(
            ["immutable", "in use", "append-only", "CHECK constraint", "check constraint"]
                .iter()
                .any(|m| message.contains(m)),
            "{statement}: {message}"
        );
    }
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn a_person_erases_one_payload_on_request(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    deliver_every_state(&app).await;
    let posted = event_id(&app, "msg_posted").await;
    let path = format!("/api/events/{posted}/erase-payload");

    let (status, body) = app
        .api_post(
            &path,
            Some(FINANCE_TOKEN),
            json!({"reason": "GDPR request 17"}),
        )
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = app
        .api_post(&path, Some(OPS_TOKEN), json!({"reason": "  "}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(erased(&app).await.is_empty(), "a refusal changes nothing");

    let (status, body) = app
        .api_post(&path, Some(OPS_TOKEN), json!({"reason": "GDPR request 17"}))
        .await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    let (status, body) = app
        .api_post(&path, Some(OPS_TOKEN), json!({"reason": "GDPR request 17"}))
        .await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(false)),
        "a repeat changes nothing: {body}"
    );
    assert_eq!(erased(&app).await, ["msg_posted"]);
    assert_eq!(
        app.texts("SELECT actor || ' ' || scope || ' ' || reason FROM payload_erasures")
            .await,
        ["olivia request GDPR request 17"]
    );
    let (_, event) = app
        .api_get(&format!("/api/events/{posted}"), Some(FINANCE_TOKEN))
        .await;
    assert_eq!(event["payload"], Value::Null);
    assert!(event["payload_erased_by"].is_i64());

    // Still in use: an open dead letter, an open conflict. Refused, typed, nothing written.
    for external_id in ["msg_dead", "msg_conflict"] {
        let id = event_id(&app, external_id).await;
        let (status, body) = app
            .api_post(
                &format!("/api/events/{id}/erase-payload"),
                Some(OPS_TOKEN),
                json!({"reason": "GDPR request 18"}),
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("in_use")),
            "{body}"
        );
    }
    let (status, _) = app
        .api_post(
            "/api/events/999999/erase-payload",
            Some(OPS_TOKEN),
            json!({"reason": "GDPR request 19"}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(erased(&app).await, ["msg_posted"]);
    assert_eq!(app.count("payload_erasures").await, 1);

    // The store's own path refuses the same way (what the CLI calls).
    let dead = event_id(&app, "msg_dead").await;
    let refused = app
        .store
        .erase_payload(
            dead,
            &Decision {
                actor: "ops".into(),
                reason: "GDPR request 18".into(),
            },
        )
        .await;
    assert!(
        matches!(refused, Err(ledger::review::DecisionError::InUse(_))),
        "{refused:?}"
    );
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// The CLI: `settle prune --dry-run` reports each rule of the configured policy and changes
/// nothing; `settle events erase-payload` erases one payload with the actor recorded, refuses one
/// still in use, and `settle events show` says who erased it.
#[tokio::test]
async fn the_cli_counts_an_expiry_and_erases_one_payload() {
    let app = spawn(AppOptions::default()).await;
    assert_eq!(
        app.post_standard("msg_ok", &charge("ch_1", "100.00", "3.20", "96.80"))
            .await
            .status()
            .as_u16(),
        200
    );
    app.post_standard("msg_bad", &charge("ch_2", "1.00", "0.10", "0.50"))
        .await;
    app.wait_settled(30).await;
    let scratch = Scratch::new();
    let text = config_toml(&app.database_url(), &AppOptions::default()).replace(
        "provider = \"standard\"",
        "provider = \"standard\"\n        payload_days = 30",
    );
    let config = scratch.write(
        "settle.toml",
        &format!("{text}\n[retention]\npayload_days = 90\n"),
    );
    let url = &app.database_url();

    let (ok, out) = run_settle(&config, url, &["prune", "--dry-run", "--json"]).await;
    assert!(ok, "{out}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["dry_run"], true);
    let rules = report["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 2, "{out}");
    assert_eq!(
        (rules[0]["source"].as_str(), rules[0]["days"].as_u64()),
        (Some("std"), Some(30))
    );
    assert_eq!(
        (rules[1]["source"].as_str(), rules[1]["days"].as_u64()),
        (None, Some(90))
    );
    assert_eq!(rules[0]["events"], 0, "nothing is 30 days old");
    let (ok, out) = run_settle(&config, url, &["prune"]).await;
    assert!(ok && out.contains("EXPIRED"), "{out}");
    assert_eq!(app.count("payload_erasures").await, 0, "nothing was due");

    let ok_id = event_id(&app, "msg_ok").await.to_string();
    let (ok, out) = run_settle(
        &config,
        url,
        &[
            "events",
            "erase-payload",
            &ok_id,
            "--reason",
            "GDPR request 17",
            "--actor",
            "dana",
        ],
    )
    .await;
    assert!(ok && out.contains("payload erased"), "{out}");
    let (ok, out) = run_settle(&config, url, &["events", "show", &ok_id]).await;
    assert!(
        ok && out.contains("payload erased")
            && out.contains("dana")
            && out.contains("GDPR request 17"),
        "{out}"
    );
    let bad_id = event_id(&app, "msg_bad").await.to_string();
    let (ok, out) = run_settle(
        &config,
        url,
        &[
            "events",
            "erase-payload",
            &bad_id,
            "--reason",
            "GDPR request 18",
        ],
    )
    .await;
    assert!(!ok, "an open dead letter keeps its payload: {out}");
    assert_eq!(erased(&app).await, ["msg_ok"]);
    assert_eq!(app.count("payload_erasures").await, 1);
}

/// The workers expire what is due by themselves, every `retention.prune_every_secs`: an event
/// received 100 days ago (written as the ingress writes one, with its received time set) loses its
/// payload to an erasure by `settle (retention)`, counted in `settle_payloads_expired_total`.
async fn workers_expire_payloads_on_their_own(backend: Backend) {
    let app = spawn(AppOptions {
        extra: "[retention]\nprune_every_secs = 1".into(),
        ..AppOptions::on(backend)
    })
    .await;
    assert_eq!(
        app.post_standard("msg_new", &charge("ch_new", "10.00", "0.30", "9.70"))
            .await
            .status()
            .as_u16(),
        200
    );
    app.wait_settled(30).await;
    let long_ago = (Utc::now() - Duration::days(100)).to_rfc3339();
    app.exec(&format!(
        "INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint, facts,
                                        payload, job_id, received_at, status_changed_at)
         SELECT source, 'msg_old', 'discarded', kind, 'ch_old', fingerprint, facts, payload, 'job_old',
                '{long_ago}', '{long_ago}'
         FROM settlement_events WHERE external_id = 'msg_new'"
    ))
    .await
    .expect("an old event");
    app.wait_for(
        "the old payload expired",
        30,
        "SELECT count(*) = 1 FROM settlement_events WHERE external_id = 'msg_old' AND payload_erased_by IS NOT NULL",
    )
    .await;
    assert_eq!(erased(&app).await, ["msg_old"], "the new one is kept");
    assert_eq!(
        app.texts("SELECT actor || ' ' || scope FROM payload_erasures")
            .await,
        ["settle (retention) expiry"]
    );
    assert!(app.metric("settle_payloads_expired_total").await >= 1.0);
}
