//! Stripe end to end, with webhooks in the shapes Stripe sends (balance transactions named by
//! id, null under asynchronous capture, `charge.refunded` without refunds) and a fake Stripe API
//! on a real socket serving the balance transactions: every balance transaction posts once, in
//! its settlement currency, however many events reach it. The contracts run on both backends.

use std::time::Duration;

use providers::stripe::fake::{Fault, RateLimits};
use serde_json::{Value, json};
use tests::TestApp;
use tests::app::charge as standard_charge;
use tests::app::{AppOptions, Backend, FAST_WORKERS, OPS_TOKEN, spawn};
use tests::stripe::{Txn, captured_update, charge, dispute, event, payout, refund};

tests::on_both_backends!(
    a_charge_posts_its_balance_transaction_once_in_the_settlement_currency,
    asynchronous_capture_posts_when_the_update_names_the_transaction,
    refunds_failed_refunds_and_charge_refunded_post_each_transaction_once,
    a_dispute_in_another_currency_posts_in_the_settlement_currency,
    a_payout_listed_over_several_pages_reconciles_to_zero,
    a_failed_payout_posts_its_failure_and_reads_reversed,
    connected_accounts_and_the_other_mode_never_touch_the_platforms_books,
    transient_api_failures_retry_and_a_missing_object_dead_letters_once,
    a_refused_key_pauses_the_source_until_it_is_resumed,
    inconsistent_facts_dead_letter_and_nothing_of_the_event_is_posted,
    a_throttled_sources_backlog_waits_in_the_queue_not_in_the_workers_slots,
);

async fn app(backend: Backend) -> TestApp {
    spawn(AppOptions::on(backend)).await
}

