//! Stripe's feed: settle sweeps Stripe's own list of balance transactions (`GET
//! /v1/balance_transactions` by `created` window), so money with no webhook is booked, a webhook
//! only wakes the sweep, a transaction Stripe lists late is read again by the overlap, and a
//! feed that stopped catches up from where it was. The fake Stripe API enforces Stripe's
//! published rate limits. Both backends.

use chrono::Utc;
use providers::stripe::fake::{FakeStripe, RateLimits};
use serde_json::Value;
use std::sync::Arc;
use tests::TestApp;
use tests::app::{AppOptions, Backend, STRIPE_API_KEY, STRIPE_SECRET, spawn, start};
use tests::sign;
use tests::stripe::{Txn, charge, event};

tests::on_both_backends!(
    a_manual_payout_accounts_fees_and_transfers_are_booked_with_no_webhook,
    a_webhook_wakes_the_feed_and_the_overlap_reads_what_stripe_listed_late,
    a_feed_that_stopped_catches_up_from_its_last_window,
);

const SOURCE: &str = "stripe-feed";

/// The test app with a `stripe-feed` source sweeping `fake` every `every_secs`.
fn options(backend: Backend, fake: &Arc<FakeStripe>, every_secs: u64) -> AppOptions {
    AppOptions {
        extra: format!(
            r#"
            [[sources]]
            name = "{SOURCE}"
            provider = "stripe"
            secrets = ["{STRIPE_SECRET}"]
            livemode = false
            api_key = "{STRIPE_API_KEY}"
            api_base = "{base}"
            feed_every_secs = {every_secs}
            feed_overlap_secs = 30
            "#,
            base = fake.url(),
        ),
        stripe: Some(fake.clone()),
        ..AppOptions::on(backend)
    }
}

/// A fake that answers only what it holds, over Stripe's test-mode limits (25 a second).
async fn fake() -> Arc<FakeStripe> {
    let fake = Arc::new(
        FakeStripe::start(STRIPE_API_KEY)
            .await
            .expect("the fake Stripe API starts"),
    );
    fake.enforce(RateLimits {
        per_sec: 25,
        endpoint_per_sec: 25,
    });
    fake
}

/// `transaction` created at `created` (seconds), as Stripe dates it.
fn at(mut transaction: Value, created: i64) -> Value {
    transaction["created"] = Value::from(created);
    transaction
}

/// A transaction that is not a charge: `category` is its reporting category and type.
fn movement(id: &str, category: &str, amount: i64, source: Option<&str>, created: i64) -> Value {
    let mut transaction = Txn {
        id,
        category,
        transaction_type: category,
        amount,
        fees: &[],
        currency: "usd",
        source: source.unwrap_or_default(),
        exchange_rate: None,
    }
    .value();
    if source.is_none() {
        transaction["source"] = Value::Null;
    }
    at(transaction, created)
}

async fn wait_entries(app: &TestApp, ids: &[&str]) {
    let list = ids
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(", ");
    app.wait_for(
        &format!("entries of {list}"),
        60,
        &format!(
            "SELECT count(*) = {} FROM journal_entries WHERE movement_id IN ({list})",
            ids.len()
        ),
    )
    .await;
}

/// Requests that fetched one balance transaction by id.
fn fetched_by_id(fake: &FakeStripe) -> Vec<String> {
    fake.seen()
        .into_iter()
        .map(|seen| seen.path)
        .filter(|path| path.starts_with("/v1/balance_transactions/"))
        .collect()
}

async fn deliver(app: &TestApp, body: &str) -> u16 {
    let header = sign::stripe_header(STRIPE_SECRET, sign::now(), body.as_bytes());
    app.post(
        &format!("/webhooks/{SOURCE}"),
        &[("stripe-signature".into(), header)],
        body,
    )
    .await
    .status()
    .as_u16()
}

/// The `to` of the source's window `seq`, from its stored facts.
async fn window_end(app: &TestApp, seq: i64) -> i64 {
    let key = ledger::feed::Window::external_id(seq);
    let event = app
        .store
        .event_by_key(SOURCE, &key)
        .await
        .expect("store")
        .expect("the window");
    let window = ledger::feed::Window::from_facts(&event.facts.expect("facts"))
        .expect("a window")
        .expect("readable");
    window.to.timestamp()
}

async fn window_posted(app: &TestApp, seq: i64) {
    let key = ledger::feed::Window::external_id(seq);
    app.wait_for(
        &format!("window {key} to post"),
        60,
        &format!(
            "SELECT count(*) = 1 FROM settlement_events WHERE source = '{SOURCE}' \
             AND external_id = '{key}' AND status = 'posted'"
        ),
    )
    .await;
}

