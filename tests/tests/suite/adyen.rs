//! Adyen's settlement details reports end to end, on both backends: `REPORT_AVAILABLE`
//! notifications signed as Adyen signs them, reports in Adyen's published shape served by a fake
//! report server on a real socket, posted one entry per line, each batch reconciled to its
//! payout.

use std::sync::Arc;

use serde_json::Value;
use tests::TestApp;
use tests::adyen::{
    FakeReports, Fault, fake_reports, fixture, payments_of, report_available, report_of,
};
use tests::app::{AppOptions, Backend, OPS_TOKEN, spawn};

tests::on_both_backends!(
    a_report_posts_each_line_once_in_the_net_currency_and_each_batch_reconciles,
    bad_reports_post_nothing_and_transient_failures_retry,
    a_report_of_several_chunks_posted_twice_at_once_posts_each_line_once,
    receivables_are_cleared_taken_back_or_listed_and_a_report_disagreeing_with_a_capture_posts_nothing,
    each_merchant_accounts_batches_are_booked_and_what_settle_cannot_place_goes_to_suspense,
    a_batch_paid_in_two_currencies_and_one_carried_to_the_next_reconcile,
    a_batch_whose_notification_never_came_is_found_booked_and_listed,
    a_source_restricted_to_some_merchant_accounts_books_only_theirs,
);

const MERCHANT: &str = "SettleShop";

async fn app(backend: Backend) -> (TestApp, Arc<FakeReports>) {
    let reports = Arc::new(fake_reports().await);
    let app = spawn(AppOptions {
        adyen_reports: Some(reports.host()),
        ..AppOptions::on(backend)
    })
    .await;
    (app, reports)
}

/// Announces `file` as Adyen would; settle acknowledges it as Adyen expects.
async fn announce(app: &TestApp, reports: &FakeReports, file: &str) {
    let item = report_available(file, &reports.url(MERCHANT, file));
    let response = app.post_adyen(&[item]).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.expect("body"), "[accepted]");
}

async fn report_entries(app: &TestApp) -> i64 {
    app.scalar("SELECT count(*) FROM journal_entries WHERE source_key LIKE 'adyen/settlement/%'")
        .await
}

async fn reconciliation(app: &TestApp, batch: u32) -> Value {
    reconciled(app, &format!("{MERCHANT}:batch:{batch}")).await
}