async fn deliver(app: &TestApp, body: &str) -> (u16, Value) {
    let response = app.post_stripe(body).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn recorded(app: &TestApp, body: &str) {
    let (status, json) = deliver(app, body).await;
    assert_eq!(
        (status, json["status"].as_str()),
        (200, Some("recorded")),
        "{json}"
    );
}

/// Entries per movement id (each `txn_...` must have exactly one).
async fn entries_of(app: &TestApp, movement_id: &str) -> i64 {
    app.scalar(&format!(
        "SELECT count(*) FROM journal_entries WHERE movement_id = '{movement_id}'"
    ))
    .await
}

async fn a_charge_posts_its_balance_transaction_once_in_the_settlement_currency(backend: Backend) {
    let app = app(backend).await;
    // A EUR charge settled in USD: the books hold what reached the balance, in USD, with the
    // exchange rate kept; Stripe's fee split into its parts.
    app.stripe.add_transaction(
        None,
        Txn {
            id: "txn_eur",
            category: "charge",
            transaction_type: "charge",
            amount: 10_870,
            fees: &[("stripe_fee", 345), ("tax", 31)],
            currency: "usd",
            source: "ch_eur",
            exchange_rate: Some(1.087),
        }
        .value(),
    );
    let succeeded = event(
        "evt_ok",
        "charge.succeeded",
        charge("ch_eur", Some("txn_eur"), 10_000, "eur"),
    );
    recorded(&app, &succeeded).await;
    // The same charge through two more events: the transaction posts once.
    let captured = event(
        "evt_captured",
        "charge.captured",
        charge("ch_eur", Some("txn_eur"), 10_000, "eur"),
    );
    recorded(&app, &captured).await;
    recorded(
        &app,
        &captured_update(
            "evt_updated",
            charge("ch_eur", Some("txn_eur"), 10_000, "eur"),
        ),
    )
    .await;
    // A redelivery (another pending_webhooks, signature and timestamp) is a duplicate.
    let (status, json) = deliver(
        &app,
        &succeeded.replace("\"pending_webhooks\":1", "\"pending_webhooks\":2"),
    )
    .await;
    assert_eq!((status, json["status"].as_str()), (200, Some("duplicate")));
    app.wait_settled(30).await;

    assert_eq!(
        app.lines_of("txn_eur").await,
        [
            "stripe:balance USD 104.94",
            "fees:stripe USD 3.45",
            "fees:stripe:tax USD 0.31",
            "sales USD -108.7"
        ]
    );
    assert_eq!(entries_of(&app, "txn_eur").await, 1);
    assert_eq!(
        app.texts("SELECT status FROM settlement_events ORDER BY id")
            .await,
        ["posted", "posted", "posted"]
    );
    let (_, journal) = app.api_get("/api/journal", Some(OPS_TOKEN)).await;
    let details = &journal["items"][0]["details"];
    assert_eq!(details["exchange_rate"], json!(1.087), "{journal}");
    assert_eq!(details["reporting_category"], "charge");
    assert_eq!(journal["items"][0]["reference"], "ch_eur");
    let requests = app.stripe.seen();
    assert!(
        requests
            .iter()
            .all(|r| r.version.as_deref() == Some(providers::stripe::STRIPE_VERSION)),
        "every request pins the API version: {requests:?}"
    );
    assert!(app.failed_invariants().await.is_empty());
}

async fn asynchronous_capture_posts_when_the_update_names_the_transaction(backend: Backend) {
    let app = app(backend).await;
    app.stripe
        .add_transaction(None, Txn::charge("txn_async", "ch_async", 5_000, 175));
    // Asynchronous capture: charge.succeeded names no balance transaction yet.
    recorded(
        &app,
        &event(
            "evt_s",
            "charge.succeeded",
            charge("ch_async", None, 5_000, "usd"),
        ),
    )
    .await;
    app.wait_settled(30).await;
    assert_eq!(app.event_state("evt_s").await, ("posted".into(), None));
    assert_eq!(app.count("journal_entries").await, 0, "nothing settled yet");
    // An update that changes something else names nothing new.
    let mut described: Value = serde_json::from_str(&event(
        "evt_d",
        "charge.updated",
        charge("ch_async", None, 5_000, "usd"),
    ))
    .expect("json");
    described["data"]["previous_attributes"] = json!({"description": null});
    let (status, json) = deliver(&app, &described.to_string()).await;
    assert_eq!(
        (status, json["reason"].as_str()),
        (200, Some("no_movement"))
    );
    recorded(
        &app,
        &captured_update("evt_u", charge("ch_async", Some("txn_async"), 5_000, "usd")),
    )
    .await;
    app.wait_settled(30).await;
    assert_eq!(
        app.lines_of("txn_async").await,
        [
            "stripe:balance USD 48.25",
            "fees:stripe USD 1.75",
            "sales USD -50"
        ]
    );
    assert!(app.failed_invariants().await.is_empty());
}

async fn refunds_failed_refunds_and_charge_refunded_post_each_transaction_once(backend: Backend) {
    let app = app(backend).await;
    let fake = &app.stripe;
    fake.add_transaction(None, Txn::charge("txn_ch", "ch_r", 10_000, 320));
    for (id, refund_id, amount) in [("txn_re1", "re_1", -2_500), ("txn_re2", "re_2", -1_000)] {
        let txn = Txn {
            id,
            category: "refund",
            transaction_type: "refund",
            amount,
            fees: &[],
            currency: "usd",
            source: refund_id,
            exchange_rate: None,
        };
        fake.add_transaction(None, txn.value());
    }
    let failure = Txn {
        id: "txn_rf",
        category: "refund_failure",
        transaction_type: "refund_failure",
        amount: 1_000,
        fees: &[],
        currency: "usd",
        source: "re_2",
        exchange_rate: None,
    };
    fake.add_transaction(None, failure.value());
    fake.add_refund(None, "ch_r", refund("re_1", "ch_r", "txn_re1", None));
    fake.add_refund(
        None,
        "ch_r",
        refund("re_2", "ch_r", "txn_re2", Some("txn_rf")),
    );

    recorded(
        &app,
        &event(
            "evt_c",
            "charge.succeeded",
            charge("ch_r", Some("txn_ch"), 10_000, "usd"),
        ),
    )
    .await;
    recorded(
        &app,
        &event(
            "evt_r1",
            "refund.created",
            refund("re_1", "ch_r", "txn_re1", None),
        ),
    )
    .await;
    // charge.refunded carries no refunds (API 2022-11-15 on): they are listed.
    let mut refunded = charge("ch_r", Some("txn_ch"), 10_000, "usd");
    refunded["refunded"] = json!(true);
    refunded["amount_refunded"] = json!(3_500);
    recorded(&app, &event("evt_cr", "charge.refunded", refunded)).await;
    recorded(
        &app,
        &event(
            "evt_rf",
            "refund.failed",
            refund("re_2", "ch_r", "txn_re2", Some("txn_rf")),
        ),
    )
    .await;
    app.wait_settled(30).await;

    assert_eq!(
        app.lines_of("txn_re1").await,
        ["stripe:balance USD -25", "refunds USD 25"]
    );
    assert_eq!(
        app.lines_of("txn_re2").await,
        ["stripe:balance USD -10", "refunds USD 10"]
    );
    assert_eq!(
        app.lines_of("txn_rf").await,
        ["stripe:balance USD 10", "refunds USD -10"]
    );
    for txn in ["txn_ch", "txn_re1", "txn_re2", "txn_rf"] {
        assert_eq!(entries_of(&app, txn).await, 1, "{txn}");
    }
    let (_, balances) = app.api_get("/api/balances", Some(OPS_TOKEN)).await;
    let balance = balances["balances"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["account"] == "stripe:balance"))
        .map(|r| r["balance"].clone());
    assert_eq!(
        balance,
        Some(json!("71.80")),
        "96.80 - 25.00 - 10.00 + 10.00"
    );
    assert!(app.failed_invariants().await.is_empty());
}