/// A manual-payout account: Stripe sends no webhook for its fees, transfers or its payout's
/// items, and cannot list a manual payout's items; the feed books each from Stripe's list.
async fn a_manual_payout_accounts_fees_and_transfers_are_booked_with_no_webhook(backend: Backend) {
    let fake = fake().await;
    let now = Utc::now().timestamp();
    fake.add_transaction(
        None,
        at(Txn::charge("txn_m_charge", "ch_m", 10_000, 320), now - 20),
    );
    fake.add_transaction(None, movement("txn_m_fee", "fee", -1_500, None, now - 15));
    fake.add_transaction(
        None,
        movement("txn_m_transfer", "transfer", -2_000, Some("tr_m"), now - 10),
    );
    fake.add_transaction(
        None,
        movement("txn_m_payout", "payout", -5_000, Some("po_manual"), now - 5),
    );
    let app = spawn(options(backend, &fake, 1)).await;

    wait_entries(
        &app,
        &[
            "txn_m_charge",
            "txn_m_fee",
            "txn_m_transfer",
            "txn_m_payout",
        ],
    )
    .await;
    assert_eq!(
        app.lines_of("txn_m_charge").await,
        [
            "stripe-feed:balance USD 96.8",
            "fees:stripe-feed USD 3.2",
            "sales USD -100"
        ]
    );
    assert_eq!(
        app.lines_of("txn_m_fee").await,
        ["stripe-feed:balance USD -15", "fees:stripe-feed USD 15"]
    );
    assert_eq!(
        app.lines_of("txn_m_payout").await,
        ["stripe-feed:balance USD -50", "bank USD 50"]
    );
    assert_eq!(
        app.scalar(&format!(
            "SELECT count(*) FROM settlement_events WHERE source = '{SOURCE}' AND external_id NOT LIKE 'feed:%'"
        ))
        .await,
        0,
        "no webhook was needed"
    );
    assert_eq!(fetched_by_id(&fake), Vec::<String>::new());
    assert_eq!(fake.rate_limited(), 0, "the budget kept to Stripe's limits");
    app.wait_settled(30).await;
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// A webhook records its event as always, and wakes the feed instead of fetching what it names;
/// the next window starts the overlap before the last one's end, so a transaction Stripe dated
/// inside the last window but listed only after it closed is still booked, once.
async fn a_webhook_wakes_the_feed_and_the_overlap_reads_what_stripe_listed_late(backend: Backend) {
    let fake = fake().await;
    // An hour between scheduled sweeps: only webhooks wake the feed here.
    let app = spawn(options(backend, &fake, 3_600)).await;
    window_posted(&app, 1).await;

    let now = Utc::now().timestamp();
    fake.add_transaction(None, at(Txn::charge("txn_w", "ch_w", 2_500, 103), now));
    let woke = event(
        "evt_w",
        "charge.succeeded",
        charge("ch_w", Some("txn_w"), 2_500, "usd"),
    );
    assert_eq!(deliver(&app, &woke).await, 200);
    wait_entries(&app, &["txn_w"]).await;
    window_posted(&app, 2).await;
    assert_eq!(
        fetched_by_id(&fake),
        Vec::<String>::new(),
        "the webhook fetched nothing by id"
    );

    // Dated five seconds before window 2 closed, listed only now.
    let end = window_end(&app, 2).await;
    fake.add_transaction(
        None,
        at(Txn::charge("txn_late", "ch_late", 4_000, 146), end - 5),
    );
    let woke = event(
        "evt_late",
        "charge.succeeded",
        charge("ch_late", Some("txn_late"), 4_000, "usd"),
    );
    assert_eq!(deliver(&app, &woke).await, 200);
    wait_entries(&app, &["txn_late"]).await;
    app.wait_settled(30).await;
    for id in ["txn_w", "txn_late"] {
        assert_eq!(
            app.scalar(&format!(
                "SELECT count(*) FROM journal_entries WHERE movement_id = '{id}'"
            ))
            .await,
            1,
            "{id} is booked once, however many windows listed it"
        );
    }
    assert_eq!(
        app.texts(&format!(
            "SELECT status FROM settlement_events WHERE source = '{SOURCE}' AND external_id LIKE 'evt_%' ORDER BY id"
        ))
        .await,
        ["posted", "posted"]
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// Webhooks stopped and settle was down: what Stripe dated since the feed's last window is read
/// when it runs again, from that window's end (less the overlap), with no webhook at all.
async fn a_feed_that_stopped_catches_up_from_its_last_window(backend: Backend) {
    let fake = fake().await;
    let app = spawn(options(backend, &fake, 3_600)).await;
    window_posted(&app, 1).await;
    let end = window_end(&app, 1).await;
    let database = app.stop().await;

    // While it was down: a charge, a refund and Stripe's fee for an account feature.
    fake.add_transaction(
        None,
        at(Txn::charge("txn_d_charge", "ch_d", 7_000, 233), end + 1),
    );
    fake.add_transaction(
        None,
        movement("txn_d_refund", "refund", -3_000, Some("re_d"), end + 2),
    );
    fake.add_transaction(None, movement("txn_d_fee", "fee", -200, None, end + 2));
    // Before the last window began: not the feed's (a backfill's), and not read again.
    fake.add_transaction(
        None,
        at(Txn::charge("txn_d_old", "ch_old", 1_000, 59), end - 3_600),
    );
    // The schedule (not a webhook) opens the next window: an hour has not passed, so make it one
    // second.
    let app = start(database, options(backend, &fake, 1)).await;

    wait_entries(&app, &["txn_d_charge", "txn_d_refund", "txn_d_fee"]).await;
    app.wait_settled(30).await;
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id = 'txn_d_old'")
            .await,
        0
    );
    assert_eq!(
        app.lines_of("txn_d_refund").await,
        ["stripe-feed:balance USD -30", "refunds USD 30"]
    );
    assert!(
        app.metric(&format!("settle_feed_lag_seconds{{source=\"{SOURCE}\"}}"))
            .await
            < 60.0
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}
