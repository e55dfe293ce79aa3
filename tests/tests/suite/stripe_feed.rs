//! Stripe's feed: settle sweeps Stripe's own list of balance transactions (`GET
//! /v1/balance_transactions` by `created` window), so money with no webhook is booked, a webhook
//! only wakes the sweep, a transaction Stripe lists late is read again by the overlap, and a
//! feed that stopped catches up from where it was. The fake Stripe API enforces Stripe's
//! published rate limits. Both backends.

use chrono::Utc;
use providers::stripe::fake::{FakeStripe, Fault, RateLimits};
use serde_json::Value;
use std::sync::Arc;
use tests::TestApp;
use tests::app::{
    AppOptions, Backend, FINANCE_TOKEN, OPS_TOKEN, STRIPE_API_KEY, STRIPE_SECRET, spawn, start,
};
use tests::process::{Scratch, run_settle};
use tests::sign;
use tests::stripe::{Txn, charge, event};

tests::on_both_backends!(
    a_manual_payout_accounts_fees_and_transfers_are_booked_with_no_webhook,
    a_connected_accounts_money_with_no_webhook_is_booked_by_its_own_feed,
    a_webhook_wakes_the_feed_and_the_overlap_reads_what_stripe_listed_late,
    a_feed_that_stopped_catches_up_from_its_last_window,
    an_outage_longer_than_the_overlap_is_listed_once,
    a_worker_that_starts_sweeps_at_once,
    each_category_books_to_its_account_and_what_settle_cannot_place_to_suspense,
    a_backfilled_account_equals_stripes_balance_and_its_coverage_is_complete,
    a_refused_key_pauses_the_feed_until_the_source_is_resumed,
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

/// The start of the window a listing request asked for (`created[gte]`).
fn listed_from(query: &str) -> Option<i64> {
    created_bound(query, "gte")
}

/// The end of the window a listing request asked for (`created[lt]`).
fn listed_to(query: &str) -> Option<i64> {
    created_bound(query, "lt")
}

/// A listing request's `created[{bound}]`, plain or percent-encoded.
fn created_bound(query: &str, bound: &str) -> Option<i64> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        let name = name.replace("%5B", "[").replace("%5D", "]");
        (name == format!("created[{bound}]"))
            .then(|| value.parse().ok())
            .flatten()
    })
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