async fn a_dispute_in_another_currency_posts_in_the_settlement_currency(backend: Backend) {
    let app = app(backend).await;
    // A JPY charge settled in USD: the dispute's amount is in yen, its balance transactions in
    // dollars. The withdrawal carries Stripe's dispute fee.
    let withdrawal = Txn {
        id: "txn_dw",
        category: "dispute",
        transaction_type: "adjustment",
        amount: -6_712,
        fees: &[("stripe_fee", 1_500)],
        currency: "usd",
        source: "dp_jpy",
        exchange_rate: Some(0.006712),
    }
    .value();
    let reinstatement = Txn {
        id: "txn_dr",
        category: "dispute_reversal",
        transaction_type: "adjustment",
        amount: 6_712,
        fees: &[],
        currency: "usd",
        source: "dp_jpy",
        exchange_rate: Some(0.006712),
    }
    .value();
    let withdrawn = dispute("dp_jpy", "ch_jpy", 10_000, "jpy", vec![withdrawal.clone()]);
    recorded(
        &app,
        &event("evt_dw", "charge.dispute.funds_withdrawn", withdrawn),
    )
    .await;
    let reinstated = dispute(
        "dp_jpy",
        "ch_jpy",
        10_000,
        "jpy",
        vec![withdrawal, reinstatement],
    );
    recorded(
        &app,
        &event("evt_dr", "charge.dispute.funds_reinstated", reinstated),
    )
    .await;
    app.wait_settled(30).await;

    assert_eq!(
        app.lines_of("txn_dw").await,
        [
            "stripe:balance USD -82.12",
            "fees:stripe USD 15",
            "disputes:stripe USD 67.12"
        ]
    );
    assert_eq!(
        app.lines_of("txn_dr").await,
        ["stripe:balance USD 67.12", "disputes:stripe USD -67.12"]
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_lines WHERE currency = 'JPY'")
            .await,
        0,
        "nothing is booked in yen"
    );
    assert_eq!(
        app.stripe.requests(),
        0,
        "complete embedded transactions are not fetched"
    );
    assert!(app.failed_invariants().await.is_empty());
}

/// 250 items over three pages: charges, refunds, Stripe's own fees (which have no webhook), an
/// adjustment, and the payout itself.
fn payout_listing(fake: &providers::stripe::fake::FakeStripe) -> (Vec<String>, i64) {
    let mut ids = Vec::new();
    let mut net = 0;
    for i in 0..250 {
        let id = format!("txn_l{i}");
        let (category, amount, fee, source) = match i % 25 {
            0 => ("refund", -1_000, 0, format!("re_l{i}")),
            1 => ("fee", -500, 0, format!("ab_l{i}")),
            2 => ("other_adjustment", -75, 0, format!("adj_l{i}")),
            _ => ("charge", 2_000 + i, 88, format!("ch_l{i}")),
        };
        let fees = [("stripe_fee", fee)];
        let txn = Txn {
            id: &id,
            category,
            transaction_type: category,
            amount,
            fees: if fee == 0 { &[] } else { &fees },
            currency: "usd",
            source: &source,
            exchange_rate: None,
        };
        fake.add_transaction(None, txn.value());
        net += amount - fee;
        ids.push(id);
    }
    (ids, net)
}

