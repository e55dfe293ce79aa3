//! Posting: recorded events become exactly one balanced entry each, through real workers on
//! real PostgreSQL; failures retry with backoff or end in the dead letter.

use ledger::job::{AttemptStart, JobRef, Posted};
use ledger::{EventId, PostingRules};
use ops::Role;
use serde_json::json;
use tests::TestApp;
use tests::app::{
    AppOptions, FAST_WORKERS, canonical, charge, config_toml, spawn, spawn_app, start,
};
use tests::process::{Scratch, run_settle};

fn payout(kind: &str, payout_id: &str, amount: &str) -> String {
    canonical(
        kind,
        json!({"movement_id": payout_id, "occurred_at": "2026-11-30T18:00:00Z", "currency": "USD",
               "amount": amount, "payout_id": payout_id}),
    )
}

async fn record(app: &TestApp, id: &str, body: &str) -> i64 {
    let response = app.post_standard(id, body).await;
    assert_eq!(response.status().as_u16(), 200, "{id}");
    let json: serde_json::Value = response.json().await.expect("json");
    json["event_id"].as_i64().expect("event id")
}

/// `(account, amount)` lines of the entry that settles event `external_id`.
async fn lines_of(app: &TestApp, external_id: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT l.account, trim_scale(l.amount)::text FROM settlement_events e
         JOIN journal_lines l ON l.entry_id = e.posted_entry_id
         WHERE e.external_id = $1 ORDER BY l.line_no",
    )
    .bind(external_id)
    .fetch_all(app.pg())
    .await
    .expect("lines")
}

#[tokio::test]
async fn a_recorded_event_becomes_one_balanced_entry() {
    let app = spawn_app().await;
    record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_1").await, ("posted".into(), None));
    let lines = lines_of(&app, "msg_1").await;
    let expected = [
        ("std:balance", "96.8"),
        ("fees:std", "3.2"),
        ("sales", "-100"),
    ];
    assert_eq!(lines, expected.map(|(a, m)| (a.to_owned(), m.to_owned())));
    assert_eq!(app.count("journal_entries").await, 1);
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn running_a_job_twice_or_from_two_workers_at_once_writes_one_entry() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    let event_id = record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    let job_id: String = sqlx::query_scalar("SELECT job_id FROM settlement_events WHERE id = $1")
        .bind(event_id)
        .fetch_one(app.pg())
        .await
        .expect("job id");
    let job = JobRef {
        job_id,
        event_id: EventId::new(event_id),
    };
    let rules = PostingRules::default();
    // Two workers start the same job at the same time: the event lock orders them; the second
    // sees the first's open attempt as a worker that died, and backs off.
    let (a, b) = tokio::join!(
        app.store.start_attempt(&job, "worker-a", 8, 5_000),
        app.store.start_attempt(&job, "worker-b", 8, 5_000)
    );
    let mut starts = [a.expect("start a"), b.expect("start b")];
    starts.sort_by_key(|s| matches!(s, AttemptStart::Rescued { .. }));
    assert_eq!(
        starts,
        [
            AttemptStart::Run { attempt: 1 },
            AttemptStart::Rescued { attempts: 1 }
        ]
    );
    // Two runners in the posting transaction at once: one posts, the other finds it posted.
    let (a, b) = tokio::join!(
        app.store.post(&job, 1, &rules, 5_000),
        app.store.post(&job, 1, &rules, 5_000)
    );
    let mut outcomes = [a.expect("post a"), b.expect("post b")];
    outcomes.sort_by_key(|o| matches!(o, Posted::AlreadySettled));
    assert!(
        matches!(outcomes, [Posted::New { .. }, Posted::AlreadySettled]),
        "{outcomes:?}"
    );
    // And once more, after it is posted: nothing to do, nothing written.
    assert_eq!(
        app.store
            .start_attempt(&job, "worker-c", 8, 5_000)
            .await
            .expect("start"),
        AttemptStart::NothingToDo
    );
    assert_eq!(app.count("journal_entries").await, 1);
    assert_eq!(app.count("journal_lines").await, 3);
    assert_eq!(app.event_state("msg_1").await.0, "posted");
}

