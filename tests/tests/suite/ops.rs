//! Ops: draining dead letters and conflicts through the API and the CLI, audited, without ever
//! a double post.

use serde_json::{Value, json};
use tests::TestApp;
use tests::app::{
    AppOptions, FAST_WORKERS, FINANCE_TOKEN, OPS_TOKEN, canonical, charge, config_toml, spawn,
    spawn_app,
};
use tests::process::{Scratch, run_settle};

const OPS: Option<&str> = Some(OPS_TOKEN);

fn payout(kind: &str, payout_id: &str) -> String {
    canonical(
        kind,
        json!({"movement_id": payout_id, "occurred_at": "2026-11-30T18:00:00Z", "currency": "USD",
               "amount": "500.00", "payout_id": payout_id}),
    )
}

/// An app whose transient failures give up quickly (2 attempts).
async fn quick_app() -> TestApp {
    spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nattempts_max = 2"),
        ..AppOptions::default()
    })
    .await
}

async fn post_ok(app: &TestApp, id: &str, body: &str) {
    assert_eq!(
        app.post_standard(id, body).await.status().as_u16(),
        200,
        "{id}"
    );
}

async fn audit_rows(app: &TestApp) -> Vec<(String, String, String)> {
    sqlx::query_as("SELECT actor, action, reason FROM audit_log ORDER BY id")
        .fetch_all(app.pg())
        .await
        .expect("audit")
}