async fn a_payout_listed_over_several_pages_reconciles_to_zero(backend: Backend) {
    let app = app(backend).await;
    let (mut ids, net) = payout_listing(&app.stripe);
    let payout_txn = Txn {
        id: "txn_po",
        category: "payout",
        transaction_type: "payout",
        amount: -net,
        fees: &[],
        currency: "usd",
        source: "po_big",
        exchange_rate: None,
    };
    app.stripe.add_transaction(None, payout_txn.value());
    ids.push("txn_po".into());
    let listing: Vec<&str> = ids.iter().map(String::as_str).collect();
    app.stripe.set_payout_listing(None, "po_big", &listing);
    // One charge was posted before, through its own webhook.
    recorded(
        &app,
        &event(
            "evt_c3",
            "charge.succeeded",
            charge("ch_l3", Some("txn_l3"), 2_003, "usd"),
        ),
    )
    .await;
    app.wait_settled(30).await;

    let paid = payout("po_big", net, "txn_po", None, true);
    recorded(&app, &event("evt_paid", "payout.paid", paid.clone())).await;
    recorded(
        &app,
        &event("evt_reconciled", "payout.reconciliation_completed", paid),
    )
    .await;
    app.wait_settled(60).await;

    assert_eq!(
        app.count("journal_entries").await,
        251,
        "each transaction once"
    );
    assert_eq!(
        app.count("payout_items").await,
        251,
        "each tied to the payout"
    );
    let pages = app
        .stripe
        .seen()
        .iter()
        .filter(|r| r.query.contains("payout=po_big"))
        .count();
    assert_eq!(pages, 6, "three pages, listed for each of the two events");
    let (status, reconciliation) = app
        .api_get("/api/payouts/po_big/reconciliation", Some(OPS_TOKEN))
        .await;
    assert_eq!(status, 200);
    assert_eq!(reconciliation["status"], "matched", "{reconciliation}");
    assert_eq!(reconciliation["difference"], "0.00");
    assert_eq!(reconciliation["items"].as_array().map(Vec::len), Some(250));
    // Listed once, though its id is on its entry and on 251 items, before a cursor before it
    // and not after its own.
    for (query, listed) in [("limit=100", 1), ("cursor=po_bif", 1), ("cursor=po_big", 0)] {
        let (status, page) = app
            .api_get(&format!("/api/payouts?{query}"), Some(OPS_TOKEN))
            .await;
        assert_eq!(status, 200, "{page}");
        let ids: Vec<&str> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|p| p["payout_id"].as_str())
            .collect();
        assert_eq!(ids, ["po_big"][..listed], "{query}");
    }
    assert_eq!(
        app.lines_of("txn_l1").await,
        ["stripe:balance USD -5", "fees:stripe USD 5"],
        "a Stripe fee, which has no webhook, reached the books through the listing"
    );
    assert!(app.failed_invariants().await.is_empty());
}

async fn a_failed_payout_posts_its_failure_and_reads_reversed(backend: Backend) {
    let app = app(backend).await;
    let payout_txn = |id: &'static str, category: &'static str, amount: i64| Txn {
        id,
        category,
        transaction_type: category,
        amount,
        fees: &[],
        currency: "usd",
        source: "po_f",
        exchange_rate: None,
    };
    app.stripe
        .add_transaction(None, payout_txn("txn_pf", "payout", -4_000).value());
    app.stripe.add_transaction(
        None,
        payout_txn("txn_pff", "payout_reversal", 4_000).value(),
    );
    // A manual payout: nothing to list, its own transactions post.
    let failed = payout("po_f", 4_000, "txn_pf", Some("txn_pff"), false);
    recorded(&app, &event("evt_pfail", "payout.failed", failed)).await;
    app.wait_settled(30).await;
    assert_eq!(
        app.lines_of("txn_pf").await,
        ["stripe:balance USD -40", "bank USD 40"]
    );
    assert_eq!(
        app.lines_of("txn_pff").await,
        ["stripe:balance USD 40", "bank USD -40"]
    );
    let (_, reconciliation) = app
        .api_get("/api/payouts/po_f/reconciliation", Some(OPS_TOKEN))
        .await;
    assert_eq!(reconciliation["status"], "reversed", "{reconciliation}");
    assert!(
        app.stripe
            .seen()
            .iter()
            .all(|r| !r.query.contains("payout=")),
        "a manual payout is never listed"
    );
    assert!(app.failed_invariants().await.is_empty());
}

