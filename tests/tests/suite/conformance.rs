//! The conformance suite: one test body, run against both backends (PostgreSQL and the embedded
//! SQLite default). Every contract of the store (ARCHITECTURE.md, Invariants and State machines) that does
//! not depend on a backend's own machinery is here; assertions use SQL both backends speak.

use std::collections::BTreeSet;

use ledger::job::{AttemptStart, JobRef, Posted};
use ledger::{EventStatus, PostingRules};
use ops::Role;
use serde_json::{Value, json};
use tests::TestApp;
use tests::app::{
    AppOptions, Backend, FAST_WORKERS, FINANCE_TOKEN, OPS_TOKEN, canonical, charge, new_charge,
    spawn, start,
};

tests::on_both_backends!(
    new_duplicate_and_conflicting_deliveries,
    concurrent_identical_deliveries_record_once,
    invalid_facts_are_recorded_and_dead_lettered,
    a_movement_posts_once_and_replays_or_conflicts,
    transient_failures_retry_then_post_or_exhaust,
    the_journal_events_and_audit_log_refuse_changes,
    requeue_and_discard_are_audited_idempotent_transitions,
    balances_journal_and_reconciliation_read_the_same,
    a_restart_keeps_everything,
    each_job_ends_in_the_transaction_that_decides_it,
    a_group_of_postings_answers_each_job_as_if_alone,
    only_the_worker_holding_a_job_gives_it_back,
    a_job_whose_attempt_died_starts_again_only_alone,
    a_group_of_deliveries_inserts_only_free_keys_with_one_commit,
    a_delivery_the_database_refuses_fails_alone_not_its_group,
    a_group_of_postings_larger_than_a_statement_posts_each_once_in_one_transaction,
    workers_with_two_groups_in_flight_post_every_event_once,
    every_state_label_is_one_the_tables_accept,
    starting_an_attempt_follows_the_start_rule_in_every_case,
    two_bulk_actions_at_once_decide_each_dead_letter_once,
);

