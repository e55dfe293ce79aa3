use std::collections::HashSet;

use ledger::PayoutId;
use serde_json::json;

use super::*;

fn transaction(
    id: &str,
    category: &str,
    amount: i64,
    fee: i64,
    source: &str,
) -> BalanceTransaction {
    serde_json::from_value(json!({
        "id": id, "object": "balance_transaction", "amount": amount, "available_on": 1_700_600_000,
        "created": 1_700_000_000, "currency": "usd", "exchange_rate": null, "fee": fee,
        "fee_details": if fee == 0 { json!([]) } else {
            json!([{"amount": fee, "currency": "usd", "type": "stripe_fee", "description": "Stripe processing fees", "application": null}])
        },
        "net": amount - fee, "reporting_category": category, "source": source,
        "status": "available", "type": category}))
    .expect("transaction")
}

fn lines(resolved: &Resolved) -> Vec<Vec<(String, String)>> {
    resolved
        .entries
        .iter()
        .map(|e| {
            e.draft
                .lines
                .iter()
                .map(|l| (l.account.clone(), l.amount.to_string()))
                .collect()
        })
        .collect()
}

#[test]
fn a_payout_listing_drafts_every_item_and_ties_them() {
    let source = SourceName::parse("stripe").expect("source");
    let accounts = Accounts::defaults(&source);
    let listing = [
        transaction("txn_c", "charge", 10_000, 320, "ch_1"),
        transaction("txn_f", "fee", -500, 0, "fee_1"),
        transaction("txn_p", "payout", -9_180, 0, "po_1"),
    ];
    let resolved =
        draft(&source, &accounts, None, Some("po_1"), &listing).expect("drafted");
    assert_eq!(resolved.payout.as_ref().map(PayoutId::as_str), Some("po_1"));
    assert_eq!(
        lines(&resolved),
        [
            vec![
                ("stripe:balance".into(), "96.80".into()),
                ("fees:stripe".into(), "3.20".into()),
                ("sales".into(), "-100.00".into())
            ],
            vec![
                ("stripe:balance".into(), "-5.00".into()),
                ("fees:stripe".into(), "5.00".into())
            ],
            vec![
                ("stripe:balance".into(), "-91.80".into()),
                ("bank".into(), "91.80".into())
            ],
        ]
    );
    assert!(resolved.entries.iter().all(|e| e.draft.is_balanced()));
}

#[test]
fn a_connected_account_never_touches_the_platforms_accounts() {
    let source = SourceName::parse("stripe").expect("source");
    let listing = [transaction("txn_c", "charge", 1_000, 59, "ch_1")];
    let resolved = draft(
        &source,
        &Accounts::defaults(&source),
        Some("acct_9"),
        Some("po_1"),
        &listing,
    )
    .expect("drafted");
    let accounts: Vec<String> = lines(&resolved)[0].iter().map(|(a, _)| a.clone()).collect();
    assert_eq!(
        accounts,
        [
            "stripe:balance:acct_9",
            "fees:stripe:acct_9",
            "sales:acct_9"
        ]
    );
    assert_eq!(
        resolved.entries[0].movement.source_key(),
        "stripe/acct_9/balance_transaction/txn_c"
    );
}