async fn connected_accounts_and_the_other_mode_never_touch_the_platforms_books(backend: Backend) {
    let fake = tests::app::fake_stripe().await;
    let app = spawn(AppOptions {
        extra: format!(
            r#"
            [[sources]]
            name = "stripe-connect"
            provider = "stripe"
            secrets = ["{secret}"]
            livemode = false
            connect = "post"
            api_key = "{key}"
            feed = false
            api_base = "{base}"
            "#,
            secret = tests::app::STRIPE_SECRET,
            key = tests::app::STRIPE_API_KEY,
            base = fake.url(),
        ),
        stripe: Some(fake.clone()),
        ..AppOptions::on(backend)
    })
    .await;
    fake.add_transaction(Some("acct_9"), Txn::charge("txn_ca", "ch_ca", 1_000, 59));
    let mut connected: Value = serde_json::from_str(&event(
        "evt_ca",
        "charge.succeeded",
        charge("ch_ca", Some("txn_ca"), 1_000, "usd"),
    ))
    .expect("json");
    connected["account"] = json!("acct_9");
    // At the platform's source (connect = "ignore"): acknowledged, counted, not recorded.
    let (status, json) = deliver(&app, &connected.to_string()).await;
    assert_eq!(
        (status, json["reason"].as_str()),
        (200, Some("connected_account"))
    );
    let mut live = connected.clone();
    live["livemode"] = json!(true);
    live["id"] = json!("evt_live");
    live.as_object_mut().map(|o| o.remove("account"));
    let (status, json) = deliver(&app, &live.to_string()).await;
    assert_eq!((status, json["reason"].as_str()), (200, Some("other_mode")));
    assert_eq!(app.count("settlement_events").await, 0);
    assert!(
        app.metrics_page()
            .await
            .contains(r#"outcome="ignored",reason="connected_account""#),
        "counted"
    );
    // At a source that posts Connect: booked to accounts namespaced by the connected account,
    // fetched with its Stripe-Account header.
    let body = connected.to_string();
    let header = tests::sign::stripe_header(
        tests::app::STRIPE_SECRET,
        tests::sign::now(),
        body.as_bytes(),
    );
    let response = app
        .post(
            "/webhooks/stripe-connect",
            &[("stripe-signature".into(), header)],
            &body,
        )
        .await;
    assert_eq!(response.status().as_u16(), 200);
    app.wait_settled(30).await;
    assert_eq!(
        app.lines_of("txn_ca").await,
        [
            "stripe-connect:balance:acct_9 USD 9.41",
            "fees:stripe-connect:acct_9 USD 0.59",
            "sales:acct_9 USD -10"
        ]
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_lines WHERE account NOT LIKE '%:acct_9'")
            .await,
        0,
        "no platform account is touched"
    );
    assert!(
        fake.seen()
            .iter()
            .all(|r| r.account.as_deref() == Some("acct_9")),
        "{:?}",
        fake.seen()
    );
    assert!(app.failed_invariants().await.is_empty());
}

async fn transient_api_failures_retry_and_a_missing_object_dead_letters_once(backend: Backend) {
    let app = app(backend).await;
    let fake = &app.stripe;
    fake.synthesize_charges(false);
    for (txn, charge_id) in [
        ("txn_429", "ch_429"),
        ("txn_500", "ch_500"),
        ("txn_slow", "ch_slow"),
    ] {
        fake.add_transaction(None, Txn::charge(txn, charge_id, 1_000, 59));
    }
    fake.fail_next(
        "txn_429",
        vec![
            Fault::RateLimited {
                retry_after_secs: 1,
            },
            Fault::RateLimited {
                retry_after_secs: 1,
            },
        ],
    );
    fake.fail_next("txn_500", vec![Fault::ServerError]);
    // Past the source's 2 s request timeout.
    fake.fail_next("txn_slow", vec![Fault::Stall(Duration::from_secs(4))]);
    for (event_id, txn, charge_id) in [
        ("evt_429", "txn_429", "ch_429"),
        ("evt_500", "txn_500", "ch_500"),
        ("evt_slow", "txn_slow", "ch_slow"),
        ("evt_404", "txn_missing", "ch_404"),
    ] {
        recorded(
            &app,
            &event(
                event_id,
                "charge.succeeded",
                charge(charge_id, Some(txn), 1_000, "usd"),
            ),
        )
        .await;
    }
    app.wait_settled(60).await;

    for (event_id, txn, attempts) in [
        ("evt_429", "txn_429", 3),
        ("evt_500", "txn_500", 2),
        ("evt_slow", "txn_slow", 2),
    ] {
        assert_eq!(
            app.event_state(event_id).await,
            ("posted".into(), None),
            "{event_id}"
        );
        assert_eq!(entries_of(&app, txn).await, 1, "{txn}");
        let outcomes = app
            .texts(&format!(
                "SELECT coalesce(a.error_code, a.outcome) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
                 WHERE e.external_id = '{event_id}' ORDER BY a.attempt"
            ))
            .await;
        assert_eq!(outcomes.len(), attempts, "{event_id}: {outcomes:?}");
        assert_eq!(
            outcomes.last().map(String::as_str),
            Some("posted"),
            "{event_id}"
        );
    }
    // Retry-After was honoured: the second attempt started at least a second after the first.
    let gap_ok = app
        .scalar(match app.backend() {
            Backend::Postgres => "SELECT count(*) FROM job_attempts a JOIN job_attempts b ON b.job_id = a.job_id AND b.attempt = a.attempt + 1
                 JOIN settlement_events e ON e.id = a.event_id
                 WHERE e.external_id = 'evt_429' AND b.started_at - a.started_at >= interval '1 second'",
            Backend::Sqlite => "SELECT count(*) FROM job_attempts a JOIN job_attempts b ON b.job_id = a.job_id AND b.attempt = a.attempt + 1
                 JOIN settlement_events e ON e.id = a.event_id
                 WHERE e.external_id = 'evt_429' AND julianday(b.started_at) - julianday(a.started_at) >= 1.0 / 86400",
        })
        .await;
    assert_eq!(gap_ok, 2, "each retry waited for Retry-After");
    assert_eq!(
        app.event_state("evt_404").await,
        ("abandoned".into(), Some("provider_not_found".into()))
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id WHERE e.external_id = 'evt_404'")
            .await,
        1,
        "a missing object is not retried"
    );
    assert!(
        app.metrics_page().await.contains(r#"settle_provider_requests_total{provider="stripe",source="stripe",endpoint="balance_transaction",status="429"}"#)
    );
    assert!(app.failed_invariants().await.is_empty());
}

/// Stripe refuses the key (401): every event of the source would fail the same way, so settle
/// pauses the source. The event that met the refusal waits with its attempt recorded, one
/// delivered meanwhile starts no attempt, nothing is dead-lettered; the overview, a gauge and
/// the alert's counter say so. Resumed with the key still refused, the source pauses again;
/// resumed once it is fixed, both post. On an event's last allowed attempt the refusal
/// dead-letters it instead, shown on the overview with the requeue to run.
async fn a_refused_key_pauses_the_source_until_it_is_resumed(backend: Backend) {
    let app = app(backend).await;
    let fake = &app.stripe;
    fake.synthesize_charges(false);
    fake.add_transaction(None, Txn::charge("txn_401", "ch_401", 1_000, 59));
    fake.add_transaction(None, Txn::charge("txn_later", "ch_later", 2_000, 88));
    fake.fail_next("txn_401", vec![Fault::Unauthorized]);
    recorded(
        &app,
        &event(
            "evt_401",
            "charge.succeeded",
            charge("ch_401", Some("txn_401"), 1_000, "usd"),
        ),
    )
    .await;
    app.wait_paused_by_settle("stripe", "provider_auth: %HTTP 401%")
        .await;
    // The refused attempt is recorded; the event waits, in no dead letter.
    app.wait_for(
        "the refused attempt recorded",
        30,
        "SELECT count(*) = 1 FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
           WHERE e.external_id = 'evt_401' AND a.error_code = 'provider_auth' AND a.finished_at IS NOT NULL",
    )
    .await;
    recorded(
        &app,
        &event(
            "evt_later",
            "charge.succeeded",
            charge("ch_later", Some("txn_later"), 2_000, "usd"),
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(app.event_state("evt_401").await, ("recorded".into(), None));
    assert_eq!(
        app.event_state("evt_later").await,
        ("recorded".into(), None)
    );
    assert_eq!(app.count("dead_letters").await, 0, "nothing dead-lettered");
    assert_eq!(
        app.scalar("SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id WHERE e.external_id = 'evt_later'")
            .await,
        0,
        "an event of the paused source starts no attempt"
    );
    assert!(
        app.metric("settle_provider_auth_failures_total{source=\"stripe\"}")
            .await
            >= 1.0
    );
    assert_eq!(
        app.metric_becoming("settle_source_paused_provider_auth{source=\"stripe\"}", 1.0)
            .await,
        Some(1.0),
        "visible as a gauge"
    );
    let overview = app.dashboard_page("/dashboard").await;
    assert!(
        overview.contains("id=\"paused-stripe\"") && overview.contains("provider_auth: "),
        "and on the dashboard: {overview}"
    );

    // Resumed with the key still refused: paused again at the first attempt.
    fake.fail_next("txn_", vec![Fault::Unauthorized]);
    let resume = || async {
        app.api_post(
            "/api/sources/stripe/resume",
            Some(OPS_TOKEN),
            json!({"reason": "key fixed"}),
        )
        .await
    };
    let (status, body) = resume().await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    app.wait_for(
        "the source paused again",
        30,
        "SELECT count(*) = 2 FROM source_pauses WHERE source = 'stripe' AND paused_by = 'settle'
           AND (SELECT count(*) FROM source_pauses WHERE resumed_at IS NULL) = 1",
    )
    .await;
    app.wait_for(
        "the refused attempts recorded",
        30,
        "SELECT count(*) = 0 FROM job_attempts WHERE finished_at IS NULL",
    )
    .await;
    assert_eq!(
        app.count("dead_letters").await,
        0,
        "still nothing dead-lettered"
    );

    // The key fixed: resumed, both post.
    let (status, body) = resume().await;
    assert_eq!(
        (status, body["changed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    app.wait_settled(30).await;
    assert_eq!(app.event_state("evt_401").await, ("posted".into(), None));
    assert_eq!(app.event_state("evt_later").await, ("posted".into(), None));
    assert_eq!(entries_of(&app, "txn_401").await, 1);
    assert_eq!(entries_of(&app, "txn_later").await, 1);
    assert_eq!(
        app.metric_becoming("settle_source_paused_provider_auth{source=\"stripe\"}", 0.0)
            .await,
        Some(0.0),
        "the gauge falls back once resumed"
    );
    assert!(app.failed_invariants().await.is_empty());

    // On the last allowed attempt, the refusal dead-letters the event instead.
    let last = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nattempts_max = 1"),
        ..AppOptions::on(backend)
    })
    .await;
    last.stripe.synthesize_charges(false);
    last.stripe
        .add_transaction(None, Txn::charge("txn_last", "ch_last", 1_000, 59));
    last.stripe.fail_next("txn_last", vec![Fault::Unauthorized]);
    recorded(
        &last,
        &event(
            "evt_last",
            "charge.succeeded",
            charge("ch_last", Some("txn_last"), 1_000, "usd"),
        ),
    )
    .await;
    last.wait_settled(30).await;
    assert_eq!(
        last.event_state("evt_last").await,
        ("abandoned".into(), Some("provider_auth".into()))
    );
    assert_eq!(last.count("source_pauses").await, 0, "not paused");
    assert_eq!(
        last.metric("settle_dead_letters_open_provider_auth{source=\"stripe\"}")
            .await,
        1.0,
        "visible as a gauge"
    );
    let overview = last.dashboard_page("/dashboard").await;
    assert!(
        overview.contains("id=\"provider-auth\"")
            && overview.contains("--error-code provider_auth"),
        "and on the dashboard: {overview}"
    );
}

async fn inconsistent_facts_dead_letter_and_nothing_of_the_event_is_posted(backend: Backend) {
    let app = app(backend).await;
    let fake = &app.stripe;
    fake.synthesize_charges(false);
    fake.add_transaction(None, Txn::charge("txn_good", "ch_good", 1_000, 59));
    let mut bad = Txn::charge("txn_bad", "ch_bad", 1_000, 59);
    bad["fee_details"][0]["amount"] = json!(58);
    fake.add_transaction(None, bad);
    let payout_txn = Txn {
        id: "txn_pbad",
        category: "payout",
        transaction_type: "payout",
        amount: -1_882,
        fees: &[],
        currency: "usd",
        source: "po_bad",
        exchange_rate: None,
    };
    fake.add_transaction(None, payout_txn.value());
    fake.set_payout_listing(None, "po_bad", &["txn_good", "txn_bad", "txn_pbad"]);
    // A charge whose balance transaction belongs to another charge.
    fake.add_transaction(None, Txn::charge("txn_other", "ch_someone_else", 1_000, 59));
    recorded(
        &app,
        &event(
            "evt_pbad",
            "payout.paid",
            payout("po_bad", 1_882, "txn_pbad", None, true),
        ),
    )
    .await;
    recorded(
        &app,
        &event(
            "evt_owner",
            "charge.succeeded",
            charge("ch_mine", Some("txn_other"), 1_000, "usd"),
        ),
    )
    .await;
    app.wait_settled(30).await;
    assert_eq!(
        app.event_state("evt_pbad").await,
        ("abandoned".into(), Some("provider_facts".into()))
    );
    assert_eq!(
        app.event_state("evt_owner").await,
        ("abandoned".into(), Some("provider_facts".into()))
    );
    assert_eq!(
        app.count("journal_entries").await,
        0,
        "nothing of either event is posted"
    );
    assert!(app.failed_invariants().await.is_empty());
}

/// The same balance transaction reached at once by three events and a payout listing, on
/// several workers' groups: one entry, tied to its payout; every event posted.
#[tokio::test]
async fn one_transaction_reached_by_three_events_and_a_listing_at_once_posts_once() {
    let app = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nconcurrency = 32\ngroups_max = 2"),
        ..AppOptions::default()
    })
    .await;
    let fake = &app.stripe;
    fake.set_latency(Duration::from_millis(30));
    for i in 0..20 {
        let txn = format!("txn_race{i}");
        fake.add_transaction(
            None,
            Txn::charge(&txn, &format!("ch_race{i}"), 1_000 + i, 59),
        );
        let payout_txn = format!("txn_racepo{i}");
        let payout_id = format!("po_race{i}");
        let payout_value = Txn {
            id: &payout_txn,
            category: "payout",
            transaction_type: "payout",
            amount: -(941 + i),
            fees: &[],
            currency: "usd",
            source: &payout_id,
            exchange_rate: None,
        };
        fake.add_transaction(None, payout_value.value());
        fake.set_payout_listing(None, &payout_id, &[&txn, &payout_txn]);
    }
    let mut bodies = Vec::new();
    for i in 0..20 {
        let (ch, txn) = (format!("ch_race{i}"), format!("txn_race{i}"));
        let object = charge(&ch, Some(&txn), 1_000 + i, "usd");
        bodies.push(event(
            &format!("evt_s{i}"),
            "charge.succeeded",
            object.clone(),
        ));
        bodies.push(event(
            &format!("evt_c{i}"),
            "charge.captured",
            object.clone(),
        ));
        bodies.push(captured_update(&format!("evt_u{i}"), object));
        let paid = payout(
            &format!("po_race{i}"),
            941 + i,
            &format!("txn_racepo{i}"),
            None,
            true,
        );
        bodies.push(event(
            &format!("evt_p{i}"),
            "payout.reconciliation_completed",
            paid,
        ));
    }
    let sends = bodies.iter().map(|body| app.post_stripe(body));
    for response in futures::future::join_all(sends).await {
        assert_eq!(response.status().as_u16(), 200);
    }
    app.wait_settled(60).await;
    assert_eq!(
        app.count("journal_entries").await,
        40,
        "20 charges and 20 payouts, once each"
    );
    assert_eq!(app.count("payout_items").await, 40);
    assert_eq!(
        app.texts("SELECT DISTINCT status FROM settlement_events")
            .await,
        ["posted"]
    );
    for i in 0..20 {
        let (_, reconciliation) = app
            .api_get(
                &format!("/api/payouts/po_race{i}/reconciliation"),
                Some(OPS_TOKEN),
            )
            .await;
        assert_eq!(reconciliation["status"], "matched", "{reconciliation}");
    }
    assert!(app.failed_invariants().await.is_empty());
}

/// An event whose stored trigger this build cannot read is dead-lettered by its own job; the
/// jobs read beside it post.
#[tokio::test]
async fn an_unreadable_trigger_dead_letters_its_event_only() {
    let app = app(Backend::Postgres).await;
    app.exec(
        "WITH e AS (
             INSERT INTO settlement_events (source, external_id, status, kind, movement_id, fingerprint, facts, payload, job_id)
             VALUES ('stripe', 'evt_future', 'recorded', 'charge.succeeded', 'ch_f', repeat('b', 64),
                     '{\"stripe\": {\"event_type\": \"charge.succeeded\", \"object\": \"ch_f\", \"from_the_future\": 1}}',
                     '{}', apalis.generate_ulid())
             RETURNING id, job_id)
         INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at)
         SELECT job_id, 'settle::PostSettlement', convert_to(json_build_object('event_id', id)::text, 'UTF8'),
                'Pending', 0, 1000000, now() FROM e",
    )
    .await
    .expect("an event a later build wrote");
    for i in 0..5 {
        let (ch, txn) = (format!("ch_ok{i}"), format!("txn_ok{i}"));
        recorded(
            &app,
            &event(
                &format!("evt_ok{i}"),
                "charge.succeeded",
                charge(&ch, Some(&txn), 1_000, "usd"),
            ),
        )
        .await;
    }
    app.wait_settled(30).await;
    assert_eq!(
        app.event_state("evt_future").await,
        ("abandoned".into(), Some("corrupt_event".into()))
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE status = 'posted'")
            .await,
        5
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM job_attempts WHERE outcome = 'died'")
            .await,
        0,
        "no other job lost an attempt"
    );
}

/// A source held to 2 requests a second keeps its backlog in the queue, put off at its budget's
/// pace, not in the worker's 12 job slots: another source's events, recorded after the whole
/// backlog, post while it drains, and each put-off event still takes one attempt.
async fn a_throttled_sources_backlog_waits_in_the_queue_not_in_the_workers_slots(backend: Backend) {
    let app = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nconcurrency = 12\n"),
        stripe_requests_per_sec: 2,
        ..AppOptions::on(backend)
    })
    .await;
    app.stripe.enforce(RateLimits {
        per_sec: 2,
        endpoint_per_sec: 2,
    });
    for n in 0..30 {
        let charge = charge(
            &format!("ch_slow_{n}"),
            Some(&format!("txn_slow_{n}")),
            1_000,
            "usd",
        );
        recorded(
            &app,
            &event(&format!("evt_slow_{n}"), "charge.succeeded", charge),
        )
        .await;
    }
    for n in 0..20 {
        let body = standard_charge(&format!("std_{n}"), "10.00", "0.30", "9.70");
        let response = app.post_standard(&format!("msg_std_{n}"), &body).await;
        assert_eq!(response.status().as_u16(), 200);
    }
    app.wait_for(
        "the other source's events to post",
        60,
        "SELECT count(*) = 20 FROM settlement_events WHERE source = 'std' AND status = 'posted'",
    )
    .await;
    // Twelve slots held by the backlog would have let the other source in only once eighteen of
    // the thirty had posted.
    let throttled = app
        .scalar(
            "SELECT count(*) FROM settlement_events WHERE source = 'stripe' AND status = 'posted'",
        )
        .await;
    assert!(throttled < 12, "{throttled} of the backlog posted first");
    app.wait_settled(90).await;
    assert_eq!(
        app.scalar(
            "SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
             WHERE e.source = 'stripe'"
        )
        .await,
        30,
        "a job put off starts no attempt"
    );
    let put_off = app.metric("settle_jobs_total{outcome=\"put_off\"}").await;
    assert!(put_off >= 1.0, "{put_off} jobs put off");
    assert_eq!(
        app.stripe.rate_limited(),
        0,
        "the budget kept Stripe's limit"
    );
    assert!(app.failed_invariants().await.is_empty());
}