/// Waits until the clock has passed Unix second `second`.
async fn wait_past(second: i64) {
    while Utc::now().timestamp() <= second {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// How many feed windows have opened, once none has opened for 2.5 s (the windows a start
/// opens one after another have stopped), looked at for at most six such spells.
async fn windows_once_still(app: &TestApp) -> i64 {
    let windows = "SELECT count(*) FROM settlement_events WHERE kind = 'feed.window'";
    let mut opened = app.scalar(windows).await;
    for _ in 0..6 {
        tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
        app.wait_settled(30).await;
        let now = app.scalar(windows).await;
        if now == opened {
            break;
        }
        opened = now;
    }
    opened
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

/// A platform that posts its connected accounts (`connect = "post"`): each account Stripe lists
/// as connected (`GET /v1/accounts`) has a feed of its own, read with its `Stripe-Account`
/// header, so its Stripe fee and its transfer (no webhook for either) are booked to accounts
/// namespaced by it; a webhook of the account still books what it names, and the feed finds
/// it booked: one entry. The platform's own feed is unchanged.
async fn a_connected_accounts_money_with_no_webhook_is_booked_by_its_own_feed(backend: Backend) {
    const ACCOUNT: &str = "acct_1ConnFeed";
    let fake = fake().await;
    let now = Utc::now().timestamp();
    fake.add_account(ACCOUNT);
    fake.add_transaction(
        Some(ACCOUNT),
        at(Txn::charge("txn_c_charge", "ch_c", 10_000, 320), now - 20),
    );
    fake.add_transaction(
        Some(ACCOUNT),
        movement("txn_c_fee", "fee", -1_500, None, now - 15),
    );
    fake.add_transaction(
        Some(ACCOUNT),
        movement("txn_c_transfer", "transfer", -2_000, Some("tr_c"), now - 10),
    );
    // An account Stripe does not list as the platform's is never read.
    fake.add_transaction(
        Some("acct_1NotOurs"),
        movement("txn_x_fee", "fee", -100, None, now - 10),
    );
    fake.add_transaction(
        None,
        at(Txn::charge("txn_p_charge", "ch_p", 5_000, 175), now - 12),
    );
    let mut options = options(backend, &fake, 1);
    options.extra = options.extra.replace(
        "livemode = false",
        "livemode = false\n            connect = \"post\"",
    );
    let app = spawn(options).await;

    wait_entries(
        &app,
        &[
            "txn_c_charge",
            "txn_c_fee",
            "txn_c_transfer",
            "txn_p_charge",
        ],
    )
    .await;
    assert_eq!(
        app.lines_of("txn_c_fee").await,
        [
            format!("{SOURCE}:balance:{ACCOUNT} USD -15"),
            format!("fees:{SOURCE}:{ACCOUNT} USD 15")
        ]
    );
    assert_eq!(
        app.lines_of("txn_c_charge").await,
        [
            format!("{SOURCE}:balance:{ACCOUNT} USD 96.8"),
            format!("fees:{SOURCE}:{ACCOUNT} USD 3.2"),
            format!("sales:{ACCOUNT} USD -100")
        ]
    );
    assert_eq!(
        app.lines_of("txn_p_charge").await,
        [
            format!("{SOURCE}:balance USD 48.25"),
            format!("fees:{SOURCE} USD 1.75"),
            "sales USD -50".to_owned()
        ]
    );
    assert!(
        app.scalar(&format!(
            "SELECT count(*) FROM settlement_events WHERE source = '{SOURCE}' \
             AND external_id LIKE 'feed:{ACCOUNT}:%'"
        ))
        .await
            >= 1,
        "the account's windows are events of the source"
    );
    let listings: Vec<_> = fake
        .seen()
        .into_iter()
        .filter(|seen| seen.path == "/v1/balance_transactions")
        .collect();
    assert!(
        listings
            .iter()
            .any(|seen| seen.account.as_deref() == Some(ACCOUNT)),
        "the account's list is read with its Stripe-Account header"
    );
    assert!(
        listings
            .iter()
            .all(|seen| seen.account.as_deref() != Some("acct_1NotOurs"))
    );

    // The account's webhook for its charge: recorded, and its balance transaction found booked.
    let mut connected: Value = serde_json::from_str(&event(
        "evt_c_charge",
        "charge.succeeded",
        charge("ch_c", Some("txn_c_charge"), 10_000, "usd"),
    ))
    .expect("json");
    connected["account"] = Value::from(ACCOUNT);
    assert_eq!(deliver(&app, &connected.to_string()).await, 200);
    app.wait_settled(30).await;
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id = 'txn_c_charge'")
            .await,
        1
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id = 'txn_x_fee'")
            .await,
        0
    );
    assert_eq!(fake.rate_limited(), 0, "the budget kept to Stripe's limits");
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// A webhook records its event as always, and wakes the feed instead of fetching what it names;
/// every second is listed again by a window opened at least the overlap after it, so a
/// transaction Stripe dated inside the last window but listed only after it closed is still
/// booked, once.
async fn a_webhook_wakes_the_feed_and_the_overlap_reads_what_stripe_listed_late(backend: Backend) {
    let fake = fake().await;
    // An hour between scheduled sweeps: only webhooks wake the feed here; an overlap of eight
    // seconds.
    const OVERLAP: i64 = 8;
    let options = options(backend, &fake, 3_600);
    let app = spawn(AppOptions {
        extra: options.extra.replace(
            "feed_overlap_secs = 30",
            &format!("feed_overlap_secs = {OVERLAP}"),
        ),
        ..options
    })
    .await;
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
    // The window it wakes reads the last two seconds before window 2's end again; what lies
    // before them is read by the first window opened the overlap after window 2's end (the
    // next webhook's, here), so every second is read once more at least the overlap after it.
    wait_past(end + OVERLAP).await;
    let now = Utc::now().timestamp();
    fake.add_transaction(None, at(Txn::charge("txn_next", "ch_next", 1_500, 74), now));
    let woke = event(
        "evt_next",
        "charge.succeeded",
        charge("ch_next", Some("txn_next"), 1_500, "usd"),
    );
    assert_eq!(deliver(&app, &woke).await, 200);
    wait_entries(&app, &["txn_late", "txn_next"]).await;
    app.wait_settled(30).await;
    // When each listing that covered txn_late's second was asked for.
    let relisted: Vec<i64> = fake
        .seen()
        .iter()
        .filter(|s| s.path == "/v1/balance_transactions")
        .filter(|s| listed_from(&s.query).is_some_and(|from| from <= end - 5))
        .filter(|s| listed_to(&s.query).is_some_and(|to| to > end - 5))
        .map(|s| s.at)
        .collect();
    assert!(
        relisted.iter().any(|at| *at >= end - 5 + OVERLAP),
        "a listing at least the overlap after txn_late's second read it: {relisted:?}"
    );
    for id in ["txn_w", "txn_late", "txn_next"] {
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
        ["posted", "posted", "posted"]
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// A worker that starts cannot know what happened while none ran: it sweeps each source's feed
/// at once, not when the schedule next falls due.
async fn a_worker_that_starts_sweeps_at_once(backend: Backend) {
    let fake = fake().await;
    let app = spawn(options(backend, &fake, 3_600)).await;
    window_posted(&app, 1).await;
    let end = window_end(&app, 1).await;
    let database = app.stop().await;
    fake.add_transaction(None, movement("txn_s_fee", "fee", -150, None, end + 1));
    wait_past(end + 1).await;
    // An hour between scheduled sweeps and no webhook: only the start opens window 2.
    let app = start(database, options(backend, &fake, 3_600)).await;
    window_posted(&app, 2).await;
    wait_entries(&app, &["txn_s_fee"]).await;
    // Window 2 reads anew at most twice what window 1 did: if the restart took longer, the
    // windows after it follow at once until one reaches the time it opened at; then none opens
    // until the schedule or a webhook.
    let opened = windows_once_still(&app).await;
    assert!(
        (2..=4).contains(&opened),
        "windows at the start until caught up ({opened}), then none until the schedule or a webhook"
    );
    // The last one reached the time it opened at.
    let last = window_end(&app, opened).await;
    let opened_at = app
        .store
        .event_by_key(SOURCE, &ledger::feed::Window::external_id(opened))
        .await
        .expect("store")
        .expect("the window")
        .received_at
        .timestamp();
    assert!(
        last + 1 >= opened_at,
        "caught up: window {opened} ends at {last}, opened at {opened_at}"
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// Every second is listed again by a window opened at least the overlap after it, unless its
/// first listing already was: a feed caught up after an outage longer than the overlap lists
/// what happened in it once, and books it.
async fn an_outage_longer_than_the_overlap_is_listed_once(backend: Backend) {
    let fake = fake().await;
    const OVERLAP: i64 = 4;
    let with_overlap = |options: AppOptions| AppOptions {
        extra: options.extra.replace(
            "feed_overlap_secs = 30",
            &format!("feed_overlap_secs = {OVERLAP}"),
        ),
        ..options
    };
    let app = spawn(with_overlap(options(backend, &fake, 3_600))).await;
    window_posted(&app, 1).await;
    let end = window_end(&app, 1).await;
    let database = app.stop().await;
    fake.add_transaction(None, movement("txn_o_fee", "fee", -125, None, end + 1));
    // Down for longer than the overlap: the first listing of `end + 1` is late enough.
    wait_past(end + 2 + OVERLAP).await;
    let app = start(database, with_overlap(options(backend, &fake, 3_600))).await;
    wait_entries(&app, &["txn_o_fee"]).await;
    // The windows at the start follow one another until one reaches the time it opened at.
    let opened = windows_once_still(&app).await;
    assert!(
        opened >= 3,
        "the start's window and the one after it ({opened})"
    );
    let listings: Vec<(i64, i64)> = fake
        .seen()
        .iter()
        .filter(|seen| seen.path == "/v1/balance_transactions")
        .filter_map(|seen| Some((listed_from(&seen.query)?, listed_to(&seen.query)?)))
        .filter(|(from, to)| (*from..*to).contains(&(end + 1)))
        .collect();
    assert_eq!(
        listings.len(),
        1,
        "second {} listed once, by a window opened the overlap after it: {listings:?}",
        end + 1
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id = 'txn_o_fee'")
            .await,
        1
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// Webhooks stopped and settle was down: what Stripe dated since the feed's last window is read
/// when it runs again, from that window's end (less the overlap), with no webhook at all.
async fn a_feed_that_stopped_catches_up_from_its_last_window(backend: Backend) {
    let fake = fake().await;
    // Stripe answers slowly: the first window takes 6 s to list a second anew, so the next one
    // reads a second past it, at that pace about 5 s of listing.
    fake.set_latency(std::time::Duration::from_secs(6));
    let app = spawn(options(backend, &fake, 3_600)).await;
    window_posted(&app, 1).await;
    fake.set_latency(std::time::Duration::ZERO);
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
    // And a backlog of many pages, most of it in the outage's first seconds: the window is
    // listed in parts side by side.
    let backlog: Vec<String> = (0..1_234).map(|i| format!("txn_d_many_{i}")).collect();
    for (i, id) in backlog.iter().enumerate() {
        let created = end + 1 + (i as i64 % 3);
        fake.add_transaction(
            None,
            at(Txn::charge(id, &format!("ch_many_{i}"), 1_000, 59), created),
        );
    }
    // Before the last window began: not the feed's (a backfill's), and not read again.
    fake.add_transaction(
        None,
        at(Txn::charge("txn_d_old", "ch_old", 1_000, 59), end - 3_600),
    );
    // No webhook wakes the feed and its schedule is an hour: a worker that starts sweeps at
    // once, and a window cut short of the time it opened at is followed at once by the next.
    let app = start(database, options(backend, &fake, 3_600)).await;

    wait_entries(&app, &["txn_d_charge", "txn_d_refund", "txn_d_fee"]).await;
    app.wait_settled(30).await;
    // The backlog's last second may be read by a later window than the ones above.
    app.wait_for(
        "the backlog",
        60,
        &format!(
            "SELECT count(*) >= {} FROM journal_entries WHERE movement_id LIKE 'txn_d_many_%'",
            backlog.len()
        ),
    )
    .await;
    app.wait_settled(30).await;
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id LIKE 'txn_d_many_%'")
            .await,
        backlog.len() as i64,
        "the backlog booked, each transaction once"
    );
    // Every window spans at least the overlap (30 s); a listing narrower is a part of one.
    let parts = fake
        .seen()
        .iter()
        .filter(|seen| seen.path == "/v1/balance_transactions")
        .filter_map(|seen| Some(listed_to(&seen.query)? - listed_from(&seen.query)?))
        .filter(|span| *span < 30)
        .count();
    assert!(
        parts > 1,
        "the catch-up window was listed in parts ({parts})"
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id = 'txn_d_old'")
            .await,
        0
    );
    assert_eq!(
        window_end(&app, 2).await,
        end + 1,
        "the window after a slow one reads a second anew"
    );
    assert!(
        window_end(&app, 3).await > end + 1,
        "the next one follows at once and reads further"
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

/// The chart of accounts on real listings: application fees are revenue, network costs their
/// own fee account, a partial capture's reversal takes back from sales; a category settle does
/// not know and a transaction that does not add up are each booked to `suspense:{source}` (what
/// they did to the Stripe balance kept exact), raised as review items, and the rest of the
/// listing is booked.
async fn each_category_books_to_its_account_and_what_settle_cannot_place_to_suspense(
    backend: Backend,
) {
    let fake = fake().await;
    let now = Utc::now().timestamp();
    fake.add_transaction(
        None,
        movement("txn_c_app", "platform_earning", 500, Some("fee_1"), now - 9),
    );
    fake.add_transaction(
        None,
        movement("txn_c_net", "network_cost", -30, None, now - 8),
    );
    fake.add_transaction(
        None,
        at(Txn::charge("txn_c_auth", "ch_c", 10_000, 320), now - 7),
    );
    fake.add_transaction(
        None,
        movement(
            "txn_c_partial",
            "partial_capture_reversal",
            -2_000,
            Some("ch_c"),
            now - 6,
        ),
    );
    fake.add_transaction(
        None,
        movement("txn_c_new", "a_category_from_2027", -100, None, now - 5),
    );
    let mut broken = at(Txn::charge("txn_c_bad", "ch_bad", 1_000, 30), now - 4);
    broken["net"] = Value::from(900);
    fake.add_transaction(None, broken);
    let app = spawn(options(backend, &fake, 1)).await;

    let all = [
        "txn_c_app",
        "txn_c_net",
        "txn_c_auth",
        "txn_c_partial",
        "txn_c_new",
        "txn_c_bad",
    ];
    wait_entries(&app, &all).await;
    assert_eq!(
        app.lines_of("txn_c_app").await,
        [
            "stripe-feed:balance USD 5",
            "revenue:application_fees USD -5"
        ]
    );
    assert_eq!(
        app.lines_of("txn_c_net").await,
        [
            "stripe-feed:balance USD -0.3",
            "network_costs:stripe-feed USD 0.3"
        ]
    );
    assert_eq!(
        app.lines_of("txn_c_partial").await,
        ["stripe-feed:balance USD -20", "sales USD 20"]
    );
    assert_eq!(
        app.lines_of("txn_c_new").await,
        ["stripe-feed:balance USD -1", "suspense:stripe-feed USD 1"]
    );
    assert_eq!(
        app.lines_of("txn_c_bad").await,
        ["stripe-feed:balance USD 9", "suspense:stripe-feed USD -9"],
        "what Stripe says reached its balance, kept exact"
    );
    app.wait_settled(30).await;
    assert_eq!(
        app.metric("settle_suspense_entries{account=\"suspense:stripe-feed\"}")
            .await,
        2.0
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// An account with history: `settle backfill` books every balance transaction since the date
/// (a window a day) and an opening balance equal to what Stripe held then (its balance now less
/// everything since), so `settle reconcile balance` finds the books equal to Stripe's balance,
/// to the minor unit; money that came in after the feed's cut explains the difference until it
/// is swept; `settle reconcile coverage` finds every listed transaction booked. Run twice, the
/// backfill books nothing twice.
async fn a_backfilled_account_equals_stripes_balance_and_its_coverage_is_complete(
    backend: Backend,
) {
    let fake = fake().await;
    let now = Utc::now().timestamp();
    let day = 86_400;
    // Before the backfill's first day: only in Stripe's balance.
    fake.add_transaction(
        None,
        at(
            Txn::charge("txn_b_old", "ch_old", 50_000, 1_480),
            now - 30 * day,
        ),
    );
    // Since: four days of activity, in two currencies.
    fake.add_transaction(
        None,
        at(Txn::charge("txn_b_1", "ch_1", 10_000, 320), now - 4 * day),
    );
    fake.add_transaction(
        None,
        movement("txn_b_fee", "fee", -1_500, None, now - 3 * day),
    );
    fake.add_transaction(
        None,
        movement("txn_b_ref", "refund", -2_500, Some("re_1"), now - 2 * day),
    );
    fake.add_transaction(
        None,
        movement(
            "txn_b_po",
            "payout",
            -30_000,
            Some("po_1"),
            now - 2 * day + 60,
        ),
    );
    let mut eur = Txn::charge("txn_b_eur", "ch_eur", 7_000, 233);
    eur["currency"] = Value::from("eur");
    eur["fee_details"][0]["currency"] = Value::from("eur");
    fake.add_transaction(None, at(eur, now - day));
    // An hour between sweeps and no webhook: the feed opens its first window and waits.
    let app = spawn(options(backend, &fake, 3_600)).await;
    window_posted(&app, 1).await;

    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &tests::app::config_toml(&app.database_url(), &options(backend, &fake, 3_600)),
    );
    let since = (Utc::now() - chrono::TimeDelta::days(5))
        .date_naive()
        .to_string();
    let (ok, output) = run_settle(
        &config,
        &app.database_url(),
        &["backfill", SOURCE, "--since", &since],
    )
    .await;
    assert!(ok, "{output}");
    wait_entries(
        &app,
        &["txn_b_1", "txn_b_fee", "txn_b_ref", "txn_b_po", "txn_b_eur"],
    )
    .await;
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id = 'txn_b_old'")
            .await,
        0
    );
    // The history is listed once: the opening is computed from the books, not by listing
    // everything since the first day again.
    let since_ts = chrono::NaiveDate::parse_from_str(&since, "%Y-%m-%d")
        .expect("date")
        .and_time(chrono::NaiveTime::MIN)
        .and_utc()
        .timestamp();
    let from_since = fake
        .seen()
        .iter()
        .filter(|s| s.path == "/v1/balance_transactions" && listed_from(&s.query) == Some(since_ts))
        .count();
    assert_eq!(
        from_since, 1,
        "one listing from the first day: its own window's"
    );
    // Stripe held 50,000 - 1,480 cents before the first day.
    assert_eq!(
        app.lines_of("opening_usd").await,
        ["stripe-feed:balance USD 485.2", "equity:opening USD -485.2"]
    );
    assert_eq!(
        app.lines_of("opening_eur").await,
        Vec::<String>::new(),
        "nothing in EUR before"
    );

    let (ok, output) = run_settle(
        &config,
        &app.database_url(),
        &["reconcile", "balance", SOURCE, "--json"],
    )
    .await;
    assert!(ok, "{output}");
    let check: Value = serde_json::from_str(&output).expect("json");
    let usd = &check["currencies"][1];
    assert_eq!(
        (
            usd["currency"].as_str(),
            usd["provider"].as_str(),
            usd["books"].as_str(),
            usd["difference"].as_str()
        ),
        (Some("USD"), Some("242"), Some("242"), Some("0")),
        "{check}"
    );
    assert_eq!(check["currencies"][0]["difference"], "0", "{check}");

    // Money after the feed's cut, not swept yet: it explains the difference.
    fake.add_transaction(
        None,
        at(
            Txn::charge("txn_b_new", "ch_new", 1_000, 59),
            Utc::now().timestamp(),
        ),
    );
    let (ok, output) = run_settle(
        &config,
        &app.database_url(),
        &["reconcile", "balance", SOURCE, "--json"],
    )
    .await;
    assert!(ok, "{output}");
    let check: Value = serde_json::from_str(&output).expect("json");
    let usd = &check["currencies"][1];
    assert_eq!(
        (
            usd["after_cut"].as_str(),
            usd["after_cut_count"].as_u64(),
            usd["difference"].as_str()
        ),
        (Some("9.41"), Some(1), Some("0")),
        "{check}"
    );

    let from = (Utc::now() - chrono::TimeDelta::days(5))
        .date_naive()
        .to_string();
    let to = (Utc::now() - chrono::TimeDelta::days(1))
        .date_naive()
        .to_string();
    let coverage_args = [
        "reconcile",
        "coverage",
        SOURCE,
        "--from",
        &from,
        "--to",
        &to,
    ];
    let (ok, output) = run_settle(&config, &app.database_url(), &coverage_args).await;
    assert!(ok, "{output}");
    assert!(output.contains("complete"), "{output}");

    // The same through the API, for finance as for ops.
    let (status, feed) = app
        .api_get(&format!("/api/sources/{SOURCE}/feed"), Some(FINANCE_TOKEN))
        .await;
    assert_eq!(status, 200, "{feed}");
    let progress = &feed["backfill"]["progress"];
    // A window a day from the first day to where the feed began (five days and today's part).
    let windows = progress["windows"].as_u64().unwrap_or(0);
    assert!((5..=6).contains(&windows), "{feed}");
    assert_eq!(
        (
            feed["backfill"]["since"].as_str(),
            progress["posted"].as_u64(),
            progress["abandoned"].as_u64(),
            progress["opening_posted"].as_bool()
        ),
        (Some(since.as_str()), Some(windows), Some(0), Some(true)),
        "{feed}"
    );
    assert!(feed["lag_seconds"].as_i64().is_some(), "{feed}");
    let (status, balance) = app
        .api_get(&format!("/api/sources/{SOURCE}/balance"), Some(OPS_TOKEN))
        .await;
    assert_eq!(status, 200, "{balance}");
    assert_eq!(
        (
            balance["currencies"][1]["provider"].as_str(),
            balance["currencies"][1]["difference"].as_str()
        ),
        (Some("251.41"), Some("0")),
        "{balance}"
    );
    let (status, coverage) = app
        .api_get(
            &format!("/api/sources/{SOURCE}/coverage?from={from}&to={to}"),
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{coverage}");
    assert_eq!(
        (
            coverage["missing_in_books"].as_array().map(Vec::len),
            coverage["differing"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0)),
        "{coverage}"
    );
    let provider_count: u64 = coverage["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["provider_count"].as_u64())
        .sum();
    assert_eq!(provider_count, 5, "{coverage}");
    let (status, refused) = app
        .api_get(
            &format!("/api/sources/{SOURCE}/coverage?from={to}&to={from}"),
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (400, Some("bad_request"))
    );
    let (status, _) = app
        .api_get("/api/sources/nowhere/balance", Some(OPS_TOKEN))
        .await;
    assert_eq!(status, 404);
    let (status, _) = app
        .api_get(&format!("/api/sources/{SOURCE}/feed"), None)
        .await;
    assert_eq!(status, 401);

    // Again: nothing new is booked, the opening stays one.
    let entries = app.count("journal_entries").await;
    let (ok, output) = run_settle(
        &config,
        &app.database_url(),
        &["backfill", SOURCE, "--since", &since],
    )
    .await;
    assert!(ok, "{output}");
    app.wait_settled(60).await;
    assert_eq!(app.count("journal_entries").await, entries);
    // Another date would make a second opening: refused.
    let earlier = (Utc::now() - chrono::TimeDelta::days(9))
        .date_naive()
        .to_string();
    let (ok, output) = run_settle(
        &config,
        &app.database_url(),
        &["backfill", SOURCE, "--since", &earlier, "--no-wait"],
    )
    .await;
    assert!(!ok, "{output}");
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id LIKE 'opening_%'")
            .await,
        1,
        "one opening"
    );

    // The workers' periodic check: nothing unexplained; then Stripe holds a cent the books do
    // not (a movement settle never saw), and the gauge the alert reads says so.
    let settings = ops::config::Config::from_toml(&tests::app::config_toml(
        &app.database_url(),
        &options(backend, &fake, 3_600),
    ))
    .expect("the configuration");
    let checks = ops::feeds::BalanceChecks {
        store: app.store.clone(),
        sources: vec![ledger::SourceName::parse(SOURCE).expect("source")],
        resolvers: settings.resolvers().expect("resolvers"),
        rules: settings.posting_rules(),
    };
    checks.check_all().await;
    assert_eq!(unexplained(&app, "USD").await.as_deref(), Some("0"));
    fake.set_balance(
        None,
        serde_json::json!({"object": "balance", "livemode": false,
            "available": [{"amount": 25_142, "currency": "usd"}, {"amount": 6_767, "currency": "eur"}],
            "pending": []}),
    );
    checks.check_all().await;
    assert_eq!(unexplained(&app, "USD").await.as_deref(), Some("0.01"));
    assert_eq!(unexplained(&app, "EUR").await.as_deref(), Some("0"));

    // The books hold a movement Stripe no longer lists: coverage names it, on that side.
    fake.remove_transaction(None, "txn_b_fee");
    let (status, coverage) = app
        .api_get(
            &format!("/api/sources/{SOURCE}/coverage?from={from}&to={to}"),
            Some(FINANCE_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{coverage}");
    assert_eq!(
        (
            coverage["not_listed"].clone(),
            coverage["missing_in_books"].clone()
        ),
        (serde_json::json!(["txn_b_fee"]), serde_json::json!([])),
        "{coverage}"
    );
    let (ok, output) = run_settle(&config, &app.database_url(), &coverage_args).await;
    assert!(!ok, "{output}");
    assert!(
        output.contains("in the books, not listed by the provider: txn_b_fee"),
        "{output}"
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// `settle_provider_balance_unexplained` of the feed's source in `currency`, as `/metrics` shows it.
async fn unexplained(app: &TestApp, currency: &str) -> Option<String> {
    app.metrics_page().await.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name.starts_with("settle_provider_balance_unexplained{")
            && name.contains(&format!("source=\"{SOURCE}\""))
            && name.contains(&format!("currency=\"{currency}\"")))
        .then(|| value.to_owned())
    })
}

/// Stripe refuses the key (401) when the feed lists: settle pauses the source, and its window
/// waits with the refused attempt recorded. Webhooks keep arriving and are recorded, but no
/// window opens (every second, it would) and nothing is dead-lettered; the key fixed, resuming
/// the source lets the feed go on, and what arrived meanwhile is booked.
async fn a_refused_key_pauses_the_feed_until_the_source_is_resumed(backend: Backend) {
    let fake = fake().await;
    fake.fail_next("/v1/balance_transactions", vec![Fault::Unauthorized]);
    let app = spawn(options(backend, &fake, 1)).await;
    let first = ledger::feed::Window::external_id(1);
    app.wait_paused_by_settle(SOURCE, "provider_auth: %").await;
    assert_eq!(app.event_state(&first).await, ("recorded".into(), None));

    fake.add_transaction(
        None,
        at(
            Txn::charge("txn_k", "ch_k", 3_000, 117),
            Utc::now().timestamp(),
        ),
    );
    let woke = event(
        "evt_k",
        "charge.succeeded",
        charge("ch_k", Some("txn_k"), 3_000, "usd"),
    );
    assert_eq!(deliver(&app, &woke).await, 200);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        app.scalar(&format!(
            "SELECT count(*) FROM settlement_events WHERE source = '{SOURCE}' AND external_id LIKE 'feed:%'"
        ))
        .await,
        1,
        "the feed waits on its paused window"
    );
    assert_eq!(app.count("dead_letters").await, 0, "nothing dead-lettered");
    assert_eq!(
        app.scalar(&format!(
            "SELECT count(*) FROM job_attempts a JOIN settlement_events e ON e.id = a.event_id
             WHERE e.external_id = '{first}' AND a.error_code = 'provider_auth'"
        ))
        .await,
        1,
        "the refused listing is recorded as the window's attempt"
    );
    assert_eq!(
        app.metric_becoming(
            &format!("settle_source_paused_provider_auth{{source=\"{SOURCE}\"}}"),
            1.0
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE movement_id = 'txn_k'")
            .await,
        0
    );

    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &tests::app::config_toml(&app.database_url(), &options(backend, &fake, 1)),
    );
    let (ok, output) = run_settle(
        &config,
        &app.database_url(),
        &["sources", "resume", SOURCE, "--reason", "key fixed"],
    )
    .await;
    assert!(ok, "{output}");
    wait_entries(&app, &["txn_k"]).await;
    assert_eq!(app.event_state(&first).await, ("posted".into(), None));
    assert_eq!(app.count("dead_letters").await, 0);
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}