#[tokio::test]
async fn a_job_delivered_again_after_it_finished_writes_nothing_new() {
    let app = spawn_app().await;
    record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    app.wait_settled(30).await;
    // At-least-once delivery: the queue hands the finished job out again (its row, deleted
    // when it posted, is back).
    assert_eq!(app.jobs().await, 0, "the posted job's row is gone");
    sqlx::query(
        "INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
         SELECT job_id, 'settle::PostSettlement', convert_to(json_build_object('event_id', id)::text, 'UTF8'),
                'Pending', 0, 1000000, now()
         FROM settlement_events",
    )
    .execute(app.pg())
    .await
    .expect("deliver the job again");
    app.wait_for(
        "the redelivered job to finish",
        30,
        "SELECT NOT EXISTS (SELECT 1 FROM apalis.jobs)",
    )
    .await;
    assert_eq!(app.count("journal_entries").await, 1);
    let outcomes: Vec<String> = sqlx::query_scalar("SELECT outcome FROM job_attempts ORDER BY id")
        .fetch_all(app.pg())
        .await
        .expect("attempts");
    assert_eq!(
        outcomes,
        ["posted"],
        "the redelivery found the event posted and did not start an attempt"
    );
}

#[tokio::test]
async fn a_second_event_for_the_same_movement_replays_or_conflicts() {
    let app = spawn_app().await;
    let body = charge("ch_1", "100.00", "3.20", "96.80");
    record(&app, "msg_first", &body).await;
    app.wait_settled(30).await;
    // Another event (another webhook-id) describing the same charge with the same facts.
    record(&app, "msg_same", &body).await;
    // And one describing the same charge with different facts.
    record(
        &app,
        "msg_different",
        &charge("ch_1", "100.00", "3.00", "97.00"),
    )
    .await;
    app.wait_settled(30).await;

    assert_eq!(
        app.count("journal_entries").await,
        1,
        "the movement posted once"
    );
    assert_eq!(app.event_state("msg_same").await, ("posted".into(), None));
    let same_entry: bool = sqlx::query_scalar(
        "SELECT a.posted_entry_id = b.posted_entry_id FROM settlement_events a, settlement_events b
         WHERE a.external_id = 'msg_first' AND b.external_id = 'msg_same'",
    )
    .fetch_one(app.pg())
    .await
    .expect("entries");
    assert!(same_entry, "the replay points at the existing entry");
    assert_eq!(
        app.event_state("msg_different").await,
        ("abandoned".into(), Some("source_replay_conflict".into()))
    );
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn the_database_refuses_to_change_the_journal_or_write_an_unbalanced_entry() {
    let app = spawn_app().await;
    record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    let unposted = record(&app, "msg_bad", &charge("ch_2", "1.00", "0.10", "0.80")).await;
    app.wait_settled(30).await;
    for statement in [
        "UPDATE journal_lines SET amount = amount + 1",
        "UPDATE journal_entries SET description = 'edited'",
        "DELETE FROM journal_lines",
        "DELETE FROM journal_entries",
        "TRUNCATE journal_lines",
        "TRUNCATE journal_entries CASCADE",
        "TRUNCATE settlement_events CASCADE",
        "UPDATE settlement_events SET payload = '{}'",
        "DELETE FROM settlement_events",
    ] {
        let error = sqlx::query(statement)
            .execute(app.pg())
            .await
            .expect_err(statement);
        assert!(
            error.to_string().contains("refused")
                || error.to_string().contains("immutable")
                || error.to_string().contains("never deleted"),
            "{statement}: {error}"
        );
    }
    // The balance is checked when the statement that wrote an entry or its lines ends: an entry
    // without lines, an unbalanced entry with its lines, and a line that unbalances an existing
    // entry are each refused.
    let header = "INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id,
                      request_fingerprint, effective_date, description)
                  VALUES ('forged', $1, 'std', 'fee', 'x', repeat('0', 64), current_date, 'forged')";
    let refused = [
        (header.to_owned(), "at least two"),
        (
            format!(
                "WITH entry AS ({header} RETURNING id)
                 INSERT INTO journal_lines SELECT id, n, 'a', 'USD', amount
                 FROM entry, (VALUES (1, 10), (2, -9)) AS l(n, amount)"
            ),
            "does not balance",
        ),
        (
            "INSERT INTO journal_lines SELECT id, 9, 'a', 'USD', 1 FROM journal_entries
             WHERE $1 > 0"
                .to_owned(),
            "does not balance",
        ),
    ];
    for (statement, expected) in refused {
        let error = sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
            .bind(unposted)
            .execute(app.pg())
            .await
            .expect_err(&statement);
        assert!(error.to_string().contains(expected), "{statement}: {error}");
    }
    assert_eq!(app.count("journal_entries").await, 1);
    assert_eq!(app.count("journal_lines").await, 3);
}