async fn a_report_posts_each_line_once_in_the_net_currency_and_each_batch_reconciles(
    backend: Backend,
) {
    let (app, reports) = app(backend).await;
    let seven = "settlement_detail_report_batch_7.csv";
    let eight = "settlement_detail_report_batch_8.csv";
    reports.put(seven, fixture(seven));
    reports.put(eight, fixture(eight));
    // The same batch announced again under another name (a report generated twice): both
    // downloads run at once, and each line still posts once.
    let copy = "settlement_detail_report_batch_7_copy.csv";
    reports.put(copy, fixture(seven));
    // The capture the report's first line settles, notified first: its sale is booked from the
    // notification, and the report's line finds it booked (the same sale) and clears it.
    let capture = tests::sign::adyen_item("CAPTURE", "8816000000000101", 10_000, "EUR", "true");
    assert_eq!(app.post_adyen(&[capture]).await.status().as_u16(), 200);
    app.wait_settled(30).await;
    assert_eq!(
        app.lines_of("8816000000000101").await,
        ["receivables:adyen EUR 100", "sales EUR -100"],
        "a receivable in the shopper's currency"
    );
    announce(&app, &reports, seven).await;
    announce(&app, &reports, copy).await;
    announce(&app, &reports, eight).await;
    app.wait_settled(60).await;

    assert_eq!(
        report_entries(&app).await,
        10,
        "eight lines of batch 7, two of batch 8"
    );
    assert_eq!(
        app.texts(
            "SELECT source_key FROM journal_entries WHERE source_key LIKE 'adyen/sale/%' ORDER BY 1"
        )
        .await,
        [
            "adyen/sale/8816000000000101",
            "adyen/sale/8816000000000102",
            "adyen/sale/8816000000000104"
        ],
        "one sale per Settled line, the notified one not booked again"
    );
    assert_eq!(app.count("journal_entries").await, 13);
    let (state, _) = app
        .event_state(&format!("REPORT_AVAILABLE:{MERCHANT}:{copy}"))
        .await;
    assert_eq!(
        state, "posted",
        "the copy's event is posted, with nothing new"
    );
    assert_eq!(
        app.lines_of("8816000000000101").await,
        [
            "receivables:adyen EUR 100",
            "sales EUR -100",
            "adyen:balance EUR 97.9",
            "fees:adyen:interchange EUR 1.8",
            "fees:adyen:markup EUR 0.1",
            "fees:adyen:scheme_fees EUR 0.2",
            "receivables:adyen EUR -100"
        ]
    );
    // The USD payment of batch 7: sold in USD, settled in EUR with its commission, the
    // conversion through the FX clearing account in each currency.
    assert_eq!(
        app.lines_of("8816000000000102").await,
        [
            "receivables:adyen USD 50",
            "sales USD -50",
            "adyen:balance EUR 45",
            "fees:adyen:commission EUR 1",
            "fx:adyen EUR -46",
            "fx:adyen USD 50",
            "receivables:adyen USD -50"
        ]
    );
    // The chargeback: its fee, the disputed amount, the balance debited.
    assert_eq!(
        app.lines_of("8816000000000301").await,
        [
            "adyen:balance EUR -37.5",
            "fees:adyen:commission EUR 7.5",
            "disputes:adyen EUR 30"
        ]
    );
    let balance_currencies = app
        .texts(
            "SELECT DISTINCT l.currency FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
             WHERE e.source_key LIKE 'adyen/settlement/SettleShop/7/%' AND l.account = 'adyen:balance'
             ORDER BY 1",
        )
        .await;
    assert_eq!(balance_currencies, ["EUR"], "batch 7 settles in EUR only");
    let (status, open) = app
        .api_get("/api/receivables?days=0", Some(OPS_TOKEN))
        .await;
    assert_eq!(status, 200, "{open}");
    assert_eq!(open["items"], serde_json::json!([]), "every sale settled");

    // The capture of a line already posted, notified late: the same sale, nothing new.
    let late = tests::sign::adyen_item("CAPTURE", "8816000000000102", 5_000, "USD", "true");
    assert_eq!(app.post_adyen(&[late]).await.status().as_u16(), 200);
    app.wait_settled(30).await;
    let (state, _) = app.event_state("CAPTURE:8816000000000102").await;
    assert_eq!(state, "posted");
    assert_eq!(app.count("journal_entries").await, 13);

    let seven_reconciled = reconciliation(&app, 7).await;
    assert_eq!(seven_reconciled["status"], "matched", "{seven_reconciled}");
    assert_eq!(seven_reconciled["payout_amount"], "82.90");
    assert_eq!(seven_reconciled["difference"], "0.00");
    assert_eq!(
        seven_reconciled["items"].as_array().map(Vec::len),
        Some(7),
        "every line but the payout is one of its items"
    );
    let eight_reconciled = reconciliation(&app, 8).await;
    assert_eq!(eight_reconciled["status"], "matched", "{eight_reconciled}");
    assert_eq!(eight_reconciled["currency"], "GBP");

    // A redelivered notification is the same event: nothing is downloaded again.
    let downloads = reports.downloads().len();
    announce(&app, &reports, seven).await;
    app.wait_settled(30).await;
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE kind = 'REPORT_AVAILABLE'")
            .await,
        3
    );
    assert_eq!(reports.downloads().len(), downloads);
    assert_eq!(report_entries(&app).await, 10);
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// Announces `file` of merchant account `merchant` (its download URL under that account).
async fn announce_for(app: &TestApp, reports: &FakeReports, merchant: &str, file: &str) {
    let mut item = report_available(file, &reports.url(merchant, file));
    item["merchantAccountCode"] = serde_json::json!(merchant);
    let response = app.post_adyen(&[item]).await;
    assert_eq!(response.status().as_u16(), 200);
}

