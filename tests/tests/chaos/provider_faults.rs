//! Scenario 11, Provider faults: Stripe's API misbehaving while a fleet depends on it. Two Stripe
//! sources, each on its own fake Stripe that enforces Stripe's test-mode rate limits (25
//! requests a second, 25 to one endpoint) and fails some of the requests it lets through at
//! random (429 with and without `Retry-After`, 500, a stall past the request timeout, a
//! connection reset mid-body; a tenth by id, a fifth of the feed's listings):
//!
//! - `stripe-ids` without the feed: each charge webhook fetches its balance transaction by id;
//!   half way through the drain its key is revoked, later replaced by a rotated one;
//! - `stripe-feed` with the feed: money with no webhook, created all through the drain, so
//!   every listing reads pages that change between two reads.
//!
//! Beside them, the `adyen` source books settlement details reports from a fake report server
//! that answers a third of the reports' downloads with a fault first (500, 503 twice, 429 with
//! and without `Retry-After`, a stall past the source's 5 s timeout, or half the file and then
//! the connection dropped).
//!
//! Four workers drain all three while one of them is SIGKILLed every five seconds →
//! every movement and report line booked exactly once, nothing dead-lettered (a transient fault retries; the
//! revoked key pauses its source once, with no dead letter, until it is resumed), neither fake
//! ever had to refuse a request for its rate limit (the fleet kept to each source's budget), the
//! feed's books equal the fake's balance, `settle verify` clean.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use ops::Role;
use providers::stripe::fake::{FakeStripe, Injected, Injection, RateLimits};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;
use tests::adyen::{FakeReports, Fault, fake_reports, payments_of, report_available};
use tests::app::{AppOptions, FAST_WORKERS, STRIPE_API_KEY, STRIPE_SECRET, config_toml, spawn};
use tests::fleet::{Fleet, tail};
use tests::process::{Scratch, run_settle};
use tests::sign::{now, stripe_header};
use tests::stripe::{Txn, charge, event};

use crate::{report, scale, verify};

const IDS: &str = "stripe-ids";
const FEED: &str = "stripe-feed";
/// The key `stripe-ids` is given once its first one is revoked.
const ROTATED_KEY: &str = "rk_test_settle_rotated_key_2b9e";
/// Stripe's test-mode limits (docs.stripe.com/rate-limits): the sources' default budget.
const TEST_MODE: RateLimits = RateLimits {
    per_sec: 25,
    endpoint_per_sec: 25,
};

/// Both sources, `stripe-ids` with `ids_key`; requests time out after a second.
fn sources(ids: &FakeStripe, feed: &FakeStripe, ids_key: &str) -> String {
    format!(
        r#"
        [[sources]]
        name = "{IDS}"
        provider = "stripe"
        secrets = ["{STRIPE_SECRET}"]
        livemode = false
        api_key = "{ids_key}"
        api_base = "{ids_base}"
        api_request_timeout_ms = 1000
        feed = false

        [[sources]]
        name = "{FEED}"
        provider = "stripe"
        secrets = ["{STRIPE_SECRET}"]
        livemode = false
        api_key = "{STRIPE_API_KEY}"
        api_base = "{feed_base}"
        api_request_timeout_ms = 1000
        feed_every_secs = 1
        "#,
        ids_base = ids.url(),
        feed_base = feed.url(),
    )
}

fn injection(per_mille: u32, seed: u64) -> Injection {
    Injection {
        per_mille,
        kinds: Injected::ALL.to_vec(),
        stall: Duration::from_millis(1_500),
        seed,
    }
}

/// The merchant account of the reports, and how many settled payments each report holds.
const MERCHANT: &str = "SettleShop";
const REPORT_LINES: usize = 10;