#[tokio::test]
async fn a_transient_failure_retries_with_growing_gaps_until_it_posts() {
    let app = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nattempts_max = 8")
            .replace("backoff_base_ms = 100", "backoff_base_ms = 200"),
        ..AppOptions::default()
    })
    .await;
    // The failure of a payout that is not posted yet cannot be reversed: a transient wait.
    record(
        &app,
        "msg_failed",
        &payout("payout_failed", "po_1", "500.00"),
    )
    .await;
    app.wait_for(
        "three failed attempts",
        30,
        "SELECT count(*) = 3 FROM job_attempts WHERE outcome = 'transient'",
    )
    .await;
    record(&app, "msg_paid", &payout("payout_paid", "po_1", "500.00")).await;
    app.wait_settled(30).await;

    assert_eq!(app.event_state("msg_failed").await, ("posted".into(), None));
    let attempts: Vec<(i32, String, i64)> = sqlx::query_as(
        "SELECT a.attempt, a.outcome, (extract(epoch FROM a.started_at) * 1000)::bigint FROM job_attempts a
         JOIN settlement_events e ON e.id = a.event_id WHERE e.external_id = 'msg_failed' ORDER BY a.attempt",
    )
    .fetch_all(app.pg())
    .await
    .expect("attempts");
    let outcomes: Vec<&str> = attempts.iter().map(|a| a.1.as_str()).collect();
    // Failed N = 3 times, posted at attempt N + 1: the dependency arrived well inside the
    // fourth attempt's backoff (at least 400 ms).
    assert_eq!(
        outcomes,
        ["transient", "transient", "transient", "posted"],
        "posted at the attempt after the dependency arrived"
    );
    // Each gap is at least half its ceiling (base 200 ms doubling), so the floor doubles.
    for (i, pair) in attempts.windows(2).enumerate() {
        let gap_ms = pair[1].2 - pair[0].2;
        let floor_ms = 100 << i;
        assert!(
            gap_ms >= floor_ms,
            "gap {} is {gap_ms:.0} ms, below its floor {floor_ms} ms",
            i + 1
        );
    }
    let reversal: (Option<i64>, Vec<String>) = sqlx::query_as(
        "SELECT f.reverses_entry_id, array_agg(l.account || ' ' || l.amount::numeric(20,2)::text ORDER BY l.line_no)
         FROM journal_entries f JOIN journal_lines l ON l.entry_id = f.id
         WHERE f.kind = 'payout_failed' GROUP BY f.id",
    )
    .fetch_one(app.pg())
    .await
    .expect("reversal");
    let paid: i64 = sqlx::query_scalar("SELECT id FROM journal_entries WHERE kind = 'payout_paid'")
        .fetch_one(app.pg())
        .await
        .expect("paid");
    assert_eq!(
        reversal.0,
        Some(paid),
        "the failure reverses the paid entry"
    );
    assert_eq!(reversal.1, ["bank -500.00", "std:balance 500.00"]);
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn a_permanent_failure_is_dead_lettered_after_one_attempt() {
    let app = spawn_app().await;
    record(&app, "msg_bad", &charge("ch_1", "100.00", "3.20", "90.00")).await;
    app.wait_settled(30).await;
    let (class, code, attempts): (String, String, i32) = sqlx::query_as(
        "SELECT error_class, error_code, attempts FROM dead_letters WHERE state = 'open'",
    )
    .fetch_one(app.pg())
    .await
    .expect("dead letter");
    assert_eq!(
        (class.as_str(), code.as_str(), attempts),
        ("permanent", "invalid_facts", 1)
    );
    assert_eq!(app.count("job_attempts").await, 1);
    assert_eq!(app.event_state("msg_bad").await.0, "abandoned");
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn a_failure_that_never_clears_is_dead_lettered_after_attempts_max_and_never_runs_again() {
    let app = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nattempts_max = 4"),
        ..AppOptions::default()
    })
    .await;
    record(
        &app,
        "msg_failed",
        &payout("payout_failed", "po_never", "500.00"),
    )
    .await;
    app.wait_settled(30).await;
    let (class, code, attempts): (String, String, i32) = sqlx::query_as(
        "SELECT error_class, error_code, attempts FROM dead_letters WHERE state = 'open'",
    )
    .fetch_one(app.pg())
    .await
    .expect("dead letter");
    assert_eq!(
        (class.as_str(), code.as_str(), attempts),
        ("exhausted", "dependency_not_ready", 4)
    );

    // Wait past the longest backoff (1 s) several times over: nothing runs it again.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    assert_eq!(app.count("job_attempts").await, 4);
    let job_status: String = sqlx::query_scalar("SELECT status FROM apalis.jobs")
        .fetch_one(app.pg())
        .await
        .expect("job");
    assert_eq!(job_status, "Killed");
    assert_eq!(
        app.event_state("msg_failed").await,
        ("abandoned".into(), Some("dependency_not_ready".into()))
    );
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn unreadable_job_payloads_are_dead_lettered_or_refused_and_workers_keep_going() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record(
        &app,
        "msg_tampered",
        &charge("ch_1", "100.00", "3.20", "96.80"),
    )
    .await;
    // The event's job row is tampered with: JSON, but not a PostSettlement.
    sqlx::query("UPDATE apalis.jobs SET job = convert_to('{\"bogus\": true}', 'UTF8')")
        .execute(app.pg())
        .await
        .expect("tamper");
    // A stray JSON job of our queue that belongs to no event.
    sqlx::query(
        "INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
         VALUES (apalis.generate_ulid(), 'settle::PostSettlement', convert_to('[1, 2]', 'UTF8'), 'Pending', 0, 25, now())",
    )
    .execute(app.pg())
    .await
    .expect("stray job");
    // Bytes that are not JSON never enter the queue.
    let refused = sqlx::query(
        "INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
         VALUES (apalis.generate_ulid(), 'settle::PostSettlement', '\\xdeadbeef'::bytea, 'Pending', 0, 25, now())",
    )
    .execute(app.pg())
    .await;
    assert!(refused.is_err(), "non-JSON payload refused by the database");
    record(&app, "msg_fine", &charge("ch_2", "10.00", "0.30", "9.70")).await;

    let db = app.stop().await;
    let app = start(db, AppOptions::default()).await;
    app.wait_settled(30).await;
    app.wait_for(
        "both odd jobs killed",
        30,
        "SELECT count(*) = 2 FROM apalis.jobs WHERE status = 'Killed'",
    )
    .await;
    assert_eq!(
        app.event_state("msg_tampered").await,
        ("abandoned".into(), Some("undecodable_job".into()))
    );
    assert_eq!(app.event_state("msg_fine").await, ("posted".into(), None));
}