async fn reconciled(app: &TestApp, payout: &str) -> Value {
    let (status, body) = app
        .api_get(
            &format!("/api/payouts/{payout}/reconciliation"),
            Some(OPS_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Two merchant accounts behind one webhook number their batches each on their own: each one's
/// batch 8 is booked under its own keys and payout. A report generated for both books each line
/// in its own account's batch. A line of a record type settle has no account for, and a line
/// that does not add up, book their net to suspense for a person; the rest of the report is
/// booked.
async fn each_merchant_accounts_batches_are_booked_and_what_settle_cannot_place_goes_to_suspense(
    backend: Backend,
) {
    let (app, reports) = app(backend).await;
    let eight = "settlement_detail_report_batch_8.csv";
    let shop = String::from_utf8(fixture(eight)).expect("utf-8");
    let us = shop
        .replace("SettleShop", "SettleShopUS")
        .replace("88160000000000", "77160000000000");
    reports.put_for(MERCHANT, eight, shop.into_bytes());
    reports.put_for("SettleShopUS", eight, us.into_bytes());
    announce_for(&app, &reports, MERCHANT, eight).await;
    announce_for(&app, &reports, "SettleShopUS", eight).await;
    app.wait_settled(60).await;
    for merchant in [MERCHANT, "SettleShopUS"] {
        let booked = app
            .scalar(&format!(
                "SELECT count(*) FROM journal_entries WHERE source_key LIKE 'adyen/settlement/{merchant}/8/%'"
            ))
            .await;
        assert_eq!(
            booked, 2,
            "{merchant}'s batch 8: its sale's settlement and its payout"
        );
        let (state, _) = app
            .event_state(&format!("REPORT_AVAILABLE:{merchant}:{eight}"))
            .await;
        assert_eq!(state, "posted");
        let batch = reconciled(&app, &format!("{merchant}:batch:8")).await;
        assert_eq!(batch["status"], "matched", "{batch}");
        assert_eq!(batch["payout_amount"], "9.70");
    }

    // A report for both accounts (Adyen names it by date), announced for the company.
    let header = fixture(eight);
    let header = String::from_utf8(header).expect("utf-8");
    let header = header.lines().next().expect("header");
    let both = [
        header,
        "SettleCo,SettleShop,8816000000000009,order-9,visa,2026-12-03 09:00:00,GMT,Settled,8816000000000109,GBP,,20.00,1,GBP,,19.40,0.60,,,,visa,,9,,,,,,,",
        "SettleCo,SettleShop,,,,2026-12-03 10:00:00,GMT,SettledInstallment,installment 1,GBP,,,,GBP,,5.00,,,,,,,9,,,,,,,",
        "SettleCo,SettleShopUS,7716000000000012,order-12,visa,2026-12-03 09:00:00,EST,Settled,7716000000000112,USD,,30.00,1,USD,,29.00,0.60,,,,visa,,12,,,,,,,",
        "SettleCo,SettleShop,,,,2026-12-04 02:00:00,GMT,MerchantPayout,\"SettleShop batch 9\",GBP,,,,GBP,24.40,,,,,,,,9,,,,,,,",
        "SettleCo,SettleShopUS,,,,2026-12-04 02:00:00,EST,MerchantPayout,\"SettleShopUS batch 12\",USD,,,,USD,29.00,,,,,,,,12,,,,,,,",
    ]
    .join("\n");
    let file = "settlement_detail_report_2026_12_04.csv";
    reports.put(file, both.into_bytes());
    announce_for(&app, &reports, "SettleCo", file).await;
    app.wait_settled(60).await;
    let (state, _) = app
        .event_state(&format!("REPORT_AVAILABLE:SettleCo:{file}"))
        .await;
    assert_eq!(
        state, "posted",
        "the report is booked, its two odd lines with it"
    );
    assert_eq!(
        app.texts(
            "SELECT source_key FROM journal_entries
             WHERE source_key LIKE 'adyen/settlement/%/9/%' OR source_key LIKE 'adyen/settlement/%/12/%'
             ORDER BY 1"
        )
        .await,
        [
            "adyen/settlement/SettleShop/9/MerchantPayout//SettleShop batch 9",
            "adyen/settlement/SettleShop/9/Settled/8816000000000009/8816000000000109",
            "adyen/settlement/SettleShop/9/SettledInstallment//installment 1",
            "adyen/settlement/SettleShopUS/12/MerchantPayout//SettleShopUS batch 12",
            "adyen/settlement/SettleShopUS/12/Settled/7716000000000012/7716000000000112",
        ]
    );
    // A record type settle has no account for: its net, to suspense.
    assert_eq!(
        app.lines_of("installment 1").await,
        ["adyen:balance GBP 5", "suspense:adyen GBP -5"]
    );
    // 29.00 net and 0.60 of fees is not the gross 30.00: the sale is booked from the line, and
    // the line's net waits in suspense (the receivable stays open) for a person.
    assert_eq!(
        app.lines_of("7716000000000112").await,
        [
            "receivables:adyen USD 30",
            "sales USD -30",
            "adyen:balance USD 29",
            "suspense:adyen USD -29"
        ]
    );
    assert_eq!(
        app.metric("settle_suspense_entries{account=\"suspense:adyen\"}")
            .await,
        2.0
    );
    for (payout, amount) in [
        ("SettleShop:batch:9", "24.40"),
        ("SettleShopUS:batch:12", "29.00"),
    ] {
        let batch = reconciled(&app, payout).await;
        assert_eq!(batch["status"], "matched", "{batch}");
        assert_eq!(batch["payout_amount"], amount);
    }
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// A batch pays out once per settlement currency: both payouts are compared. A batch whose
/// balance Adyen carries to the next batch (a `Balancetransfer`) has no payout and is carried
/// forward, not missing; the next batch's payout includes what it received.
async fn a_batch_paid_in_two_currencies_and_one_carried_to_the_next_reconcile(backend: Backend) {
    let (app, reports) = app(backend).await;
    let header = String::from_utf8(fixture("settlement_detail_report_batch_8.csv")).expect("utf-8");
    let header = header.lines().next().expect("header").to_owned();
    let report = |lines: &[&str]| {
        std::iter::once(header.as_str())
            .chain(lines.iter().copied())
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes()
    };
    let batches = [
        (
            20,
            report(&[
                "SettleCo,SettleShop,8816000000002001,o-1,visa,2026-12-01 09:00:00,CET,Settled,8816000000002101,EUR,,10.00,1,EUR,,9.75,0.25,,,,visa,,20,,,,,,,",
                "SettleCo,SettleShop,8816000000002002,o-2,visa,2026-12-01 09:00:00,CET,Settled,8816000000002102,GBP,,10.00,1,GBP,,9.70,0.30,,,,visa,,20,,,,,,,",
                "SettleCo,SettleShop,,,,2026-12-02 02:00:00,CET,MerchantPayout,\"batch 20, EUR\",EUR,,,,EUR,9.75,,,,,,,,20,,,,,,,",
                "SettleCo,SettleShop,,,,2026-12-02 02:00:00,CET,MerchantPayout,\"batch 20, GBP\",GBP,,,,GBP,9.70,,,,,,,,20,,,,,,,",
            ]),
        ),
        (
            21,
            report(&[
                "SettleCo,SettleShop,8816000000002003,o-3,visa,2026-12-02 09:00:00,CET,Settled,8816000000002103,EUR,,20.00,1,EUR,,19.50,0.50,,,,visa,,21,,,,,,,",
                "SettleCo,SettleShop,,,,2026-12-02 23:00:00,CET,Fee,Transaction Fees,EUR,,,,EUR,0.50,,,,,,,,21,,,,,,,",
                "SettleCo,SettleShop,,,,2026-12-03 02:00:00,CET,Balancetransfer,Balancetransfer,EUR,,,,EUR,19.00,,,,,,,Balancetransfer to batch 22,21,,,,,,,",
            ]),
        ),
        (
            22,
            report(&[
                "SettleCo,SettleShop,,,,2026-12-03 02:00:00,CET,Balancetransfer,Balancetransfer,EUR,,,,EUR,,19.00,,,,,,Balancetransfer from batch 21,22,,,,,,,",
                "SettleCo,SettleShop,8816000000002004,o-4,visa,2026-12-03 09:00:00,CET,Settled,8816000000002104,EUR,,10.00,1,EUR,,9.75,0.25,,,,visa,,22,,,,,,,",
                "SettleCo,SettleShop,,,,2026-12-04 02:00:00,CET,MerchantPayout,\"batch 22\",EUR,,,,EUR,28.75,,,,,,,,22,,,,,,,",
            ]),
        ),
    ];
    for (batch, body) in batches {
        let file = format!("settlement_detail_report_batch_{batch}.csv");
        reports.put(&file, body);
        announce(&app, &reports, &file).await;
    }
    app.wait_settled(60).await;

    let twenty = reconciliation(&app, 20).await;
    assert_eq!(twenty["status"], "matched", "{twenty}");
    let currencies: Vec<(String, String, String)> = twenty["by_currency"]
        .as_array()
        .expect("currencies")
        .iter()
        .map(|c| {
            (
                c["currency"].as_str().unwrap_or_default().to_owned(),
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["payout_amount"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        currencies,
        [
            ("EUR".to_owned(), "matched".to_owned(), "9.75".to_owned()),
            ("GBP".to_owned(), "matched".to_owned(), "9.70".to_owned())
        ]
    );
    let twenty_one = reconciliation(&app, 21).await;
    assert_eq!(twenty_one["status"], "carried_forward", "{twenty_one}");
    assert_eq!(twenty_one["by_currency"][0]["carried_forward"], "19.00");
    assert_eq!(twenty_one["by_currency"][0]["payout_amount"], Value::Null);
    let twenty_two = reconciliation(&app, 22).await;
    assert_eq!(twenty_two["status"], "matched", "{twenty_two}");
    assert_eq!(twenty_two["payout_amount"], "28.75");
    // The two batches post side by side: their entries are listed in their batches' order.
    let carried: Vec<String> = app
        .texts(
            "SELECT l.account || ' ' || CAST(l.amount AS TEXT) FROM journal_lines l
             JOIN journal_entries e ON e.id = l.entry_id
             WHERE e.movement_id = 'Balancetransfer' ORDER BY e.source_key, l.line_no",
        )
        .await
        .iter()
        .map(|line| {
            let (account, amount) = line.rsplit_once(' ').expect("account and amount");
            let amount: rust_decimal::Decimal = amount.parse().expect("an amount");
            format!("{account} {}", amount.normalize())
        })
        .collect();
    assert_eq!(
        carried,
        [
            "adyen:balance -19",
            "carry_over:adyen 19",
            "adyen:balance 19",
            "carry_over:adyen -19"
        ],
        "what batch 21 carried, batch 22 cleared"
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// A notification item of `days_ago` days ago, signed as Adyen signs it.
fn item_at(code: &str, psp: &str, value: i64, currency: &str, days_ago: i64) -> Value {
    let mut item = tests::sign::adyen_item(code, psp, value, currency, "true");
    let at = chrono::Utc::now() - chrono::Duration::days(days_ago);
    item["eventDate"] = Value::from(at.to_rfc3339());
    item
}

async fn receivables(app: &TestApp, days: u32) -> Vec<(String, String, String)> {
    let (status, body) = app
        .api_get(&format!("/api/receivables?days={days}"), Some(OPS_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| {
            let text = |key: &str| r[key].as_str().unwrap_or_default().to_owned();
            (text("capture"), text("currency"), text("outstanding"))
        })
        .collect()
}

async fn receivables_are_cleared_taken_back_or_listed_and_a_report_disagreeing_with_a_capture_posts_nothing(
    backend: Backend,
) {
    let (app, reports) = app(backend).await;
    let items = [
        // Captured ten days ago and never settled.
        item_at("CAPTURE", "8816000000000901", 2_500, "EUR", 10),
        // Captured, then the capture failed: nothing is owed.
        item_at("CAPTURE", "8816000000000902", 1_200, "EUR", 10),
        item_at("CAPTURE_FAILED", "8816000000000902", 1_200, "EUR", 10),
        // Batch 8's payment, notified for 10.01 GBP where the report settles 10.00.
        item_at("CAPTURE", "8816000000000104", 1_001, "GBP", 0),
        // Booked from the report: no entry of its own.
        item_at("REFUND", "8816000000000201", 2_000, "EUR", 0),
    ];
    assert_eq!(app.post_adyen(&items).await.status().as_u16(), 200);
    app.wait_settled(30).await;
    // Posted in whichever order their jobs ran.
    let mut taken_back = app.lines_of("8816000000000902").await;
    taken_back.sort();
    assert_eq!(
        taken_back,
        [
            "receivables:adyen EUR -12",
            "receivables:adyen EUR 12",
            "sales EUR -12",
            "sales EUR 12"
        ]
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE external_id LIKE 'REFUND:%'")
            .await,
        0
    );
    assert_eq!(
        receivables(&app, 7).await,
        [(
            "8816000000000901".to_owned(),
            "EUR".to_owned(),
            "25.00".to_owned()
        )],
        "open for ten days; the failed capture cleared, today's not yet late"
    );
    assert_eq!(receivables(&app, 30).await, []);
    assert_eq!(receivables(&app, 0).await.len(), 2);
    // Read from the receivables kept as the journal is written: once folded, a row per open
    // receivable (the cleared capture's gone) and the same lists.
    app.store.compact_balances().await.expect("fold");
    assert_eq!(
        app.scalar("SELECT count(*) FROM receivable_deltas").await,
        2,
        "a row per open receivable once folded"
    );
    assert_eq!(receivables(&app, 7).await.len(), 1, "folded");
    assert_eq!(receivables(&app, 0).await.len(), 2, "folded");
    // The same from the command line, which fails while any is late (for a daily check).
    let scratch = tests::process::Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &tests::app::config_toml(
            &app.database_url(),
            &AppOptions {
                adyen_reports: Some(reports.host()),
                ..AppOptions::on(backend)
            },
        ),
    );
    let url = app.database_url();
    let (ok, out) = tests::process::run_settle(
        &config,
        &url,
        &["reconcile", "receivables", "--days", "7", "--json"],
    )
    .await;
    let listed: Value = serde_json::from_str(&out).expect("json");
    assert!(!ok, "a late receivable fails the check: {out}");
    assert_eq!(listed[0]["capture"], "8816000000000901", "{out}");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{out}");
    let (ok, out) =
        tests::process::run_settle(&config, &url, &["reconcile", "receivables", "--days", "30"])
            .await;
    assert!(ok, "none late by a month: {out}");

    let eight = "settlement_detail_report_batch_8.csv";
    reports.put(eight, fixture(eight));
    announce(&app, &reports, eight).await;
    app.wait_settled(60).await;
    let (state, code) = app
        .event_state(&format!("REPORT_AVAILABLE:{MERCHANT}:{eight}"))
        .await;
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("abandoned", Some("source_replay_conflict")),
        "the report and the notification disagree on the sale: a person decides"
    );
    assert_eq!(
        report_entries(&app).await,
        0,
        "nothing of the report posted"
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());

    let amount = match backend {
        Backend::Postgres => "amount = amount + 0.01",
        Backend::Sqlite => "amount_minor = amount_minor + 1",
    };
    app.exec(&format!(
        "UPDATE receivable_deltas SET {amount} WHERE movement_id = '8816000000000901'"
    ))
    .await
    .expect("a kept receivable changed behind the journal's back");
    let failed = app.failed_invariants().await;
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("receivables_kept_equal_the_journal")
                && f.contains("8816000000000901: off by")),
        "{failed:?}"
    );
}

async fn bad_reports_post_nothing_and_transient_failures_retry(backend: Backend) {
    let (app, reports) = app(backend).await;
    let seven = fixture("settlement_detail_report_batch_7.csv");
    let text = String::from_utf8(seven.clone()).expect("utf-8");
    let bad = [
        (
            "settlement_detail_report_batch_91.csv",
            text.replacen("Psp Reference", "PSP Ref", 1),
            "provider_facts",
        ),
        (
            "settlement_detail_report_batch_93.csv",
            text.replace(",USD,", ",XXQ,"),
            "provider_facts",
        ),
    ];
    for (file, body, _) in &bad {
        reports.put(file, body.clone().into_bytes());
        announce(&app, &reports, file).await;
    }
    // A report that is not there, a host that is not allowed.
    announce(&app, &reports, "settlement_detail_report_batch_95.csv").await;
    let elsewhere = report_available(
        "settlement_detail_report_batch_96.csv",
        "http://127.0.0.1:9/reports/download/MerchantAccount/SettleShop/settlement_detail_report_batch_96.csv",
    );
    assert_eq!(app.post_adyen(&[elsewhere]).await.status().as_u16(), 200);
    // Unavailable twice, then cut short once: retried until it downloads whole.
    let flaky = "settlement_detail_report_batch_7.csv";
    reports.put(flaky, seven);
    reports.fault(
        flaky,
        Fault::Status {
            status: 503,
            times: 2,
        },
    );
    announce(&app, &reports, flaky).await;
    app.wait_for(
        "the flaky report is posted",
        60,
        &format!("SELECT EXISTS (SELECT 1 FROM settlement_events WHERE external_id = 'REPORT_AVAILABLE:{MERCHANT}:{flaky}' AND status = 'posted')"),
    )
    .await;
    app.wait_for(
        "four dead letters",
        60,
        "SELECT count(*) >= 4 FROM dead_letters",
    )
    .await;
    let codes = app
        .texts("SELECT error_code FROM dead_letters ORDER BY event_id")
        .await;
    assert_eq!(
        codes,
        [
            "provider_facts",
            "provider_facts",
            "provider_not_found",
            "provider_facts"
        ]
    );
    assert_eq!(
        report_entries(&app).await,
        8,
        "only the flaky report's lines, once each"
    );
    assert!(
        !reports
            .downloads()
            .iter()
            .any(|f| f.ends_with("batch_96.csv")),
        "nothing is asked of a host that is not allowed"
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// The report server refuses the credentials (401): settle pauses the source rather than
/// dead-letter every report, the refused download recorded as the report's attempt; resumed
/// once the credentials are fixed, the report posts.
#[tokio::test]
async fn a_refused_report_download_pauses_the_source_until_it_is_resumed() {
    let (app, reports) = app(Backend::Postgres).await;
    let file = "settlement_detail_report_batch_8.csv";
    reports.put(file, fixture(file));
    reports.fault(
        file,
        Fault::Status {
            status: 401,
            times: 1,
        },
    );
    announce(&app, &reports, file).await;
    app.wait_paused_by_settle("adyen", "provider_auth: %HTTP 401%")
        .await;
    let report = format!("REPORT_AVAILABLE:{MERCHANT}:{file}");
    assert_eq!(app.event_state(&report).await, ("recorded".into(), None));
    assert_eq!(app.count("dead_letters").await, 0);
    assert_eq!(report_entries(&app).await, 0);
    let (status, body) = app
        .api_post(
            "/api/sources/adyen/resume",
            Some(tests::app::OPS_TOKEN),
            serde_json::json!({"reason": "report user's password fixed"}),
        )
        .await;
    assert_eq!(
        (status, body["jobs_released"].as_u64()),
        (200, Some(1)),
        "{body}"
    );
    app.wait_settled(60).await;
    assert_eq!(app.event_state(&report).await, ("posted".into(), None));
    assert_eq!(report_entries(&app).await, 2);
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

#[tokio::test]
async fn a_report_cut_short_is_downloaded_again_whole() {
    let (app, reports) = app(Backend::Postgres).await;
    let file = "settlement_detail_report_batch_8.csv";
    reports.put(file, fixture(file));
    reports.fault(file, Fault::CutShort { times: 1 });
    announce(&app, &reports, file).await;
    app.wait_settled(60).await;
    assert_eq!(
        reports.downloads().len(),
        2,
        "the cut download, then a whole one"
    );
    assert_eq!(report_entries(&app).await, 2);
    assert_eq!(app.count("dead_letters").await, 0);
}

/// 1,200 payments and the payout: three chunks (of 500 lines, each its own transaction), posted
/// by two jobs at once (the same batch announced under two names) while a quarter of the
/// payments' captures are notified, each line and each sale once.
async fn a_report_of_several_chunks_posted_twice_at_once_posts_each_line_once(backend: Backend) {
    let (app, reports) = app(backend).await;
    let report = report_of(1_200, 9);
    reports.put("settlement_detail_report_batch_9.csv", report.clone());
    reports.put("settlement_detail_report_batch_9_again.csv", report);
    // The captures of 300 of its lines, notified while the report is being posted: each sale is
    // booked by whichever of the two gets there first, once.
    let captures: Vec<Value> = (0..300)
        .map(|i| {
            tests::sign::adyen_item("CAPTURE", &format!("89{:014}", i * 4), 1_000, "EUR", "true")
        })
        .collect();
    let notify = async {
        for chunk in captures.chunks(50) {
            assert_eq!(app.post_adyen(chunk).await.status().as_u16(), 200);
        }
    };
    let announcements = async {
        announce(&app, &reports, "settlement_detail_report_batch_9.csv").await;
        announce(&app, &reports, "settlement_detail_report_batch_9_again.csv").await;
    };
    tokio::join!(notify, announcements);
    app.wait_settled(120).await;
    assert_eq!(report_entries(&app).await, 1_201);
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE source_key LIKE 'adyen/sale/%'")
            .await,
        1_200,
        "each sale once"
    );
    assert_eq!(app.count("dead_letters").await, 0);
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE status = 'posted'")
            .await,
        302
    );
    let (status, open) = app
        .api_get("/api/receivables?days=0", Some(OPS_TOKEN))
        .await;
    assert_eq!((status, &open["items"]), (200, &serde_json::json!([])));
    let reconciled = reconciliation(&app, 9).await;
    assert_eq!(reconciled["status"], "matched", "{reconciled}");
    assert_eq!(reconciled["payout_amount"], "11700.00");
    assert_eq!(reconciled["items"].as_array().map(Vec::len), Some(1_200));
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

fn batch_file(batch: u32) -> String {
    format!("settlement_detail_report_batch_{batch}.csv")
}

async fn batch_posted(app: &TestApp, merchant: &str, batch: u32) {
    let key = format!("REPORT_AVAILABLE:{merchant}:{}", batch_file(batch));
    app.wait_for(
        &format!("{key} posted"),
        60,
        &format!("SELECT EXISTS (SELECT 1 FROM settlement_events WHERE external_id = '{key}' AND status = 'posted')"),
    )
    .await;
}

async fn sequence(app: &TestApp) -> Value {
    let (status, body) = app
        .api_get("/api/sources/adyen/sequence", Some(OPS_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Batch 8's `REPORT_AVAILABLE` never came: settle notices the gap between 7 and 9, finds batch
/// 8's report under its documented name and books it; batch 10, published after the last
/// notification, is found by the schedule alone. Batch 8's notification arriving late is the same
/// event (no conflict, nothing booked twice). A batch Adyen does not serve (11, before a notified
/// 12) stays listed as missing, with since when; another merchant account's numbers are its own.
async fn a_batch_whose_notification_never_came_is_found_booked_and_listed(backend: Backend) {
    let reports = Arc::new(fake_reports().await);
    let options = AppOptions {
        adyen_reports: Some(reports.host()),
        adyen_keys: "feed_every_secs = 1".into(),
        ..AppOptions::on(backend)
    };
    let app = spawn(options.clone()).await;
    for batch in [7, 8, 9] {
        let payments = payments_of(MERCHANT, batch as usize * 1_000, 3, batch);
        reports.put_for(MERCHANT, &batch_file(batch), payments);
    }
    // Another merchant account's batch 5 only: nothing of it is looked up as missing.
    reports.put_for(
        "SettleShopUS",
        &batch_file(5),
        payments_of("SettleShopUS", 90_000, 2, 5),
    );
    announce(&app, &reports, &batch_file(7)).await;
    announce(&app, &reports, &batch_file(9)).await;
    announce_for(&app, &reports, "SettleShopUS", &batch_file(5)).await;
    batch_posted(&app, MERCHANT, 8).await;
    // Published after the last notification: found by the schedule.
    reports.put_for(
        MERCHANT,
        &batch_file(10),
        payments_of(MERCHANT, 10_000, 3, 10),
    );
    batch_posted(&app, MERCHANT, 10).await;
    app.wait_settled(60).await;
    for batch in [7, 8, 9, 10] {
        let batch_reconciled = reconciliation(&app, batch).await;
        assert_eq!(batch_reconciled["status"], "matched", "{batch_reconciled}");
        assert_eq!(batch_reconciled["payout_amount"], "29.25");
    }
    // Four batches of three payments, each its sale and its settlement, and its payout.
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE source_key LIKE 'adyen/settlement/SettleShop/%'")
            .await,
        16
    );

    // The late notification of batch 8 is the event already recorded.
    let events = app.count("settlement_events").await;
    announce(&app, &reports, &batch_file(8)).await;
    app.wait_settled(30).await;
    assert_eq!(app.count("settlement_events").await, events);
    assert_eq!(app.count("dead_letters").await, 0);

    let listed = sequence(&app).await;
    assert_eq!(
        listed["series"],
        serde_json::json!([
            {"series": "SettleShop", "first": 7, "last": 10, "booked": 4, "fetching": [],
             "dead_letter": [], "closed": [], "missing": [], "gap_since": null},
            {"series": "SettleShopUS", "first": 5, "last": 5, "booked": 1, "fetching": [],
             "dead_letter": [], "closed": [], "missing": [], "gap_since": null},
        ]),
        "{listed}"
    );

    // Batch 12 notified, 11 never served: listed as missing since 12 came.
    reports.put_for(
        MERCHANT,
        &batch_file(12),
        payments_of(MERCHANT, 12_000, 1, 12),
    );
    announce(&app, &reports, &batch_file(12)).await;
    batch_posted(&app, MERCHANT, 12).await;
    let listed = sequence(&app).await;
    let shop = &listed["series"][0];
    assert_eq!(shop["missing"], serde_json::json!([11]), "{listed}");
    assert_eq!(shop["booked"], 5, "{listed}");
    assert!(shop["gap_since"].is_string(), "{listed}");

    // The same on the dashboard, and from the terminal, which exits 1 while a batch is missing.
    let page = app.dashboard_page("/dashboard/sources/adyen/books").await;
    assert!(
        page.contains("id=\"sequence\"") && page.contains("SettleShopUS"),
        "{page}"
    );
    assert!(page.contains("Numbers are missing"), "{page}");
    let scratch = tests::process::Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &tests::app::config_toml(&app.database_url(), &options),
    );
    let (ok, output) = tests::process::run_settle(
        &config,
        &app.database_url(),
        &["reconcile", "coverage", "adyen"],
    )
    .await;
    assert!(!ok, "{output}");
    assert!(
        output.contains("SettleShop") && output.contains("7-12") && output.contains("INCOMPLETE"),
        "{output}"
    );
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}

/// `merchant_accounts = ["SettleShop"]`: another merchant account's notifications are
/// acknowledged as Adyen expects and counted, nothing recorded; a report holding both accounts'
/// lines books this account's only (the others counted), and its batch reconciles.
async fn a_source_restricted_to_some_merchant_accounts_books_only_theirs(backend: Backend) {
    let reports = Arc::new(fake_reports().await);
    let app = spawn(AppOptions {
        adyen_reports: Some(reports.host()),
        adyen_keys: format!("merchant_accounts = [\"{MERCHANT}\"]"),
        ..AppOptions::on(backend)
    })
    .await;
    let mut capture = tests::sign::adyen_item("CAPTURE", "7716000000000101", 3_000, "USD", "true");
    capture["merchantAccountCode"] = serde_json::json!("SettleShopUS");
    let response = app.post_adyen(&[capture]).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.expect("body"), "[accepted]");
    let other_report = batch_file(3);
    reports.put_for(
        "SettleShopUS",
        &other_report,
        payments_of("SettleShopUS", 0, 2, 3),
    );
    announce_for(&app, &reports, "SettleShopUS", &other_report).await;
    assert_eq!(
        app.count("settlement_events").await,
        0,
        "nothing of SettleShopUS recorded"
    );
    assert_eq!(
        app.metric("settle_adyen_items_of_other_merchant_accounts_total{source=\"adyen\"}")
            .await,
        2.0
    );

    // A report of both accounts' lines, announced for the booked one.
    let ours = String::from_utf8(payments_of(MERCHANT, 100, 2, 4)).expect("utf-8");
    let theirs = String::from_utf8(payments_of("SettleShopUS", 200, 3, 4)).expect("utf-8");
    let both: String = ours
        .lines()
        .chain(theirs.lines().skip(1))
        .map(|line| format!("{line}\n"))
        .collect();
    reports.put_for(MERCHANT, &batch_file(4), both.into_bytes());
    announce(&app, &reports, &batch_file(4)).await;
    batch_posted(&app, MERCHANT, 4).await;
    app.wait_settled(30).await;
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE source_key LIKE 'adyen/settlement/SettleShopUS/%'")
            .await,
        0
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_entries WHERE source_key LIKE 'adyen/settlement/SettleShop/4/%'")
            .await,
        3,
        "two payments and the payout"
    );
    assert_eq!(
        app.metric("settle_adyen_report_lines_of_other_merchant_accounts_total{source=\"adyen\"}")
            .await,
        4.0,
        "three payments and a payout of SettleShopUS"
    );
    let batch = reconciliation(&app, 4).await;
    assert_eq!(batch["status"], "matched", "{batch}");
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}