/// Serves `count` settlement details reports (batches 100 on, each its own payments), a third
/// of them failing first as drawn from `seed`: how many of each fault.
fn serve_reports(reports: &FakeReports, count: usize, seed: u64) -> BTreeMap<&'static str, u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut faults = BTreeMap::new();
    for r in 0..count {
        let batch = 100 + u32::try_from(r).expect("batch");
        let file = format!("settlement_detail_report_batch_{batch}.csv");
        reports.put(
            &file,
            payments_of(MERCHANT, r * REPORT_LINES, REPORT_LINES, batch),
        );
        if rng.random_range(0..3) != 0 {
            continue;
        }
        let (name, fault) = match rng.random_range(0..6) {
            0 => (
                "server_error",
                Fault::Status {
                    status: 500,
                    times: 1,
                },
            ),
            1 => (
                "unavailable_twice",
                Fault::Status {
                    status: 503,
                    times: 2,
                },
            ),
            2 => (
                "rate_limited",
                Fault::Status {
                    status: 429,
                    times: 1,
                },
            ),
            3 => (
                "rate_limited_retry_after",
                Fault::RateLimited {
                    retry_after_secs: 1,
                    times: 1,
                },
            ),
            // Past the source's 5 s report timeout.
            4 => (
                "stalled",
                Fault::Stall {
                    stall_ms: 6_000,
                    times: 1,
                },
            ),
            _ => ("cut_short", Fault::CutShort { times: 1 }),
        };
        reports.fault(&file, fault);
        *faults.entry(name).or_default() += 1;
    }
    faults
}