#[test]
fn the_rest_of_a_window_is_cut_by_the_first_pages_density() {
    let after = "txn_x";
    // The first page held [9_900, 10_000): about 99 more pages' worth in [0, 9_900), in
    // parts of about `PAGES_PER_PART` pages.
    let parts = rest_of_window((0, 10_000), 9_900, after, false);
    assert_eq!(
        parts[0],
        Part {
            span: (9_900, 9_901),
            after: Some(after.to_owned())
        }
    );
    let spans: Vec<(i64, i64)> = parts[1..].iter().map(|p| p.span).collect();
    assert_eq!(spans.len() as i64, (99 + PAGES_PER_PART - 1) / PAGES_PER_PART);
    assert_eq!(spans.first().map(|s| s.0), Some(0));
    assert_eq!(spans.last().map(|s| s.1), Some(9_900));
    assert!(spans.windows(2).all(|w| w[0].1 == w[1].0));
    // A page within one second: at least a page a second, so the rest is cut into its
    // seconds, or into `DENSE_PARTS` parts that cut themselves again.
    assert_eq!(rest_of_window((0, 1_000), 999, after, false).len(), 1 + DENSE_PARTS as usize);
    assert_eq!(rest_of_window((0, 10), 9, after, false).len(), 1 + DENSE_PARTS as usize);
    assert_eq!(rest_of_window((0, 5), 4, after, false).len(), 1 + 4);
    // Even one second before a dense page's: listed beside the rest of the page's second.
    assert_eq!(
        rest_of_window((9, 11), 10, after, false),
        vec![
            Part {
                span: (10, 11),
                after: Some(after.to_owned())
            },
            Part {
                span: (9, 10),
                after: None
            }
        ]
    );
    // A few pages' worth left: read page after page.
    assert!(rest_of_window((0, 1_000), 700, after, false).is_empty());
    assert!(rest_of_window((0, 100_000), 99_000, after, false).len() > 1);
    assert!(rest_of_window((0, 10_000), 3_000, after, false).is_empty());
    // Only the rest of the first second: page after page.
    assert!(rest_of_window((50, 60), 50, after, false).is_empty());
    // A listing ending while the budget goes unspent: a few pages' worth left are cut as a
    // dense rest is, so they are not read one round trip at a time.
    let slack = rest_of_window((0, 1_000), 700, after, true);
    assert_eq!(slack.len(), 1 + 3, "about a part a page: {slack:?}");
    assert_eq!(slack.last().map(|p| p.span.1), Some(700));
    assert_eq!(
        rest_of_window((0, 1_000), 990, after, true).len(),
        1 + DENSE_PARTS as usize
    );
    assert_eq!(rest_of_window((0, 1_000), 600, after, true).len(), 1 + 2);
    // One page's worth left: page after page, slack or not.
    assert!(rest_of_window((0, 1_000), 400, after, true).is_empty());
}

/// Every chunk of `window` until the one that posts it: the ids of each, and whether it was
/// the window's last.
async fn list(api: Arc<StripeApi>, window: Window) -> Result<Vec<(Vec<String>, bool)>, PostError> {
    let source = api.source().clone();
    let mut chunks = WindowChunks::new(
        api,
        Accounts::defaults(&source),
        window,
        Some(std::time::Duration::from_secs(30)),
    );
    let mut all = Vec::new();
    loop {
        let chunk = chunks.next_chunk().await?;
        let ids = chunk
            .entries
            .iter()
            .map(|e| e.movement.id().as_str().to_owned())
            .collect();
        all.push((ids, !chunk.partial));
        if !chunk.partial {
            return Ok(all);
        }
    }
}

async fn fake_with(created: impl Iterator<Item = i64>) -> (super::super::fake::FakeStripe, Arc<StripeApi>, usize) {
    let fake = super::super::fake::FakeStripe::start("sk_test_listing").await.expect("fake");
    let mut count = 0;
    for (i, at) in created.enumerate() {
        let mut listed = serde_json::to_value(transaction(&format!("txn_{i}"), "charge", 1_000, 30, &format!("ch_{i}")))
            .expect("json");
        listed["created"] = json!(at);
        fake.add_transaction(None, listed);
        count += 1;
    }
    let settings = super::super::config::ApiSettings {
        api_base: fake.url(),
        requests_per_sec: 1_000,
        endpoint_requests_per_sec: 1_000,
        connect_timeout_ms: 1_000,
        request_timeout_ms: 5_000,
    };
    let api = StripeApi::new(
        SourceName::parse("stripe").expect("name"),
        crate::stripe::ApiKey::new("sk_test_listing"),
        &settings,
    )
    .expect("api");
    (fake, Arc::new(api), count)
}

fn window(from: i64, to: i64) -> Window {
    Window {
        seq: 3,
        from: DateTime::from_timestamp(from, 0).expect("time"),
        to: DateTime::from_timestamp(to, 0).expect("time"),
        account: None,
        skip: None,
        settled: None,
    }
}

