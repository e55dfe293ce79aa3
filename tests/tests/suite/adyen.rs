//! Adyen's settlement details reports end to end, on both backends: `REPORT_AVAILABLE`
//! notifications signed as Adyen signs them, reports in Adyen's published shape served by a fake
//! report server on a real socket, posted one entry per line, each batch reconciled to its
//! payout.

use std::sync::Arc;

use serde_json::Value;
use tests::TestApp;
use tests::adyen::{FakeReports, Fault, fixture, report_available, report_of};
use tests::app::{AppOptions, Backend, OPS_TOKEN, spawn};

tests::on_both_backends!(
    a_report_posts_each_line_once_in_the_net_currency_and_each_batch_reconciles,
    bad_reports_post_nothing_and_transient_failures_retry,
    a_report_of_several_chunks_posted_twice_at_once_posts_each_line_once,
);

const MERCHANT: &str = "SettleShop";

async fn app(backend: Backend) -> (TestApp, Arc<FakeReports>) {
    let reports = Arc::new(FakeReports::start().await);
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
    let (status, body) = app
        .api_get(
            &format!("/api/payouts/{MERCHANT}:batch:{batch}/reconciliation"),
            Some(OPS_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
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
    // The capture the report's first line settles, notified first: a source booking reports does
    // not book it again from the notification.
    let capture = tests::sign::adyen_item("CAPTURE", "8816000000000101", 10_000, "EUR", "true");
    assert_eq!(app.post_adyen(&[capture]).await.status().as_u16(), 200);
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
        app.count("journal_entries").await,
        10,
        "nothing but the reports' lines: the notified capture is the report's first line"
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM settlement_events WHERE external_id LIKE 'CAPTURE:%'")
            .await,
        0
    );
    let (state, _) = app.event_state(&format!("REPORT_AVAILABLE:{copy}")).await;
    assert_eq!(
        state, "posted",
        "the copy's event is posted, with nothing new"
    );
    // The USD payment of batch 7 is booked in EUR, as Adyen settled it, with its commission.
    assert_eq!(
        app.lines_of("8816000000000102").await,
        [
            "adyen:balance EUR 45",
            "fees:adyen:commission EUR 1",
            "sales EUR -46"
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
    let currencies = app
        .texts(
            "SELECT DISTINCT l.currency FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
             WHERE e.source_key LIKE 'adyen/settlement/SettleShop/7/%' ORDER BY 1",
        )
        .await;
    assert_eq!(currencies, ["EUR"], "batch 7 settles in EUR only");

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
            "settlement_detail_report_batch_92.csv",
            text.replace(",97.90,", ",97.80,"),
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
    // Refused credentials, a report that is not there, a host that is not allowed.
    reports.put("settlement_detail_report_batch_94.csv", seven.clone());
    reports.fault(
        "settlement_detail_report_batch_94.csv",
        Fault::Status {
            status: 401,
            times: 100,
        },
    );
    announce(&app, &reports, "settlement_detail_report_batch_94.csv").await;
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
        &format!("SELECT EXISTS (SELECT 1 FROM settlement_events WHERE external_id = 'REPORT_AVAILABLE:{flaky}' AND status = 'posted')"),
    )
    .await;
    app.wait_for(
        "six dead letters",
        60,
        "SELECT count(*) >= 6 FROM dead_letters",
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
            "provider_facts",
            "provider_auth",
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
/// by two jobs at once (the same batch announced under two names), each line once.
async fn a_report_of_several_chunks_posted_twice_at_once_posts_each_line_once(backend: Backend) {
    let (app, reports) = app(backend).await;
    let report = report_of(1_200, 9);
    reports.put("settlement_detail_report_batch_9.csv", report.clone());
    reports.put("settlement_detail_report_batch_9_again.csv", report);
    announce(&app, &reports, "settlement_detail_report_batch_9.csv").await;
    announce(&app, &reports, "settlement_detail_report_batch_9_again.csv").await;
    app.wait_settled(120).await;
    assert_eq!(report_entries(&app).await, 1_201);
    assert_eq!(app.count("dead_letters").await, 0);
    let reconciled = reconciliation(&app, 9).await;
    assert_eq!(reconciled["status"], "matched", "{reconciled}");
    assert_eq!(reconciled["payout_amount"], "11700.00");
    assert_eq!(reconciled["items"].as_array().map(Vec::len), Some(1_200));
    assert_eq!(app.failed_invariants().await, Vec::<String>::new());
}