#[tokio::test]
async fn the_sweep_gives_a_stranded_event_a_fresh_job() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    // The event's job is lost (an operator deleted it).
    sqlx::query("DELETE FROM apalis.jobs")
        .execute(app.pg())
        .await
        .expect("lose the job");
    let db = app.stop().await;
    let app = start(db, AppOptions::default()).await;
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_1").await, ("posted".into(), None));
    let (fresh_jobs, posted_by_fresh): (i64, i64) = sqlx::query_as(
        "SELECT count(DISTINCT a.job_id), count(*) FILTER (WHERE a.job_id = e.job_id AND a.outcome = 'posted')
         FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id",
    )
    .fetch_one(app.pg())
    .await
    .expect("attempts");
    assert_eq!(
        (fresh_jobs, posted_by_fresh),
        (1, 1),
        "one fresh job, which posted"
    );
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn verify_reports_a_broken_invariant() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    assert!(
        app.failed_invariants().await.is_empty(),
        "a recorded event with a live job is fine"
    );
    sqlx::query("UPDATE apalis.jobs SET status = 'Done'")
        .execute(app.pg())
        .await
        .expect("break");
    let failed = app.failed_invariants().await;
    assert!(
        failed.iter().any(|f| f.starts_with("event_accounted_for")),
        "{failed:?}"
    );
    // The command says so too, with a non-zero exit.
    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &config_toml(&app.database_url(), &AppOptions::default()),
    );
    let (ok, report) = run_settle(&config, &app.database_url(), &["verify"]).await;
    assert!(!ok, "settle verify exited 0 on a broken store:\n{report}");
    assert!(report.contains("event_accounted_for"), "{report}");
    // Each check says how long it took (a check reads what it checks whole).
    let (_, json) = run_settle(&config, &app.database_url(), &["verify", "--json"]).await;
    let report: serde_json::Value = serde_json::from_str(&json).expect("a JSON report");
    let checks = report["checks"].as_array().expect("checks");
    assert!(!checks.is_empty());
    assert!(checks.iter().all(|c| c["took_ms"].is_u64()), "{json}");
    sqlx::query("ALTER TABLE journal_lines DISABLE TRIGGER journal_lines_immutable")
        .execute(app.pg())
        .await
        .expect("disable trigger");
    let failed = app.failed_invariants().await;
    assert!(
        failed.iter().any(|f| f.starts_with("journal_immutable")),
        "{failed:?}"
    );
}