#[tokio::test]
async fn a_requeued_dead_letter_whose_cause_was_fixed_posts_once() {
    let app = quick_app().await;
    post_ok(&app, "msg_failed", &payout("payout_failed", "po_1")).await;
    app.wait_settled(30).await;
    let dead = app.open_dead_letter("msg_failed").await;
    // The cause: the payout it reverses had not arrived. Now it does.
    post_ok(&app, "msg_paid", &payout("payout_paid", "po_1")).await;
    app.wait_settled(30).await;

    let (status, decided) = app
        .api_post(
            &format!("/api/dead-letters/{dead}/requeue"),
            OPS,
            json!({"reason": "payout arrived"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(
        (decided["changed"].as_bool(), decided["state"].as_str()),
        (Some(true), Some("requeued"))
    );
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_failed").await, ("posted".into(), None));
    assert_eq!(
        app.count("journal_entries").await,
        2,
        "the payout and its one reversal"
    );
    assert_eq!(
        audit_rows(&app).await,
        [(
            "olivia".into(),
            "dead_letter.requeue".into(),
            "payout arrived".into()
        )]
    );
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn requeue_pressed_twice_at_once_yields_one_job_and_one_entry() {
    let app = quick_app().await;
    post_ok(&app, "msg_failed", &payout("payout_failed", "po_1")).await;
    app.wait_settled(30).await;
    let dead = app.open_dead_letter("msg_failed").await;
    post_ok(&app, "msg_paid", &payout("payout_paid", "po_1")).await;
    app.wait_settled(30).await;

    let path = format!("/api/dead-letters/{dead}/requeue");
    let (a, b) = tokio::join!(
        app.api_post(&path, OPS, json!({})),
        app.api_post(&path, OPS, json!({}))
    );
    assert_eq!((a.0, b.0), (200, 200));
    let mut changed = [a.1["changed"].as_bool(), b.1["changed"].as_bool()];
    changed.sort();
    assert_eq!(changed, [Some(false), Some(true)], "one requeue, one no-op");
    app.wait_settled(30).await;
    let jobs: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT a.job_id, j.status FROM (SELECT DISTINCT job_id FROM job_attempts WHERE event_id =
                 (SELECT id FROM settlement_events WHERE external_id = 'msg_failed')) a
         LEFT JOIN apalis.jobs j ON j.id = a.job_id ORDER BY a.job_id",
    )
    .fetch_all(app.pg())
    .await
    .expect("jobs");
    let statuses: Vec<Option<&str>> = jobs.iter().map(|(_, s)| s.as_deref()).collect();
    assert_eq!(
        statuses,
        [Some("Killed"), None],
        "the original job (killed, kept) and exactly one fresh one (posted, its row gone)"
    );
    assert_eq!(app.count("journal_entries").await, 2);
    assert_eq!(
        audit_rows(&app).await.len(),
        1,
        "the no-op wrote no audit row"
    );
}

#[tokio::test]
async fn requeueing_an_item_whose_movement_was_posted_meanwhile_writes_no_second_entry() {
    let app = quick_app().await;
    post_ok(&app, "msg_failed_a", &payout("payout_failed", "po_1")).await;
    app.wait_settled(30).await;
    let dead = app.open_dead_letter("msg_failed_a").await;
    post_ok(&app, "msg_paid", &payout("payout_paid", "po_1")).await;
    // The payout posted, so its failure's job has nothing to wait for: with only two attempts,
    // a loaded machine could spend both before the payout's posting commits.
    app.wait_settled(30).await;
    // Another event about the same failure posts the reversal first.
    post_ok(&app, "msg_failed_b", &payout("payout_failed", "po_1")).await;
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_failed_b").await.0, "posted");

    let (status, _) = app
        .api_post(
            &format!("/api/dead-letters/{dead}/requeue"),
            OPS,
            json!({"reason": "retry"}),
        )
        .await;
    assert_eq!(status, 200);
    app.wait_settled(30).await;
    assert_eq!(
        app.event_state("msg_failed_a").await,
        ("posted".into(), None)
    );
    assert_eq!(app.count("journal_entries").await, 2, "no second reversal");
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn a_discarded_event_never_posts_even_when_redelivered() {
    let app = spawn_app().await;
    let bad = charge("ch_1", "100.00", "3.20", "90.00");
    post_ok(&app, "msg_bad", &bad).await;
    app.wait_settled(30).await;
    let dead = app.open_dead_letter("msg_bad").await;
    let discard = format!("/api/dead-letters/{dead}/discard");

    let (status, error) = app.api_post(&discard, OPS, json!({})).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (400, Some("bad_request")),
        "a reason is mandatory"
    );
    let (status, decided) = app
        .api_post(
            &discard,
            OPS,
            json!({"reason": "duplicate of a manual entry"}),
        )
        .await;
    assert_eq!(
        (
            status,
            decided["state"].as_str(),
            decided["changed"].as_bool()
        ),
        (200, Some("discarded"), Some(true))
    );
    let (status, again) = app
        .api_post(&discard, OPS, json!({"reason": "again"}))
        .await;
    assert_eq!(
        (status, again["changed"].as_bool()),
        (200, Some(false)),
        "discarding twice is a no-op"
    );
    let (status, error) = app
        .api_post(&format!("/api/dead-letters/{dead}/requeue"), OPS, json!({}))
        .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (409, Some("already_decided"))
    );

    let response = app.post_standard("msg_bad", &bad).await;
    let json: Value = response.json().await.expect("json");
    assert_eq!(json["status"], "duplicate");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(app.event_state("msg_bad").await.0, "discarded");
    assert_eq!(app.count("journal_entries").await, 0);
    assert_eq!(audit_rows(&app).await.len(), 1);
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn a_requeued_item_that_fails_again_is_a_new_dead_letter_with_its_whole_history() {
    let app = spawn_app().await;
    post_ok(&app, "msg_bad", &charge("ch_1", "100.00", "3.20", "90.00")).await;
    app.wait_settled(30).await;
    let first = app.open_dead_letter("msg_bad").await;
    let (status, _) = app
        .api_post(
            &format!("/api/dead-letters/{first}/requeue"),
            OPS,
            json!({"reason": "try again"}),
        )
        .await;
    assert_eq!(status, 200);
    app.wait_settled(30).await;
    let second = app.open_dead_letter("msg_bad").await;
    assert_ne!(first, second);

    let (status, detail) = app
        .api_get(&format!("/api/dead-letters/{second}"), OPS)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        detail["attempts"].as_array().map(Vec::len),
        Some(2),
        "attempts of both jobs: {detail}"
    );
    assert_eq!(detail["audit"][0]["action"], "dead_letter.requeue");
    assert_eq!(detail["event"]["external_id"], "msg_bad");
    let (status, error) = app
        .api_post(
            &format!("/api/dead-letters/{first}/requeue"),
            OPS,
            json!({}),
        )
        .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (409, Some("already_decided"))
    );
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains(&second.to_string())),
        "points at the new one"
    );
}