async fn deliver(app: &TestApp, id: &str, body: &str) -> (u16, Value) {
    let response = app.post_standard(id, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn payout(kind: &str, payout_id: &str, amount: &str) -> String {
    canonical(
        kind,
        json!({"movement_id": payout_id, "occurred_at": "2026-11-30T18:00:00Z", "currency": "USD",
                           "amount": amount, "payout_id": payout_id}),
    )
}

fn quick(backend: Backend, attempts_max: u32) -> AppOptions {
    AppOptions {
        workers: format!("{FAST_WORKERS}\nattempts_max = {attempts_max}"),
        ..AppOptions::on(backend)
    }
}

async fn new_duplicate_and_conflicting_deliveries(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let (status, first) = deliver(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    assert_eq!((status, first["status"].as_str()), (200, Some("recorded")));
    let reformatted = charge("ch_1", "100.0", "3.2", "96.8");
    let (status, again) = deliver(&app, "msg_1", &reformatted).await;
    assert_eq!((status, again["status"].as_str()), (200, Some("duplicate")));
    assert_eq!(again["event_id"], first["event_id"]);
    for _ in 0..2 {
        let (status, conflict) =
            deliver(&app, "msg_1", &charge("ch_1", "100.01", "3.20", "96.81")).await;
        assert_eq!(
            (status, conflict["error"].as_str()),
            (409, Some("event_conflict"))
        );
    }
    let (status, ignored) = deliver(
        &app,
        "msg_2",
        &json!({"type": "invoice.paid", "data": {}}).to_string(),
    )
    .await;
    assert_eq!((status, ignored["status"].as_str()), (200, Some("ignored")));
    assert_eq!(app.count("settlement_events").await, 1);
    assert_eq!(
        app.count("event_conflicts").await,
        1,
        "identical conflicting deliveries collapse"
    );
    app.wait_settled(30).await;
    assert_eq!(app.scalar("SELECT count(*) FROM journal_entries").await, 1);
    assert_eq!(
        app.scalar("SELECT count(DISTINCT job_id) FROM job_attempts")
            .await,
        1,
        "one job for the one event"
    );
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn concurrent_identical_deliveries_record_once(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let body = charge("ch_1", "100.00", "3.20", "96.80");
    let responses =
        futures::future::join_all((0..30).map(|_| deliver(&app, "msg_race", &body))).await;
    let statuses: Vec<(u16, Option<String>)> = responses
        .iter()
        .map(|(s, j)| (*s, j["status"].as_str().map(str::to_owned)))
        .collect();
    assert_eq!(
        statuses.iter().filter(|(s, _)| *s == 200).count(),
        30,
        "{statuses:?}"
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|(_, s)| s.as_deref() == Some("recorded"))
            .count(),
        1
    );
    let ids: BTreeSet<String> = responses
        .iter()
        .map(|(_, j)| j["event_id"].to_string())
        .collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(app.count("settlement_events").await, 1);
    app.wait_settled(30).await;
    assert_eq!(
        app.scalar("SELECT count(DISTINCT job_id) FROM job_attempts")
            .await,
        1,
        "one job was made for the event"
    );
    assert_eq!(app.count("journal_entries").await, 1);
    assert_eq!(app.jobs().await, 0, "its row went with its posting");
}

async fn invalid_facts_are_recorded_and_dead_lettered(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let (status, json) = deliver(&app, "msg_bad", &charge("ch_1", "100.00", "3.20", "90.00")).await;
    assert_eq!((status, json["status"].as_str()), (200, Some("recorded")));
    app.wait_settled(30).await;
    assert_eq!(
        app.event_state("msg_bad").await,
        ("abandoned".into(), Some("invalid_facts".into()))
    );
    assert_eq!(
        app.scalar("SELECT CAST(attempts AS BIGINT) FROM dead_letters")
            .await,
        1
    );
    assert_eq!(app.count("journal_entries").await, 0);
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn a_movement_posts_once_and_replays_or_conflicts(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let body = charge("ch_1", "100.00", "3.20", "96.80");
    deliver(&app, "msg_first", &body).await;
    app.wait_settled(30).await;
    deliver(&app, "msg_same", &body).await;
    deliver(
        &app,
        "msg_different",
        &charge("ch_1", "100.00", "3.00", "97.00"),
    )
    .await;
    app.wait_settled(30).await;
    assert_eq!(app.count("journal_entries").await, 1);
    assert_eq!(app.count("journal_lines").await, 3);
    assert_eq!(app.event_state("msg_same").await, ("posted".into(), None));
    assert_eq!(
        app.event_state("msg_different").await,
        ("abandoned".into(), Some("source_replay_conflict".into()))
    );
    let same: i64 = app
        .scalar("SELECT count(DISTINCT posted_entry_id) FROM settlement_events WHERE external_id IN ('msg_first', 'msg_same')")
        .await;
    assert_eq!(same, 1, "both events point at the one entry");
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn transient_failures_retry_then_post_or_exhaust(backend: Backend) {
    let app = spawn(quick(backend, 4)).await;
    deliver(
        &app,
        "msg_failed",
        &payout("payout_failed", "po_1", "500.00"),
    )
    .await;
    deliver(
        &app,
        "msg_never",
        &payout("payout_failed", "po_never", "7.00"),
    )
    .await;
    app.wait_for("two failed attempts", 30, "SELECT count(*) >= 2 FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id WHERE e.external_id = 'msg_failed' AND a.outcome = 'transient'").await;
    deliver(&app, "msg_paid", &payout("payout_paid", "po_1", "500.00")).await;
    app.wait_settled(60).await;
    assert_eq!(app.event_state("msg_failed").await, ("posted".into(), None));
    let reverses = app
        .scalar("SELECT count(*) FROM journal_entries f JOIN journal_entries p ON f.reverses_entry_id = p.id WHERE f.kind = 'payout_failed' AND p.kind = 'payout_paid'")
        .await;
    assert_eq!(reverses, 1);
    assert_eq!(
        app.event_state("msg_never").await,
        ("abandoned".into(), Some("dependency_not_ready".into()))
    );
    assert_eq!(
        app.scalar(
            "SELECT CAST(attempts AS BIGINT) FROM dead_letters WHERE error_class = 'exhausted'"
        )
        .await,
        4
    );
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn the_journal_events_and_audit_log_refuse_changes(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    deliver(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    deliver(&app, "msg_bad", &charge("ch_2", "1.00", "0.10", "0.50")).await;
    app.wait_settled(30).await;
    let dead = app.open_dead_letter("msg_bad").await;
    app.api_post(
        &format!("/api/dead-letters/{dead}/discard"),
        Some(OPS_TOKEN),
        json!({"reason": "bad"}),
    )
    .await;
    for statement in [
        "UPDATE journal_lines SET account = 'elsewhere'",
        "UPDATE journal_entries SET description = 'edited'",
        "DELETE FROM journal_lines",
        "DELETE FROM journal_entries",
        "UPDATE settlement_events SET payload = '{}'",
        "DELETE FROM settlement_events",
        "UPDATE audit_log SET actor = 'someone else'",
        "DELETE FROM audit_log",
    ] {
        let message = app.exec(statement).await.expect_err(statement);
        assert!(
            ["append-only", "immutable", "never deleted", "refused"]
                .iter()
                .any(|m| message.contains(m)),
            "{statement}: {message}"
        );
    }
    assert_eq!(app.count("journal_lines").await, 3);
    assert_eq!(app.count("audit_log").await, 1);
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn requeue_and_discard_are_audited_idempotent_transitions(backend: Backend) {
    let app = spawn(quick(backend, 2)).await;
    deliver(
        &app,
        "msg_failed",
        &payout("payout_failed", "po_1", "500.00"),
    )
    .await;
    deliver(&app, "msg_bad", &charge("ch_2", "1.00", "0.10", "0.50")).await;
    app.wait_settled(30).await;
    let failed = app.open_dead_letter("msg_failed").await;
    let bad = app.open_dead_letter("msg_bad").await;
    deliver(&app, "msg_paid", &payout("payout_paid", "po_1", "500.00")).await;
    app.wait_settled(30).await;

    let requeue = format!("/api/dead-letters/{failed}/requeue");
    let (a, b) = tokio::join!(
        app.api_post(
            &requeue,
            Some(OPS_TOKEN),
            json!({"reason": "payout arrived"})
        ),
        app.api_post(
            &requeue,
            Some(OPS_TOKEN),
            json!({"reason": "payout arrived"})
        )
    );
    assert_eq!((a.0, b.0), (200, 200));
    let changed: BTreeSet<bool> = [a.1["changed"].as_bool(), b.1["changed"].as_bool()]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(
        changed,
        [false, true].into_iter().collect(),
        "one requeue, one no-op"
    );
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_failed").await, ("posted".into(), None));
    assert_eq!(
        app.count("journal_entries").await,
        2,
        "the payout and its one reversal"
    );

    let discard = format!("/api/dead-letters/{bad}/discard");
    assert_eq!(
        app.api_post(&discard, Some(OPS_TOKEN), json!({})).await.0,
        400,
        "reason required"
    );
    assert_eq!(
        app.api_post(&discard, Some(FINANCE_TOKEN), json!({"reason": "x"}))
            .await
            .0,
        403
    );
    assert_eq!(
        app.api_post(&discard, Some(OPS_TOKEN), json!({"reason": "bad data"}))
            .await
            .1["changed"],
        true
    );
    assert_eq!(
        app.api_post(&discard, Some(OPS_TOKEN), json!({"reason": "again"}))
            .await
            .1["changed"],
        false
    );
    let (status, refused) = app
        .api_post(
            &format!("/api/dead-letters/{bad}/requeue"),
            Some(OPS_TOKEN),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (409, Some("already_decided"))
    );
    let (_, redelivered) = deliver(&app, "msg_bad", &charge("ch_2", "1.00", "0.10", "0.50")).await;
    assert_eq!(redelivered["status"], "duplicate");
    assert_eq!(app.event_state("msg_bad").await.0, "discarded");
    assert_eq!(app.count("audit_log").await, 2, "no-ops write no audit row");
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn balances_journal_and_reconciliation_read_the_same(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    let item = |id: &str, kind: &str, data: Value| (id.to_owned(), canonical(kind, data));
    let at = "2026-11-30T10:00:00Z";
    let deliveries = [
        item(
            "c1",
            "charge_settled",
            json!({"movement_id": "c1", "occurred_at": at, "currency": "JPY", "gross": "1000", "fee": "36", "net": "964", "payout_id": "po_j"}),
        ),
        item(
            "c2",
            "charge_settled",
            json!({"movement_id": "c2", "occurred_at": at, "currency": "KWD", "gross": "10.125", "fee": "0.301", "net": "9.824", "payout_id": "po_k"}),
        ),
        item(
            "p1",
            "payout_paid",
            json!({"movement_id": "po_j", "occurred_at": "2026-12-01T10:00:00Z", "currency": "JPY", "amount": "964", "payout_id": "po_j"}),
        ),
        item(
            "p2",
            "payout_paid",
            json!({"movement_id": "po_k", "occurred_at": "2026-12-01T10:00:00Z", "currency": "KWD", "amount": "9.900", "payout_id": "po_k"}),
        ),
    ];
    for (id, body) in &deliveries {
        deliver(&app, id, body).await;
    }
    app.wait_settled(30).await;
    let (_, before_payouts) = app
        .api_get("/api/balances?as_of=2026-11-30", Some(FINANCE_TOKEN))
        .await;
    let rows: BTreeSet<String> = before_payouts["balances"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["account"].as_str().unwrap_or(""),
                r["currency"].as_str().unwrap_or(""),
                r["balance"].as_str().unwrap_or("")
            )
        })
        .collect();
    let expected: BTreeSet<String> = [
        "fees:std JPY 36",
        "fees:std KWD 0.301",
        "sales JPY -1000",
        "sales KWD -10.125",
        "std:balance JPY 964",
        "std:balance KWD 9.824",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(rows, expected);
    let (_, journal) = app
        .api_get("/api/journal?limit=2", Some(FINANCE_TOKEN))
        .await;
    assert_eq!(journal["items"].as_array().map(Vec::len), Some(2));
    let cursor = journal["next_cursor"]
        .as_str()
        .expect("more pages")
        .to_owned();
    let (_, rest) = app
        .api_get(
            &format!("/api/journal?limit=10&cursor={cursor}"),
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(rest["next_cursor"], Value::Null);
    let (_, matched) = app
        .api_get("/api/payouts/po_j/reconciliation", Some(FINANCE_TOKEN))
        .await;
    assert_eq!(
        (matched["status"].as_str(), matched["difference"].as_str()),
        (Some("matched"), Some("0"))
    );
    let (_, unmatched) = app
        .api_get("/api/payouts/po_k/reconciliation", Some(FINANCE_TOKEN))
        .await;
    assert_eq!(
        (
            unmatched["status"].as_str(),
            unmatched["difference"].as_str()
        ),
        (Some("unmatched"), Some("0.076"))
    );
}

async fn a_restart_keeps_everything(backend: Backend) {
    let app = spawn(AppOptions::on(backend)).await;
    for i in 0..20 {
        let (status, _) = deliver(
            &app,
            &format!("msg_{i}"),
            &charge(&format!("ch_{i}"), "10.00", "0.30", "9.70"),
        )
        .await;
        assert_eq!(status, 200);
    }
    let database = app.stop().await;
    let app = start(database, AppOptions::on(backend)).await;
    app.wait_settled(30).await;
    assert_eq!(app.count("settlement_events").await, 20);
    assert_eq!(app.count("journal_entries").await, 20);
    let (_, replay) = deliver(&app, "msg_3", &charge("ch_3", "10.00", "0.30", "9.70")).await;
    assert_eq!(replay["status"], "duplicate");
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// settle writes how each job ended in the transaction that decided it: a posted job's queue row
/// is gone, a dead-lettered job's row is killed, and a job waiting for its retry is due again
/// later, fetchable by any worker.
async fn each_job_ends_in_the_transaction_that_decides_it(backend: Backend) {
    let app = spawn(AppOptions {
        workers: FAST_WORKERS
            .replace("backoff_base_ms = 100", "backoff_base_ms = 3000")
            .replace("backoff_max_ms = 1000", "backoff_max_ms = 3000")
            + "\nattempts_max = 2",
        ..AppOptions::on(backend)
    })
    .await;
    let ok = charge("ch_1", "100.00", "3.20", "96.80");
    assert_eq!(deliver(&app, "msg_ok", &ok).await.0, 200);
    let bad = charge("ch_2", "1.00", "0.10", "0.50");
    assert_eq!(deliver(&app, "msg_bad", &bad).await.0, 200);
    let wait = payout("payout_failed", "po_never", "7.00");
    assert_eq!(deliver(&app, "msg_wait", &wait).await.0, 200);
    app.wait_for(
        "the payout failure to wait for its retry",
        30,
        "SELECT EXISTS (SELECT 1 FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
                        WHERE e.external_id = 'msg_wait' AND a.outcome = 'transient')",
    )
    .await;
    let (status, unlocked, later) = app.job_row("msg_wait").await.expect("a waiting job row");
    assert_eq!(
        (status.as_str(), unlocked, later),
        ("Pending", true, true),
        "a job waiting for its retry is pending, unlocked, due later"
    );
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_ok").await, ("posted".into(), None));
    assert_eq!(
        app.job_row("msg_ok").await,
        None,
        "a posted job's row is gone"
    );
    for (id, code) in [
        ("msg_bad", "invalid_facts"),
        ("msg_wait", "dependency_not_ready"),
    ] {
        assert_eq!(
            app.event_state(id).await,
            ("abandoned".into(), Some(code.into()))
        );
        let (status, ..) = app
            .job_row(id)
            .await
            .expect("a dead-lettered job's row is kept");
        assert_eq!(status, "Killed", "{id}");
    }
    assert_eq!(app.jobs().await, 2, "only the two killed rows are left");
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// Group commit: starts and postings of many jobs share one transaction, yet each job gets
/// exactly the answer it would have had alone, in order, and a job refused for its own reason
/// writes nothing.
/// A posting's answer, named: `new`, `replayed`, `settled`, or the error's code.
fn answer_code(answer: Result<Posted, ledger::PostError>) -> String {
    match answer {
        Ok(Posted::New { .. }) => "new".to_owned(),
        Ok(Posted::Replayed { .. }) => "replayed".to_owned(),
        Ok(Posted::AlreadySettled) => "settled".to_owned(),
        Ok(Posted::Movements {
            written, existing, ..
        }) => format!("movements {written}+{existing}"),
        Err(error) => error.code().to_owned(),
    }
}

async fn a_group_of_postings_answers_each_job_as_if_alone(backend: Backend) {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::on(backend)
    })
    .await;
    let deliveries = [
        ("msg_new", charge("ch_a", "100.00", "3.20", "96.80")),
        ("msg_invalid", charge("ch_b", "100.00", "3.20", "90.00")),
        ("msg_paid", payout("payout_paid", "po_1", "500.00")),
        ("msg_failed", payout("payout_failed", "po_1", "500.00")),
        (
            "msg_same_movement",
            charge("ch_a", "100.00", "3.20", "96.80"),
        ),
        (
            "msg_other_facts",
            charge("ch_a", "200.00", "3.20", "196.80"),
        ),
        ("msg_not_ready", payout("payout_failed", "po_2", "70.00")),
    ];
    let mut jobs = Vec::new();
    for (id, body) in &deliveries {
        assert_eq!(deliver(&app, id, body).await.0, 200, "{id}");
        jobs.push(app.job_of(id).await);
    }
    let starts: Vec<(JobRef, String)> = jobs
        .iter()
        .map(|job| (job.clone(), "worker-g".to_owned()))
        .collect();
    let started: Vec<AttemptStart> = app
        .store
        .start_attempts(&starts, 8, 5_000)
        .await
        .into_iter()
        .map(|s| s.expect("start"))
        .collect();
    assert_eq!(started, vec![AttemptStart::Run { attempt: 1 }; 7]);
    let posts: Vec<(JobRef, u32)> = jobs.iter().map(|job| (job.clone(), 1)).collect();
    let answers: Vec<String> = app
        .store
        .post_many(&posts, &PostingRules::default(), 5_000)
        .await
        .into_iter()
        .map(answer_code)
        .collect();
    assert_eq!(
        answers,
        [
            "new",
            "invalid_facts",
            "new",
            "new",
            "replayed",
            "source_replay_conflict",
            "dependency_not_ready"
        ]
    );
    // Three entries (the charge, the payout, its reversal).
    assert_eq!(app.count("journal_entries").await, 3);
    if backend == Backend::Postgres {
        assert_eq!(
            app.scalar("SELECT count(DISTINCT xmin::text) FROM journal_entries")
                .await,
            1,
            "written by one transaction"
        );
    }
    assert_eq!(
        app.scalar(
            "SELECT count(*) FROM journal_entries WHERE kind = 'payout_failed' AND reverses_entry_id IS NOT NULL"
        )
        .await,
        1
    );
    for (id, status) in [
        ("msg_new", "posted"),
        ("msg_invalid", "recorded"),
        ("msg_paid", "posted"),
        ("msg_failed", "posted"),
        ("msg_same_movement", "posted"),
        ("msg_other_facts", "recorded"),
        ("msg_not_ready", "recorded"),
    ] {
        assert_eq!(app.event_state(id).await.0, status, "{id}");
    }
    // The refused jobs wrote nothing: their attempts are still open for the runner to close,
    // and their queue rows are still there.
    let open = app
        .texts(
            "SELECT e.external_id FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
             WHERE a.finished_at IS NULL ORDER BY e.id",
        )
        .await;
    assert_eq!(open, ["msg_invalid", "msg_other_facts", "msg_not_ready"]);
    assert_eq!(app.jobs().await, 3);
    assert!(app.failed_invariants().await.is_empty());
    // A second group mixes every kind of start: settled events (nothing to do), attempts that
    // never finished (closed as died: rescued), and a new job's first attempt.
    let later = charge("ch_later", "10.00", "0.30", "9.70");
    assert_eq!(deliver(&app, "msg_later", &later).await.0, 200);
    let mut starts = starts;
    starts.push((app.job_of("msg_later").await, "worker-g".to_owned()));
    let again: Vec<AttemptStart> = app
        .store
        .start_attempts(&starts, 8, 5_000)
        .await
        .into_iter()
        .map(|s| s.expect("start"))
        .collect();
    let rescued = AttemptStart::Rescued { attempts: 1 };
    let nothing = AttemptStart::NothingToDo;
    assert_eq!(
        again,
        [
            nothing,
            rescued,
            nothing,
            nothing,
            nothing,
            rescued,
            rescued,
            AttemptStart::Run { attempt: 1 }
        ]
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM job_attempts WHERE outcome = 'died'")
            .await,
        3
    );
}

/// A worker gives a job back to the queue (a retry, a rescue's backoff, a store failure) only
/// while it still holds it: once the job was rescued from it and fetched by another worker, its
/// late give-back changes nothing (it would unlock a job another worker is running).
async fn only_the_worker_holding_a_job_gives_it_back(backend: Backend) {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::on(backend)
    })
    .await;
    let body = charge("ch_1", "10.00", "0.30", "9.70");
    assert_eq!(deliver(&app, "msg_1", &body).await.0, 200);
    let job = app.job_of("msg_1").await;
    let (workers, jobs) = match backend {
        Backend::Postgres => ("apalis.workers", "apalis.jobs"),
        Backend::Sqlite => ("Workers", "Jobs"),
    };
    app.exec(&format!(
        "INSERT INTO {workers} (id, worker_type, storage_name) VALUES
             ('worker-a', 'settle::PostSettlement', 'test'), ('worker-b', 'settle::PostSettlement', 'test');
         UPDATE {jobs} SET status = 'Queued', lock_by = 'worker-b' WHERE id = '{}'",
        job.job_id
    ))
    .await
    .expect("worker-b holds the job");
    app.store
        .retry_later(&job.job_id, "worker-a", 60_000)
        .await
        .expect("late give-back");
    assert_eq!(
        app.job_row("msg_1").await,
        Some(("Queued".to_owned(), false, false)),
        "worker-a no longer holds the job: nothing changed"
    );
    app.store
        .retry_later(&job.job_id, "worker-b", 60_000)
        .await
        .expect("give-back");
    assert_eq!(
        app.job_row("msg_1").await,
        Some(("Pending".to_owned(), true, true)),
        "pending, unlocked, due later"
    );
}

/// A job whose attempt died with its worker is a suspect: a plain start of it writes nothing,
/// and only a start made alone opens its next attempt.
async fn a_job_whose_attempt_died_starts_again_only_alone(backend: Backend) {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::on(backend)
    })
    .await;
    deliver(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    let job = app.job_of("msg_1").await;
    let start = |worker: &'static str| app.store.start_attempt(&job, worker, 8, 5_000);
    assert_eq!(
        start("worker-a").await.expect("start"),
        AttemptStart::Run { attempt: 1 }
    );
    // worker-a dies with its attempt open; the next start closes it as died.
    assert_eq!(
        start("worker-b").await.expect("start"),
        AttemptStart::Rescued { attempts: 1 }
    );
    for _ in 0..2 {
        assert_eq!(
            start("worker-b").await.expect("start"),
            AttemptStart::Suspect
        );
    }
    assert_eq!(
        app.count("job_attempts").await,
        1,
        "a suspect's plain start writes nothing"
    );
    assert_eq!(
        app.store
            .start_attempt_alone(&job, "worker-b", 8, 5_000)
            .await
            .expect("start alone"),
        AttemptStart::Run { attempt: 2 }
    );
    let posted = app
        .store
        .post(&job, 2, &PostingRules::default(), 5_000)
        .await
        .expect("post");
    assert!(matches!(posted, Posted::New { .. }), "{posted:?}");
    assert_eq!(
        app.scalar(
            "SELECT count(*) FROM job_attempts
             WHERE (attempt = 1 AND outcome = 'died') OR (attempt = 2 AND outcome = 'posted')"
        )
        .await,
        2
    );
    assert_eq!(app.count("job_attempts").await, 2);
    // Once posted, a start (plain or alone) has nothing to do.
    assert_eq!(
        start("worker-c").await.expect("start"),
        AttemptStart::NothingToDo
    );
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// A canonical `charge_settled` event as the ingress hands it to the store.
async fn a_group_of_deliveries_inserts_only_free_keys_with_one_commit(backend: Backend) {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::on(backend)
    })
    .await;
    let stored = new_charge("msg_stored", "ch_s", "10.00");
    assert!(matches!(
        app.store
            .record(std::slice::from_ref(&stored))
            .await
            .expect("record")[..],
        [ledger::Recorded::New(_)]
    ));
    let group = [
        new_charge("msg_a", "ch_a", "10.00"),
        stored.clone(),
        new_charge("msg_stored", "ch_s", "11.00"),
        new_charge("msg_b", "ch_b", "10.00"),
        new_charge("msg_b", "ch_b", "12.00"),
    ];
    let refs: Vec<&ledger::NewEvent> = group.iter().collect();
    let inserted = app.store.record_new(&refs, 1000).await.expect("group");
    let new: Vec<bool> = inserted.iter().map(Option::is_some).collect();
    assert_eq!(
        new,
        [true, false, false, true, false],
        "free keys inserted once, taken ones (stored, or earlier in the group) left alone"
    );
    assert_eq!(app.count("settlement_events").await, 3);
    assert_eq!(app.jobs().await, 3, "one job per new event");
    assert_eq!(
        app.count("event_conflicts").await,
        0,
        "nothing written for taken keys"
    );
    let amount = app
        .texts("SELECT CAST(facts AS TEXT) FROM settlement_events WHERE external_id = 'msg_b'")
        .await;
    assert!(
        amount[0].contains("\"10.00\""),
        "the group's first msg_b won: {amount:?}"
    );
    // What the group left to `record` is told apart there, as for a delivery alone.
    let replays: Vec<Vec<ledger::Recorded>> = futures::future::join_all(
        [&group[1], &group[2], &group[4]]
            .map(|event| app.store.record(std::slice::from_ref(event))),
    )
    .await
    .into_iter()
    .map(|r| r.expect("record"))
    .collect();
    assert!(matches!(replays[0][..], [ledger::Recorded::Duplicate(_)]));
    assert!(matches!(
        replays[1][..],
        [ledger::Recorded::Conflict { .. }]
    ));
    assert!(matches!(
        replays[2][..],
        [ledger::Recorded::Conflict { .. }]
    ));
    assert_eq!(app.count("event_conflicts").await, 2);
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// Holds the database's write side (PostgreSQL: a lock on `settlement_events` that inserts wait
/// for; SQLite: the write lock) until the returned guard's task is told to let go.
async fn hold_writes(app: &TestApp) -> tokio::sync::oneshot::Sender<()> {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (held, holding) = tokio::sync::oneshot::channel::<()>();
    match app.backend() {
        Backend::Postgres => {
            let pool = app.pg().clone();
            tokio::spawn(async move {
                let mut tx = pool.begin().await.expect("begin");
                sqlx::query("LOCK TABLE settlement_events IN SHARE MODE")
                    .execute(&mut *tx)
                    .await
                    .expect("lock");
                let _ = held.send(());
                let _ = released.await;
                tx.rollback().await.expect("release");
            });
        }
        Backend::Sqlite => {
            let url = app.database_url();
            tokio::spawn(async move {
                use sqlx::Connection;
                let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("open");
                sqlx::raw_sql("BEGIN IMMEDIATE")
                    .execute(&mut conn)
                    .await
                    .expect("write lock");
                let _ = held.send(());
                let _ = released.await;
                sqlx::raw_sql("ROLLBACK")
                    .execute(&mut conn)
                    .await
                    .expect("release");
            });
        }
    }
    holding.await.expect("holding");
    release
}

/// `(count, sum)` of a summary or histogram on `/metrics`.
async fn metric_count_and_sum(app: &TestApp, name: &str) -> (f64, f64) {
    (
        app.metric(&format!("{name}_count")).await,
        app.metric(&format!("{name}_sum")).await,
    )
}

async fn a_delivery_the_database_refuses_fails_alone_not_its_group(backend: Backend) {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        // One group at a time, so the deliveries below gather behind the first.
        extra: "[ingress]\ngroups_max = 1".into(),
        ..AppOptions::on(backend)
    })
    .await;
    let refuse = match backend {
        Backend::Postgres => {
            "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$
             BEGIN IF NEW.external_id = 'msg_poison' THEN RAISE EXCEPTION 'refused by the test'; END IF;
             RETURN NEW; END $$ LANGUAGE plpgsql;
             CREATE TRIGGER refuse_poison BEFORE INSERT ON settlement_events
             FOR EACH ROW EXECUTE FUNCTION refuse_poison();"
        }
        Backend::Sqlite => {
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON settlement_events
             WHEN NEW.external_id = 'msg_poison'
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
        }
    };
    app.exec(refuse).await.expect("trigger");
    let release = hold_writes(&app).await;
    let mut ids: Vec<String> = (0..20).map(|i| format!("msg_{i}")).collect();
    ids.insert(10, "msg_poison".into());
    let bodies: Vec<String> = ids
        .iter()
        .map(|id| charge(&format!("ch_{id}"), "10.00", "0.30", "9.70"))
        .collect();
    let first_body = charge("ch_first", "10.00", "0.30", "9.70");
    // The first delivery's group waits for the held writes; the others gather behind it.
    let first = deliver(&app, "msg_first", &first_body);
    let rest = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        futures::future::join_all(
            ids.iter()
                .zip(&bodies)
                .map(|(id, body)| deliver(&app, id, body)),
        )
        .await
    };
    let released = async {
        tokio::time::sleep(std::time::Duration::from_millis(800)).await;
        let _ = release.send(());
    };
    let (first, answers, ()) = tokio::join!(first, rest, released);
    assert_eq!(
        (first.0, first.1["status"].as_str()),
        (200, Some("recorded"))
    );
    for (id, (status, body)) in ids.iter().zip(&answers) {
        if id == "msg_poison" {
            assert_eq!(
                (*status, body["error"].as_str()),
                (503, Some("unavailable")),
                "{id}"
            );
        } else {
            assert_eq!(
                (*status, body["status"].as_str()),
                (200, Some("recorded")),
                "{id}"
            );
        }
    }
    assert_eq!(
        app.count("settlement_events").await,
        21,
        "all but the refused one"
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE external_id = 'msg_poison'")
            .await,
        0
    );
    let (groups, deliveries) = metric_count_and_sum(&app, "settle_ingress_group_size").await;
    assert_eq!(deliveries, 22.0, "every delivery went through a group");
    assert!(
        groups < deliveries,
        "deliveries shared groups: {groups} groups for {deliveries}"
    );
}

async fn a_group_of_postings_larger_than_a_statement_posts_each_once_in_one_transaction(
    backend: Backend,
) {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::on(backend)
    })
    .await;
    // 100 postings of about 400 bytes each: several statements of STATEMENT_BYTES_MAX.
    let mut deliveries: Vec<(String, String)> = (0..100)
        .map(|i| {
            (
                format!("msg_{i}"),
                charge(&format!("ch_{i}"), "10.00", "0.30", "9.70"),
            )
        })
        .collect();
    deliveries.push(("msg_same".into(), charge("ch_0", "10.00", "0.30", "9.70")));
    deliveries.push(("msg_other".into(), charge("ch_1", "20.00", "0.30", "19.70")));
    let mut jobs = Vec::new();
    for (id, body) in &deliveries {
        assert_eq!(deliver(&app, id, body).await.0, 200, "{id}");
        jobs.push(app.job_of(id).await);
    }
    let starts: Vec<(JobRef, String)> = jobs
        .iter()
        .map(|job| (job.clone(), "worker-g".to_owned()))
        .collect();
    for start in app.store.start_attempts(&starts, 8, 5_000).await {
        assert_eq!(start.expect("start"), AttemptStart::Run { attempt: 1 });
    }
    let posts: Vec<(JobRef, u32)> = jobs.iter().map(|job| (job.clone(), 1)).collect();
    let answers: Vec<String> = app
        .store
        .post_many(&posts, &PostingRules::default(), 5_000)
        .await
        .into_iter()
        .map(answer_code)
        .collect();
    let mut expected = vec!["new".to_owned(); 100];
    expected.extend(["replayed".to_owned(), "source_replay_conflict".to_owned()]);
    assert_eq!(answers, expected);
    assert_eq!(app.count("journal_entries").await, 100);
    if backend == Backend::Postgres {
        assert_eq!(
            app.scalar("SELECT count(DISTINCT xmin::text) FROM journal_entries")
                .await,
            1,
            "written by one transaction"
        );
    }
    assert_eq!(app.event_state("msg_same").await.0, "posted");
    assert_eq!(app.event_state("msg_other").await.0, "recorded");
    assert_eq!(
        app.jobs().await,
        1,
        "only the refused job's queue row is left"
    );
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

async fn workers_with_two_groups_in_flight_post_every_event_once(backend: Backend) {
    let app = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nconcurrency = 32\nbatch_size = 64\ngroups_max = 2"),
        ..AppOptions::on(backend)
    })
    .await;
    // 300 events; the last 20 repeat the movements of the first 20 (same facts): replays.
    let deliveries: Vec<(String, String)> = (0..300)
        .map(|i| {
            let movement = if i >= 280 { i - 280 } else { i };
            (
                format!("msg_{i}"),
                charge(&format!("ch_{movement}"), "10.00", "0.30", "9.70"),
            )
        })
        .collect();
    for chunk in deliveries.chunks(50) {
        let answers =
            futures::future::join_all(chunk.iter().map(|(id, body)| deliver(&app, id, body))).await;
        assert!(answers.iter().all(|(status, _)| *status == 200));
    }
    app.wait_settled(60).await;
    assert_eq!(app.count("journal_entries").await, 280);
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE status = 'posted'")
            .await,
        300
    );
    assert_eq!(app.count("dead_letters").await, 0);
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// The labels the state machines write (`ledger::state`) are exactly those the tables' `CHECK`
/// constraints accept: each is accepted on a real row, and a label no machine has is refused.
async fn every_state_label_is_one_the_tables_accept(backend: Backend) {
    use ledger::job::{AttemptOutcome, ErrorClass};
    use ledger::review::{ConflictState, DeadLetterState};
    use ledger::state::StateMachine;

    let app = spawn(AppOptions::on(backend)).await;
    deliver(&app, "msg_ok", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    deliver(&app, "msg_ok", &charge("ch_1", "100.00", "3.00", "97.00")).await;
    deliver(&app, "msg_bad", &charge("ch_2", "100.00", "3.20", "90.00")).await;
    app.wait_settled(30).await;
    assert_eq!(app.count("event_conflicts").await, 1);
    assert_eq!(app.count("dead_letters").await, 1);

    // (what, the statement with `{}` for the label, every label settle writes there)
    let event_labels: Vec<&str> = EventStatus::STATES.iter().map(|s| s.label()).collect();
    let outcomes: Vec<&str> = AttemptOutcome::ALL.iter().map(|o| o.as_str()).collect();
    let dead_letter_labels: Vec<&str> = DeadLetterState::STATES.iter().map(|s| s.label()).collect();
    let classes = [
        ErrorClass::Permanent.as_str(),
        ErrorClass::Exhausted.as_str(),
    ];
    let conflict_labels: Vec<&str> = ConflictState::STATES.iter().map(|s| s.label()).collect();
    let columns: [(&str, &str, &[&str]); 5] = [
        (
            "settlement_events.status",
            "UPDATE settlement_events SET status = '{}' WHERE external_id = 'msg_ok'",
            &event_labels,
        ),
        (
            "job_attempts.outcome",
            "UPDATE job_attempts SET outcome = '{}', finished_at = started_at",
            &outcomes,
        ),
        (
            "dead_letters.state",
            "UPDATE dead_letters SET state = '{}',
                 decided_at = CASE WHEN '{}' = 'open' THEN NULL ELSE abandoned_at END,
                 decided_by = CASE WHEN '{}' = 'open' THEN NULL ELSE 'ops' END",
            &dead_letter_labels,
        ),
        (
            "dead_letters.error_class",
            "UPDATE dead_letters SET error_class = '{}'",
            &classes,
        ),
        (
            "event_conflicts.state",
            "UPDATE event_conflicts SET state = '{}',
                 resolved_at = CASE WHEN '{}' = 'open' THEN NULL ELSE first_seen_at END",
            &conflict_labels,
        ),
    ];
    for (column, statement, labels) in columns {
        for label in labels.iter().copied().chain(["bogus"]) {
            let sql = statement.replace("{}", label);
            let answer = app.try_rolled_back(&sql).await;
            if label == "bogus" {
                let refused = answer.expect_err(&format!("{column} = bogus is refused"));
                assert!(
                    refused.to_lowercase().contains("check"),
                    "{column}: {refused}"
                );
            } else {
                assert!(
                    answer.as_ref().is_ok_and(|rows| *rows > 0),
                    "{column} = {label}: {answer:?}"
                );
            }
        }
    }
}

/// Each case of the start rule (`ledger::job::{start_gate, start_step}`), set up in the tables and
/// started through the store: PostgreSQL answers with its PL/pgSQL fast path
/// (`settle_start_attempt`), SQLite with the rule itself, and both must answer as the rule does
/// and leave what the answer says (an attempt row, a dead letter, a killed or deleted job).
async fn starting_an_attempt_follows_the_start_rule_in_every_case(backend: Backend) {
    use ledger::job::{AttemptOutcome, start_gate, start_step};

    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::on(backend)
    })
    .await;
    // (name, attempts already there as (number, outcome; None = still open), attempts_max,
    // alone, what the rule must answer)
    type Case = (
        &'static str,
        &'static [(u32, Option<&'static str>)],
        u32,
        bool,
        AttemptStart,
    );
    let cases: [Case; 8] = [
        ("fresh", &[], 3, false, AttemptStart::Run { attempt: 1 }),
        (
            "after_transient",
            &[(1, Some("transient"))],
            3,
            false,
            AttemptStart::Run { attempt: 2 },
        ),
        (
            "found_dead",
            &[(1, None)],
            3,
            false,
            AttemptStart::Rescued { attempts: 1 },
        ),
        (
            "suspect",
            &[(1, Some("died"))],
            3,
            false,
            AttemptStart::Suspect,
        ),
        (
            "suspect_alone",
            &[(1, Some("died"))],
            3,
            true,
            AttemptStart::Run { attempt: 2 },
        ),
        (
            "exhausted",
            &[(1, Some("transient")), (2, Some("transient"))],
            2,
            false,
            AttemptStart::Exhausted,
        ),
        (
            "exhausted_dead",
            &[(1, Some("transient")), (2, None)],
            2,
            false,
            AttemptStart::Exhausted,
        ),
        (
            "rescued_last",
            &[(1, Some("transient")), (2, None)],
            3,
            false,
            AttemptStart::Rescued { attempts: 2 },
        ),
    ];
    // Each case twice: started alone (`settle_start_attempt` on PostgreSQL), then, but for the
    // case that starts alone, in groups (`settle_start_attempts`, whose set-based path takes
    // fresh jobs and hands the rest to the single start).
    for grouped in [false, true] {
        let mut prepared = Vec::new();
        for (i, &(name, attempts, attempts_max, alone, expected)) in cases.iter().enumerate() {
            if grouped && alone {
                continue;
            }
            let id = format!("msg_{name}_{grouped}");
            deliver(
                &app,
                &id,
                &charge(&format!("ch_{i}_{grouped}"), "10.00", "0.30", "9.70"),
            )
            .await;
            let job = app.job_of(&id).await;
            for (number, outcome) in attempts {
                let finished = outcome.map_or("NULL".to_owned(), |o| format!("'{o}'"));
                let finished_at = if outcome.is_some() {
                    "'2026-12-04T00:00:01Z'"
                } else {
                    "NULL"
                };
                app.exec(&format!(
                "INSERT INTO job_attempts (event_id, job_id, attempt, worker, started_at, finished_at, outcome, error_code)
                 VALUES ({}, '{}', {number}, 'w', '2026-12-04T00:00:00Z', {finished_at}, {finished},
                         CASE WHEN {finished} IS NULL THEN NULL ELSE 'upstream_unavailable' END)",
                job.event_id.get(),
                job.job_id
            ))
            .await
            .expect("attempt");
            }
            // The rule, on the facts just written.
            assert_eq!(
                start_gate(
                    Some((EventStatus::Recorded, &job.job_id)),
                    &job.job_id,
                    false
                ),
                None
            );
            let died_now = attempts.iter().filter(|(_, o)| o.is_none()).count();
            let last = attempts.last().map(|(_, o)| {
                o.map_or(AttemptOutcome::Died, |o| {
                    AttemptOutcome::parse(o).expect("outcome")
                })
            });
            let started = attempts.last().map_or(0, |(n, _)| *n);
            let ruled = start_step(started, died_now, last, attempts_max, alone);
            assert_eq!(ruled, expected, "{name}: the rule");
            prepared.push((name, id, job, died_now, ruled, attempts_max, alone));
        }
        let mut answers = Vec::new();
        if grouped {
            for max in [2, 3] {
                let group: Vec<_> = prepared.iter().filter(|p| p.5 == max).collect();
                let starts: Vec<(JobRef, String)> = group
                    .iter()
                    .map(|p| (p.2.clone(), "w2".to_owned()))
                    .collect();
                let answered = app.store.start_attempts(&starts, max, 1_000).await;
                for (p, answer) in group.into_iter().zip(answered) {
                    answers.push((p.clone(), answer.expect("start")));
                }
            }
        } else {
            for p in &prepared {
                let (job, max) = (&p.2, p.5);
                let answer = if p.6 {
                    app.store.start_attempt_alone(job, "w2", max, 1_000).await
                } else {
                    app.store.start_attempt(job, "w2", max, 1_000).await
                };
                answers.push((p.clone(), answer.expect("start")));
            }
        }
        for ((name, id, job, died_now, ruled, _, _), answered) in answers {
            let name = format!("{name} (grouped: {grouped})");
            assert_eq!(answered, ruled, "{name}: the store");
            let (status, code) = app.event_state(&id).await;
            let open = app
                .scalar(&format!(
                    "SELECT count(*) FROM job_attempts WHERE job_id = '{}' AND finished_at IS NULL",
                    job.job_id
                ))
                .await;
            match answered {
                AttemptStart::Run { attempt } => {
                    assert_eq!((status.as_str(), open), ("recorded", 1), "{name}");
                    let n = app
                    .scalar(&format!(
                        "SELECT CAST(max(attempt) AS BIGINT) FROM job_attempts WHERE job_id = '{}'",
                        job.job_id
                    ))
                    .await;
                    assert_eq!(n, i64::from(attempt), "{name}");
                }
                AttemptStart::Exhausted => {
                    assert_eq!((status.as_str(), open), ("abandoned", 0), "{name}");
                    // The dead letter carries the last attempt's error: a worker's death when that
                    // attempt was found open.
                    let last_error = if died_now > 0 {
                        "worker_died"
                    } else {
                        "upstream_unavailable"
                    };
                    assert_eq!(
                        code.as_deref(),
                        Some(last_error),
                        "{name}: the last attempt's error"
                    );
                    let killed = app.job_row(&id).await.map(|(status, _, _)| status);
                    assert_eq!(killed.as_deref(), Some("Killed"), "{name}");
                }
                _ => assert_eq!(
                    (status.as_str(), open),
                    ("recorded", 0),
                    "{name}: nothing started"
                ),
            }
        }
    }

    // The first part of the rule: a job its event no longer waits for, and a job of no event.
    deliver(
        &app,
        "msg_requeued",
        &charge("ch_gate", "10.00", "0.30", "9.70"),
    )
    .await;
    let current = app.job_of("msg_requeued").await;
    let old = JobRef {
        job_id: "01JOBTHEEVENTNOLONGERWAITSFOR".into(),
        event_id: current.event_id,
    };
    assert_eq!(
        start_gate(
            Some((EventStatus::Recorded, &current.job_id)),
            &old.job_id,
            true
        ),
        Some(AttemptStart::NothingToDo),
        "a job its event no longer waits for is done, paused or not"
    );
    assert_eq!(
        app.store
            .start_attempt(&old, "w2", 3, 1_000)
            .await
            .expect("start"),
        AttemptStart::NothingToDo
    );
    let stray = JobRef {
        job_id: "01JOBOFNOEVENT".into(),
        event_id: ledger::EventId::new(987_654_321),
    };
    assert_eq!(
        start_gate(None, &stray.job_id, false),
        Some(AttemptStart::Stray)
    );
    assert_eq!(
        app.store
            .start_attempt(&stray, "w2", 3, 1_000)
            .await
            .expect("start"),
        AttemptStart::Stray
    );

    // A paused source: its waiting jobs start nothing, alone or in a group, and keep their queue
    // rows; once resumed they start.
    let who = ledger::review::Decision {
        actor: "ops".into(),
        reason: "provider incident".into(),
    };
    let paused: Vec<JobRef> = {
        let mut jobs = Vec::new();
        for i in 0..3 {
            let id = format!("msg_paused_{i}");
            deliver(
                &app,
                &id,
                &charge(&format!("ch_paused_{i}"), "10.00", "0.30", "9.70"),
            )
            .await;
            jobs.push(app.job_of(&id).await);
        }
        jobs
    };
    app.store.pause_source("std", &who).await.expect("pause");
    assert_eq!(
        start_gate(
            Some((EventStatus::Recorded, &paused[0].job_id)),
            &paused[0].job_id,
            true
        ),
        Some(AttemptStart::Paused)
    );
    assert_eq!(
        app.store
            .start_attempt(&paused[0], "w2", 3, 1_000)
            .await
            .expect("start"),
        AttemptStart::Paused
    );
    let group: Vec<(JobRef, String)> = paused[1..]
        .iter()
        .map(|job| (job.clone(), "w2".to_owned()))
        .collect();
    for answer in app.store.start_attempts(&group, 3, 1_000).await {
        assert_eq!(answer.expect("start"), AttemptStart::Paused, "grouped");
    }
    for i in 0..3 {
        let id = format!("msg_paused_{i}");
        assert_eq!(app.event_state(&id).await.0, "recorded");
        assert!(app.job_row(&id).await.is_some(), "{id}: its job stays");
    }
    assert_eq!(
        app.scalar("SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id WHERE e.external_id LIKE 'msg_paused_%'")
            .await,
        0,
        "nothing started, nothing counted"
    );
    app.store.resume_source("std", &who).await.expect("resume");
    assert_eq!(
        app.store
            .start_attempt(&paused[0], "w2", 3, 1_000)
            .await
            .expect("start"),
        AttemptStart::Run { attempt: 1 }
    );
    let failed = app.failed_invariants().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// A requeue and a discard of the same 250 dead letters at once, a hundred to a transaction each:
/// every dead letter is decided by exactly one of them, with exactly one audit row; the other is
/// told it was already decided, and neither waits on the other for ever.
async fn two_bulk_actions_at_once_decide_each_dead_letter_once(backend: Backend) {
    use ledger::review::{DeadLetterState, Decision, DecisionError};
    let app = spawn(quick(backend, 1)).await;
    for i in 0..250 {
        deliver(
            &app,
            &format!("msg_bad_{i}"),
            &charge(&format!("ch_{i}"), "1.00", "0.10", "0.50"),
        )
        .await;
    }
    app.wait_settled(60).await;
    let ids: Vec<i64> = app
        .texts("SELECT CAST(id AS TEXT) FROM dead_letters WHERE state = 'open' ORDER BY id")
        .await
        .iter()
        .map(|id| id.parse().expect("id"))
        .collect();
    assert_eq!(ids.len(), 250);
    let who = |actor: &str, reason: &str| Decision {
        actor: actor.into(),
        reason: reason.into(),
    };
    let (olivia, dana) = (who("olivia", "fixed upstream"), who("dana", "sandbox data"));
    let (requeued, discarded) = tokio::join!(
        app.store
            .decide_dead_letters(&ids, DeadLetterState::Requeued, &olivia),
        app.store
            .decide_dead_letters(&ids, DeadLetterState::Discarded, &dana),
    );
    let mut changed = 0;
    for (i, (a, b)) in requeued.iter().zip(&discarded).enumerate() {
        let won = |r: &Result<ledger::review::Decided, DecisionError>| {
            r.as_ref().is_ok_and(|d| d.changed)
        };
        let lost = |r: &Result<ledger::review::Decided, DecisionError>| {
            matches!(r, Err(DecisionError::AlreadyDecided(_)))
        };
        assert!(
            (won(a) && lost(b)) || (lost(a) && won(b)),
            "dead letter {}: {a:?} / {b:?}",
            ids[i]
        );
        changed += 1;
    }
    assert_eq!(changed, 250);
    assert_eq!(
        app.scalar("SELECT count(*) FROM audit_log WHERE subject_type = 'dead_letter'")
            .await,
        250,
        "one audit row per dead letter"
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM dead_letters WHERE id IN (SELECT subject_id FROM audit_log) AND state = 'open'")
            .await,
        0
    );
}