/// A store failure before any attempt opened (here the event's lock cannot be had) writes
/// nothing of the job: the worker gives the job back to the queue, due a little later, and it
/// posts once the store answers again.
#[tokio::test]
async fn a_job_whose_start_fails_is_given_back_and_posts_later() {
    let workers = format!("{FAST_WORKERS}\nlock_timeout_ms = 200");
    let app = spawn(AppOptions {
        role: Role::Ingress,
        workers: workers.clone(),
        ..AppOptions::default()
    })
    .await;
    let event = record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    let elsewhere = app.pg_db().pool().await;
    let mut holder = elsewhere.begin().await.expect("begin");
    sqlx::query("SELECT id FROM settlement_events WHERE id = $1 FOR UPDATE")
        .bind(event)
        .execute(&mut *holder)
        .await
        .expect("hold the event's lock");
    let db = app.stop().await;
    let app = start(
        db,
        AppOptions {
            workers,
            ..AppOptions::default()
        },
    )
    .await;
    app.wait_for(
        "the job to be given back, unlocked and due later",
        30,
        "SELECT EXISTS (SELECT 1 FROM apalis.jobs
                        WHERE status = 'Pending' AND lock_by IS NULL AND run_at > now())",
    )
    .await;
    assert_eq!(app.count("job_attempts").await, 0, "no attempt opened");
    holder.rollback().await.expect("release");
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_1").await, ("posted".into(), None));
    let outcomes: Vec<String> = sqlx::query_scalar("SELECT outcome FROM job_attempts")
        .fetch_all(app.pg())
        .await
        .expect("attempts");
    assert_eq!(outcomes, ["posted"]);
    assert_eq!(app.jobs().await, 0);
    assert!(app.failed_invariants().await.is_empty());
}

#[tokio::test]
async fn a_lock_timeout_is_transient_and_the_job_posts_once_the_lock_is_gone() {
    let workers = format!("{FAST_WORKERS}\nlock_timeout_ms = 200\nattempts_max = 50");
    let app = spawn(AppOptions {
        role: Role::Ingress,
        workers: workers.clone(),
        ..AppOptions::default()
    })
    .await;
    record(&app, "msg_1", &charge("ch_1", "100.00", "3.20", "96.80")).await;
    let other = record(&app, "msg_invalid", &charge("ch_2", "1.00", "0.10", "0.50")).await;
    // A long transaction elsewhere is writing an entry under the same source key, so the
    // posting transaction's insert has to wait for it.
    let elsewhere = app.pg_db().pool().await;
    let mut holder = elsewhere.begin().await.expect("begin");
    sqlx::query(
        "WITH entry AS (
             INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id, request_fingerprint,
                                          effective_date, description)
             VALUES ('std/charge_settled/ch_1', $1, 'std', 'charge_settled', 'ch_1', repeat('0', 64), current_date, 'held')
             RETURNING id
         )
         INSERT INTO journal_lines SELECT id, n, 'held', 'USD', amount
         FROM entry, (VALUES (1, 1), (2, -1)) AS l(n, amount)",
    )
    .bind(other)
    .execute(&mut *holder)
    .await
    .expect("hold the source key");
    let db = app.stop().await;
    let app = start(
        db,
        AppOptions {
            workers,
            ..AppOptions::default()
        },
    )
    .await;
    app.wait_for(
        "an attempt to time out on the lock",
        30,
        "SELECT EXISTS (SELECT 1 FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
                        WHERE e.external_id = 'msg_1' AND a.outcome = 'transient'
                          AND a.error_code = 'database_unavailable')",
    )
    .await;
    assert_eq!(
        app.event_state("msg_1").await.0,
        "recorded",
        "retrying, not dead-lettered"
    );
    holder.rollback().await.expect("release");
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_1").await, ("posted".into(), None));
    assert_eq!(app.event_state("msg_invalid").await.0, "abandoned");
    assert_eq!(app.count("journal_entries").await, 1);
    assert!(app.failed_invariants().await.is_empty());
}