#[tokio::test]
async fn a_bulk_dry_run_changes_nothing_and_a_bulk_action_reports_per_item() {
    let app = spawn_app().await;
    for i in 0..3 {
        post_ok(
            &app,
            &format!("msg_bad_{i}"),
            &charge(&format!("ch_{i}"), "100.00", "3.20", "90.00"),
        )
        .await;
    }
    post_ok(
        &app,
        "msg_good",
        &charge("ch_good", "10.00", "0.30", "9.70"),
    )
    .await;
    app.wait_settled(30).await;

    let filter = json!({"source": "std", "error_code": "invalid_facts"});
    let (status, report) = app
        .api_post(
            "/api/dead-letters/requeue",
            OPS,
            json!({"filter": filter, "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    let outcomes: Vec<&str> = report["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, ["would_requeue"; 3]);
    assert_eq!(app.count("audit_log").await, 0, "a dry run writes nothing");
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters WHERE state = 'open'")
        .fetch_one(app.pg())
        .await
        .expect("open");
    assert_eq!(open, 3);

    // One of them is discarded on its own first: the bulk reports it and carries on.
    let one = app.open_dead_letter("msg_bad_1").await;
    app.api_post(
        &format!("/api/dead-letters/{one}/discard"),
        OPS,
        json!({"reason": "known bad"}),
    )
    .await;
    let (status, report) = app
        .api_post("/api/dead-letters/discard", OPS, json!({"filter": {"error_code": "invalid_facts"}, "reason": "bad data from the sandbox"}))
        .await;
    assert_eq!(status, 200);
    let outcomes: Vec<&str> = report["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes,
        ["discarded", "discarded"],
        "only the open ones matched"
    );
    assert_eq!(app.count("audit_log").await, 3);
    assert_eq!(app.event_state("msg_good").await.0, "posted");
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn conflicts_show_both_sides_and_resolve_once_audited() {
    let app = spawn_app().await;
    post_ok(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    app.post_standard("msg_1", &charge("ch_1", "100.01", "3.20", "96.81"))
        .await;
    let (status, page) = app.api_get("/api/conflicts", OPS).await;
    assert_eq!(status, 200);
    let id = page["items"][0]["id"].as_i64().expect("conflict id");
    let (_, detail) = app
        .api_get(&format!("/api/conflicts/{id}"), Some(FINANCE_TOKEN))
        .await;
    assert_eq!(detail["original"]["facts"]["gross"], "100.00");
    assert_eq!(detail["conflict"]["facts"]["gross"], "100.01");
    let path = format!("/api/conflicts/{id}/resolve");
    let (status, _) = app.api_post(&path, OPS, json!({"reason": ""})).await;
    assert_eq!(status, 400);
    let (status, decided) = app
        .api_post(
            &path,
            OPS,
            json!({"reason": "provider resent with a rounding fix"}),
        )
        .await;
    assert_eq!((status, decided["changed"].as_bool()), (200, Some(true)));
    let (_, decided) = app.api_post(&path, OPS, json!({"reason": "again"})).await;
    assert_eq!(decided["changed"].as_bool(), Some(false));
    let (_, open) = app.api_get("/api/conflicts", OPS).await;
    assert_eq!(open["items"].as_array().map(Vec::len), Some(0));
    assert_eq!(audit_rows(&app).await.len(), 1);
}

#[tokio::test]
async fn the_audit_log_cannot_be_altered() {
    let app = spawn_app().await;
    post_ok(&app, "msg_bad", &charge("ch_1", "100.00", "3.20", "90.00")).await;
    app.wait_settled(30).await;
    let dead = app.open_dead_letter("msg_bad").await;
    app.api_post(
        &format!("/api/dead-letters/{dead}/discard"),
        OPS,
        json!({"reason": "bad"}),
    )
    .await;
    for statement in [
        "UPDATE audit_log SET actor = 'someone else'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ] {
        let error = sqlx::query(statement)
            .execute(app.pg())
            .await
            .expect_err(statement);
        assert!(
            error.to_string().contains("append-only"),
            "{statement}: {error}"
        );
    }
    assert_eq!(audit_rows(&app).await.len(), 1);
}

#[tokio::test]
async fn the_api_needs_a_token_and_only_ops_may_act() {
    let app = spawn_app().await;
    post_ok(&app, "msg_bad", &charge("ch_1", "100.00", "3.20", "90.00")).await;
    app.wait_settled(30).await;
    let dead = app.open_dead_letter("msg_bad").await;
    let requeue = format!("/api/dead-letters/{dead}/requeue");

    assert_eq!(app.api_get("/api/dead-letters", None).await.0, 401);
    assert_eq!(
        app.api_get("/api/dead-letters", Some("wrong-token"))
            .await
            .0,
        401
    );
    let (status, error) = app
        .api_get("/api/dead-letters", Some(OPS_TOKEN.trim_end_matches('b')))
        .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, page) = app.api_get("/api/dead-letters", Some(FINANCE_TOKEN)).await;
    assert_eq!(
        (status, page["items"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    let (status, error) = app
        .api_post(&requeue, Some(FINANCE_TOKEN), json!({"reason": "x"}))
        .await;
    assert_eq!((status, error["error"].as_str()), (403, Some("forbidden")));
    assert_eq!(app.api_post(&requeue, None, json!({})).await.0, 401);
    assert_eq!(
        app.api_post(
            "/api/dead-letters/requeue",
            Some(FINANCE_TOKEN),
            json!({"dry_run": true})
        )
        .await
        .0,
        403
    );
    assert_eq!(
        app.api_post(&requeue, OPS, json!({"reason": "x"})).await.0,
        200
    );
    let (status, event) = app
        .api_get(
            "/api/events?source=std&external_id=msg_bad",
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(
        (status, event["external_id"].as_str()),
        (200, Some("msg_bad"))
    );
    assert_eq!(
        app.api_get("/api/events/999999", Some(FINANCE_TOKEN))
            .await
            .0,
        404
    );

    let audit: String =
        sqlx::query_scalar("SELECT string_agg(row_to_json(a)::text, ' ') FROM audit_log a")
            .fetch_one(app.pg())
            .await
            .expect("audit");
    assert!(audit.contains("olivia"), "the actor is the token's name");
    assert!(
        !audit.contains(OPS_TOKEN) && !audit.contains(FINANCE_TOKEN),
        "no token value in the audit log"
    );
}

#[tokio::test]
async fn the_cli_lists_shows_requeues_and_discards_with_the_actor_recorded() {
    let app = quick_app().await;
    post_ok(&app, "msg_bad", &charge("ch_1", "100.00", "3.20", "90.00")).await;
    post_ok(&app, "msg_failed", &payout("payout_failed", "po_1")).await;
    app.wait_settled(30).await;
    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &config_toml(&app.database_url(), &AppOptions::default()),
    );
    let url = &app.database_url();

    let (ok, out) = run_settle(&config, url, &["dead-letters", "list", "--json"]).await;
    assert!(ok, "{out}");
    let page: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    let (ok, out) = run_settle(&config, url, &["dead-letters", "list"]).await;
    assert!(
        ok && out.contains("invalid_facts") && out.contains("dependency_not_ready"),
        "{out}"
    );
    let bad = app.open_dead_letter("msg_bad").await.to_string();
    let (ok, out) = run_settle(&config, url, &["dead-letters", "show", &bad]).await;
    assert!(
        ok && out.contains("net 90.00 is not gross 100.00") && out.contains("attempts"),
        "{out}"
    );

    let (ok, out) = run_settle(
        &config,
        url,
        &[
            "dead-letters",
            "requeue",
            "--error-code",
            "dependency_not_ready",
            "--dry-run",
        ],
    )
    .await;
    assert!(
        ok && out.contains("would_requeue") && out.contains("dry run"),
        "{out}"
    );
    assert_eq!(app.count("audit_log").await, 0);
    let (ok, _) = run_settle(&config, url, &["dead-letters", "discard", &bad]).await;
    assert!(!ok, "discard without --reason is refused");
    let (ok, out) = run_settle(
        &config,
        url,
        &[
            "dead-letters",
            "discard",
            &bad,
            "--reason",
            "sandbox data",
            "--actor",
            "dana",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{out}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["items"][0]["outcome"], "discarded");
    let (ok, _) = run_settle(&config, url, &["dead-letters", "requeue", &bad]).await;
    assert!(!ok, "requeue of a discarded item exits non-zero");
    assert_eq!(
        audit_rows(&app).await,
        [(
            "dana".into(),
            "dead_letter.discard".into(),
            "sandbox data".into()
        )]
    );
}

/// Follows `next_cursor` from `path` (`limit` per page); every item's id, in order.
async fn page_through(app: &TestApp, path: &str, limit: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut cursor: Option<i64> = None;
    for _ in 0..20 {
        let url = match cursor {
            Some(c) => format!("{path}?limit={limit}&cursor={c}"),
            None => format!("{path}?limit={limit}"),
        };
        let (status, page) = app.api_get(&url, Some(FINANCE_TOKEN)).await;
        assert_eq!(status, 200, "{url}: {page}");
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= limit, "{url} gave {} items", items.len());
        ids.extend(items.iter().map(|item| item["id"].as_i64().expect("id")));
        match page["next_cursor"].as_i64() {
            Some(next) => cursor = Some(next),
            None => return ids,
        }
    }
    panic!("{path} never reached its last page");
}

#[tokio::test]
async fn dead_letters_and_conflicts_are_paged_by_cursor_each_item_once() {
    let app = spawn_app().await;
    for n in 1..=5 {
        // Invalid facts: each is dead-lettered at once.
        post_ok(
            &app,
            &format!("msg_bad_{n}"),
            &charge(&format!("ch_bad_{n}"), "10.00", "1.00", "8.00"),
        )
        .await;
    }
    for n in 1..=3 {
        let id = format!("msg_{n}");
        post_ok(
            &app,
            &id,
            &charge(&format!("ch_{n}"), "10.00", "1.00", "9.00"),
        )
        .await;
        let conflicting = app
            .post_standard(&id, &charge(&format!("ch_{n}"), "11.00", "1.00", "10.00"))
            .await;
        assert_eq!(conflicting.status().as_u16(), 409);
    }
    app.wait_settled(30).await;
    let dead: Vec<i64> = sqlx::query_scalar("SELECT id FROM dead_letters ORDER BY id")
        .fetch_all(app.pg())
        .await
        .expect("dead letters");
    assert_eq!(dead.len(), 5);
    let mut paged = page_through(&app, "/api/dead-letters", 2).await;
    paged.sort_unstable();
    assert_eq!(
        paged, dead,
        "every dead letter exactly once across pages of 2"
    );
    let conflicts: Vec<i64> = sqlx::query_scalar("SELECT id FROM event_conflicts ORDER BY id")
        .fetch_all(app.pg())
        .await
        .expect("conflicts");
    assert_eq!(conflicts.len(), 3);
    let mut paged = page_through(&app, "/api/conflicts", 2).await;
    paged.sort_unstable();
    assert_eq!(
        paged, conflicts,
        "every conflict exactly once across pages of 2"
    );
}