#[tokio::test]
async fn a_long_window_is_listed_in_parts_each_transaction_once_and_posted_last() {
    // 4,100 transactions in the window: one a second over most of an hour, a burst of 700
    // in one second; and three outside it, on either side.
    let spread = (0..3_400).map(|i| 10_000 + i);
    let burst = std::iter::repeat_n(12_345, 700);
    let outside = [9_999, 13_600, 13_601].into_iter();
    let (fake, api, added) = fake_with(spread.chain(burst).chain(outside)).await;
    assert_eq!(added, 4_103);
    let chunks = list(api, window(10_000, 13_600)).await.expect("listed");
    let ids: Vec<&String> = chunks.iter().flat_map(|(ids, _)| ids).collect();
    let unique: HashSet<&String> = ids.iter().copied().collect();
    assert_eq!(ids.len(), 4_100, "each transaction in the window listed once");
    assert_eq!(unique.len(), 4_100);
    for outside in ["txn_4100", "txn_4101", "txn_4102"] {
        assert!(!unique.contains(&outside.to_owned()), "{outside} is outside the window");
    }
    // Only the last chunk posts the window.
    assert!(chunks.iter().rev().skip(1).all(|(_, last)| !last));
    assert!(chunks.last().is_some_and(|(_, last)| *last));
    // Listed in parts: the window's own listing, the rest of its first page's second, and
    // at least two parts of the rest, each its own span.
    let spans: HashSet<(String, String)> = fake
        .seen()
        .iter()
        .filter(|s| s.path == "/v1/balance_transactions")
        .map(|s| {
            let query = s.query.replace("%5B", "[").replace("%5D", "]");
            let bound = |name: &str| {
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix(name).map(str::to_owned))
                    .unwrap_or_default()
            };
            (bound("created[gte]="), bound("created[lt]="))
        })
        .collect();
    assert!(spans.len() >= 4, "listed over {spans:?}");
}

#[tokio::test]
async fn a_part_that_fails_fails_the_window_and_never_posts_it() {
    use super::super::fake::Fault;
    let (fake, api, _) = fake_with((0..1_000).map(|i| 20_000 + i)).await;
    fake.fail_next("/v1/balance_transactions", vec![Fault::Unauthorized]);
    let first = list(api.clone(), window(20_000, 21_000)).await;
    assert!(first.is_err(), "the window fails when its first page does");
    // The first page answers; the next request (a part's) fails for good.
    fake.fail_next(
        "/v1/balance_transactions",
        vec![Fault::Pass, Fault::Unauthorized],
    );
    let failed = list(api.clone(), window(20_000, 21_000)).await;
    assert!(failed.is_err(), "a failed part fails the window");
    // Listed again with nothing failing, the window posts, each transaction once.
    let chunks = list(api, window(20_000, 21_000)).await.expect("listed");
    let ids: HashSet<&String> = chunks.iter().flat_map(|(ids, _)| ids).collect();
    assert_eq!(ids.len(), 1_000);
}

#[tokio::test]
async fn a_window_lists_around_what_it_skips_and_posts_once_both_sides_are_listed() {
    // Three hundred transactions over [30_000, 30_300); the window skips [30_100, 30_250).
    let (_fake, api, _) = fake_with((0..300).map(|i| 30_000 + i)).await;
    let at = |s: i64| DateTime::from_timestamp(s, 0).expect("time");
    let skipping = Window {
        skip: Some((at(30_100), at(30_250))),
        ..window(30_000, 30_300)
    };
    let chunks = list(api, skipping).await.expect("listed");
    let ids: HashSet<String> = chunks.iter().flat_map(|(ids, _)| ids.clone()).collect();
    let expected: HashSet<String> = (0..100).chain(250..300).map(|i| format!("txn_{i}")).collect();
    assert_eq!(ids, expected);
    assert!(chunks.iter().rev().skip(1).all(|(_, last)| !last));
    assert!(chunks.last().is_some_and(|(_, last)| *last));
}