/// The job that is current for the event recorded as `external_id`.
async fn job_of(app: &TestApp, external_id: &str) -> JobRef {
    let (event_id, job_id): (i64, String) =
        sqlx::query_as("SELECT id, job_id FROM settlement_events WHERE external_id = $1")
            .bind(external_id)
            .fetch_one(app.pg())
            .await
            .expect("event");
    JobRef {
        job_id,
        event_id: EventId::new(event_id),
    }
}

/// When the database fails inside a group (here a lock the group cannot get in time), nothing
/// of the group is kept and every job is run alone: only the job whose event is locked fails,
/// transiently.
#[tokio::test]
async fn a_database_failure_in_a_group_makes_each_job_run_alone() {
    let app = spawn(AppOptions {
        role: Role::Ingress,
        ..AppOptions::default()
    })
    .await;
    let mut jobs = Vec::new();
    for n in 1..=4 {
        let id = format!("msg_{n}");
        record(
            &app,
            &id,
            &charge(&format!("ch_{n}"), "10.00", "1.00", "9.00"),
        )
        .await;
        jobs.push(job_of(&app, &id).await);
    }
    // The group's start must be refused before anything is locked by another session.
    let done = app
        .store
        .start_attempt(&jobs[3], "worker-x", 8, 5_000)
        .await;
    assert_eq!(done.expect("start"), AttemptStart::Run { attempt: 1 });
    let mut holder = app.pg().begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM settlement_events WHERE external_id = 'msg_2' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .expect("lock msg_2");
    let starts: Vec<(JobRef, String)> = jobs[..3]
        .iter()
        .map(|job| (job.clone(), "worker-g".to_owned()))
        .collect();
    let started = app.store.start_attempts(&starts, 8, 300).await;
    assert!(matches!(started[0], Ok(AttemptStart::Run { attempt: 1 })));
    assert!(
        started[1].as_ref().is_err_and(|e| e.is_transient()),
        "{:?}",
        started[1]
    );
    assert!(matches!(started[2], Ok(AttemptStart::Run { attempt: 1 })));
    let rules = PostingRules::default();
    let posts = [
        (jobs[0].clone(), 1),
        (jobs[1].clone(), 1),
        (jobs[3].clone(), 1),
    ];
    let posted = app.store.post_many(&posts, &rules, 300).await;
    assert!(
        matches!(posted[0], Ok(Posted::New { .. })),
        "{:?}",
        posted[0]
    );
    assert!(
        posted[1].as_ref().is_err_and(|e| e.is_transient()),
        "{:?}",
        posted[1]
    );
    assert!(
        matches!(posted[2], Ok(Posted::New { .. })),
        "{:?}",
        posted[2]
    );
    holder.rollback().await.expect("release");
    // Each posted alone: two entries, two transactions; the locked event is untouched.
    let (entries, transactions): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT xmin::text) FROM journal_entries")
            .fetch_one(app.pg())
            .await
            .expect("entries");
    assert_eq!((entries, transactions), (2, 2));
    assert_eq!(app.event_state("msg_2").await.0, "recorded");
    assert_eq!(app.event_state("msg_3").await.0, "recorded");
}