/// `(entries, distinct movements)` booked for movement ids starting with `prefix`.
async fn booked(pool: &sqlx::PgPool, prefix: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT movement_id) FROM journal_entries
         WHERE movement_id LIKE $1 || '%'",
    )
    .bind(prefix)
    .fetch_one(pool)
    .await
    .expect("entries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_drains_through_a_misbehaving_stripe_with_workers_killed_and_books_every_movement_once()
 {
    let webhooks = scale(300, 10_000);
    let listed = scale(1_500, 10_000);
    let report_count = scale(20, 200);
    let reports = Arc::new(fake_reports().await);
    let report_faults = serve_reports(&reports, report_count, 53);
    let ids = Arc::new(FakeStripe::start(STRIPE_API_KEY).await.expect("fake"));
    let feed = Arc::new(FakeStripe::start(STRIPE_API_KEY).await.expect("fake"));
    for fake in [&ids, &feed] {
        fake.enforce(TEST_MODE);
    }
    let created = Utc::now().timestamp() - 60;
    let first_second = u64::try_from(created).expect("a time after 1970");
    for i in 0..webhooks {
        let (id, source) = (format!("txn_pf_{i}"), format!("ch_pf_{i}"));
        let mut transaction = Txn::charge(&id, &source, 1_000 + (i % 97) as i64 * 10, 59);
        transaction["created"] = json!(created);
        ids.add_transaction(None, transaction);
    }
    let app = spawn(AppOptions {
        role: Role::Ingress,
        extra: sources(&ids, &feed, STRIPE_API_KEY),
        adyen_reports: Some(reports.host()),
        ..AppOptions::default()
    })
    .await;
    let scratch = Scratch::new();
    let options = |ids_key: &str| AppOptions {
        extra: sources(&ids, &feed, ids_key),
        workers: format!("{FAST_WORKERS}\nconcurrency = 8"),
        adyen_reports: Some(reports.host()),
        ..AppOptions::default()
    };
    let mut fleet = Fleet::with_options(&scratch, &app, &options(STRIPE_API_KEY), vec![]);
    fleet.start(4);
    // The fleet counted itself (each member's budget is a quarter of each source's) before
    // anything asks Stripe for much.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ids.inject(Some(injection(100, 11)));
    // The feed asks far less (a page holds a hundred): a fifth of its requests fail.
    feed.inject(Some(injection(200, 29)));

    // Charge webhooks, 16 at a time; money with no webhook, created all through the drain.
    let base = app.url("/webhooks/");
    let deliveries = tokio::spawn({
        let http = reqwest::Client::new();
        async move {
            futures::stream::iter(0..webhooks)
                .map(|i| {
                    let http = http.clone();
                    let url = format!("{base}{IDS}");
                    async move {
                        let body = event(
                            &format!("evt_pf_{i}"),
                            "charge.succeeded",
                            charge(
                                &format!("ch_pf_{i}"),
                                Some(&format!("txn_pf_{i}")),
                                1_000,
                                "usd",
                            ),
                        );
                        let signature = stripe_header(STRIPE_SECRET, now(), body.as_bytes());
                        http.post(url)
                            .header("content-type", "application/json")
                            .header("stripe-signature", signature)
                            .body(body)
                            .send()
                            .await
                            .map(|r| r.status().as_u16())
                            .unwrap_or(0)
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<u16>>()
                .await
        }
    });
    let money = tokio::spawn({
        let feed = feed.clone();
        async move {
            for batch in 0..listed.div_ceil(50) {
                let now = Utc::now().timestamp();
                for i in batch * 50..((batch + 1) * 50).min(listed) {
                    let id = format!("txn_pl_{i}");
                    let mut transaction = match i % 10 {
                        0..=7 => {
                            let mut charge = Txn::charge(&id, "", 500 + (i % 89) as i64 * 10, 45);
                            charge["source"] = serde_json::Value::Null;
                            charge
                        }
                        _ => Txn::stripe_fee(&id, -25),
                    };
                    transaction["created"] = json!(now);
                    feed.add_transaction(None, transaction);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    for r in 0..report_count {
        let file = format!("settlement_detail_report_batch_{}.csv", 100 + r);
        let item = report_available(&file, &reports.url(MERCHANT, &file));
        assert_eq!(app.post_adyen(&[item]).await.status().as_u16(), 200);
    }

    let pool = app.pg().clone();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(scale(600, 3_600) as u64);
    let mut kills = 0usize;
    let mut last_kill = Instant::now();
    // None: the key not revoked yet; Some(false): revoked, the source not resumed yet.
    let mut revoked: Option<bool> = None;
    let mut paused_ms = 0u128;
    let mut dead_while_paused = 0i64;
    loop {
        let (ids_posted, _) = booked(&pool, "txn_pf_").await;
        let (listed_posted, _) = booked(&pool, "txn_pl_").await;
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM settlement_events WHERE status = 'recorded'
             AND external_id NOT LIKE 'feed:%'",
        )
        .fetch_one(&pool)
        .await
        .expect("waiting");
        if ids_posted >= webhooks as i64
            && listed_posted >= listed as i64
            && waiting == 0
            && revoked == Some(true)
        {
            break;
        }
        if revoked.is_none() && ids_posted >= webhooks as i64 / 2 {
            let at = Instant::now();
            ids.revoke_key(ROTATED_KEY);
            // The first refusal pauses the source; nothing of it goes to the dead letter.
            let wait = Instant::now() + Duration::from_secs(60);
            loop {
                let paused: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM source_pauses WHERE source = $1
                       AND resumed_at IS NULL AND paused_by = 'settle'
                       AND pause_reason LIKE 'provider_auth: %')",
                )
                .bind(IDS)
                .fetch_one(&pool)
                .await
                .expect("paused");
                if paused {
                    break;
                }
                assert!(Instant::now() < wait, "the refused key paused nothing");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Attempts already running when the key went bad end too; then nothing moves.
            tokio::time::sleep(Duration::from_secs(3)).await;
            dead_while_paused = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
                .fetch_one(&pool)
                .await
                .expect("dead letters");
            // The key rotated: every worker restarted with it, then the source resumed.
            std::fs::write(
                &fleet.config,
                config_toml(&app.database_url(), &options(ROTATED_KEY)),
            )
            .expect("config");
            for member in 0..4 {
                fleet.kill_and_restart(member).await;
            }
            kills += 4;
            let (ok, output) = run_settle(
                &fleet.config,
                &app.database_url(),
                &["sources", "resume", IDS, "--reason", "key rotated"],
            )
            .await;
            assert!(ok, "{output}");
            paused_ms = at.elapsed().as_millis();
            revoked = Some(true);
            last_kill = Instant::now();
        }
        if last_kill.elapsed() >= Duration::from_secs(5) {
            fleet.kill_and_restart(kills % 4).await;
            kills += 1;
            last_kill = Instant::now();
        }
        if Instant::now() >= deadline {
            panic!(
                "the drain did not finish ({kills} kills; {ids_posted}/{webhooks} by id, \
                 {listed_posted}/{listed} listed, {waiting} events waiting); logs:\n{}",
                tail(&scratch.logs())
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained_ms = started.elapsed().as_millis();
    let answers = deliveries.await.expect("deliveries");
    money.await.expect("money");
    assert!(
        answers.iter().all(|&status| status == 200),
        "every delivery acknowledged"
    );

    for (prefix, expected) in [("txn_pf_", webhooks), ("txn_pl_", listed)] {
        let expected = i64::try_from(expected).expect("count");
        assert_eq!(
            booked(&pool, prefix).await,
            (expected, expected),
            "every {prefix} movement booked once"
        );
    }
    let (reports_posted, report_entries, report_lines): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM settlement_events
                 WHERE source = 'adyen' AND external_id LIKE 'REPORT_AVAILABLE:%' AND status = 'posted'),
                (SELECT count(*) FROM journal_entries WHERE source_key LIKE 'adyen/settlement/%'),
                (SELECT count(DISTINCT source_key) FROM journal_entries WHERE source_key LIKE 'adyen/settlement/%')",
    )
    .fetch_one(&pool)
    .await
    .expect("reports");
    // A report books one entry a line: its settled payments and its payout.
    let lines = i64::try_from(report_count * (REPORT_LINES + 1)).expect("count");
    assert_eq!(
        (reports_posted, report_entries, report_lines),
        (i64::try_from(report_count).expect("count"), lines, lines),
        "every report posted, each of its lines booked once"
    );
    // The feed goes on sweeping; an attempt a kill left open is closed when its job runs again.
    crate::wait_until(
        &pool,
        "every attempt a kill left open to be closed",
        Duration::from_secs(120),
        "SELECT NOT EXISTS (SELECT 1 FROM job_attempts
                            WHERE finished_at IS NULL AND started_at < now() - interval '20 seconds')",
    )
    .await;
    let (dead, open): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM dead_letters),
                (SELECT count(*) FROM job_attempts
                 WHERE finished_at IS NULL AND started_at < now() - interval '20 seconds')",
    )
    .fetch_one(&pool)
    .await
    .expect("dead letters");
    assert_eq!(
        (dead_while_paused, dead, open),
        (0, 0, 0),
        "nothing dead-lettered (not for a transient fault, not for the revoked key), no attempt left open"
    );
    let pauses: Vec<(String, String)> =
        sqlx::query_as("SELECT source, paused_by FROM source_pauses ORDER BY id")
            .fetch_all(&pool)
            .await
            .expect("pauses");
    assert_eq!(
        pauses,
        [(IDS.to_owned(), "settle".to_owned())],
        "the revoked key paused its source once; the other source never"
    );
    let refused: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job_attempts WHERE error_code = 'provider_auth'")
            .fetch_one(&pool)
            .await
            .expect("refused attempts");
    let injected_ids = ids.injected();
    let injected_feed = feed.injected();
    for kind in Injected::ALL {
        assert!(
            injected_ids[kind.name()] > 0,
            "{}: no fault injected: {injected_ids:?}",
            kind.name()
        );
    }
    assert!(
        injected_feed.values().sum::<u64>() > 0,
        "the feed met faults too"
    );
    assert_eq!(
        (ids.rate_limited(), feed.rate_limited()),
        (0, 0),
        "neither fake refused a request for its rate limit: the fleet kept each source's budget \
         (requests a second by id {:?}, listing {:?})",
        ids.requests_by_second(first_second),
        feed.requests_by_second(first_second)
    );
    let busiest = |fake: &FakeStripe| {
        fake.requests_by_second(first_second)
            .into_iter()
            .max()
            .unwrap_or(0)
    };
    let (busiest_ids, busiest_feed) = (busiest(&ids), busiest(&feed));
    assert!(
        busiest_ids <= TEST_MODE.per_sec && busiest_feed <= TEST_MODE.per_sec,
        "requests in the busiest second: {busiest_ids} by id, {busiest_feed} listing"
    );

    let (equal, balance) = run_settle(
        &fleet.config,
        &app.database_url(),
        &["reconcile", "balance", FEED],
    )
    .await;
    assert!(equal, "the feed's books equal Stripe's balance:\n{balance}");
    verify(&fleet.config, &app.database_url()).await;
    for member in &mut fleet.members {
        let _ = member.start_kill();
    }
    report(
        "provider_faults",
        json!({"webhook_events": webhooks, "listed_movements": listed, "workers": 4,
               "kills": kills, "drained_ms": drained_ms,
               "key_revoked_to_resumed_ms": paused_ms, "refused_attempts": refused,
               "injected_by_id": injected_ids, "injected_feed": injected_feed,
               "requests_by_id": ids.requests(), "requests_feed": feed.requests(),
               "busiest_second_by_id": busiest_ids, "busiest_second_feed": busiest_feed,
               "answered_429_for_the_limit": ids.rate_limited() + feed.rate_limited(),
               "reports": report_count, "report_faults": report_faults,
               "report_downloads": reports.downloads().len(), "report_entries": report_entries,
               "dead_letters": dead, "verify": "passed"}),
    );
}
