//! The dashboard in a real browser (headless Chromium through chromedriver): an ops user logs in
//! with a token, opens a dead letter, requeues it with a reason and sees it posted; a finance user
//! sees no action; forged posts are refused. Screenshots go to `target/artifacts/dashboard/`.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tests::TestApp;
use tests::app::{AppOptions, FAST_WORKERS, FINANCE_TOKEN, OPS_TOKEN, canonical, charge, spawn};
use tests::process::{Scratch, free_port};

struct Browser {
    client: Client,
    _driver: tokio::process::Child,
    _profile: Scratch,
    shots: PathBuf,
}

impl Browser {
    async fn start() -> Browser {
        let port = free_port();
        let driver = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; .ci/run installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = Scratch::new();
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"binary": "/usr/bin/chromium", "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,1000", format!("--user-data-dir={}", profile.dir.display())
            ]}),
        );
        // Two TLS backends are linked in (the database drivers' and the HTTP client's); the
        // WebDriver client needs one picked.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = ClientBuilder::rustls()
            .expect("tls")
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a browser session");
        let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/artifacts/dashboard");
        std::fs::create_dir_all(&shots).expect("artifacts dir");
        Browser {
            client,
            _driver: driver,
            _profile: profile,
            shots,
        }
    }

    async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(self.shots.join(format!("{name}.png")), png).expect("save screenshot");
    }

    /// The element's text, looked up again if the page replaced it between the lookup and the
    /// read, or is between two pages (a navigation still finishing).
    async fn text(&self, selector: &str) -> String {
        for _ in 0..20 {
            let element = match self.client.find(Locator::Css(selector)).await {
                Ok(element) => element,
                Err(error) if between_pages(&error) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(error) => panic!("find {selector}: {error}"),
            };
            match element.text().await {
                Ok(text) => return text,
                Err(error) if between_pages(&error) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("text of {selector}: {error}"),
            }
        }
        panic!("{selector} kept going stale or missing")
    }

    /// The element's text once it reads `expected`, or the last text seen after ten seconds: a
    /// click that submits a form may return before the next page has replaced this one.
    async fn text_becoming(&self, selector: &str, expected: &str) -> String {
        self.text_once(selector, |text| text == expected).await
    }

    /// The element's text once `wanted` holds for it (the element present, the next page
    /// loaded), or the last text seen after ten seconds.
    async fn text_once(&self, selector: &str, wanted: impl Fn(&str) -> bool) -> String {
        let mut seen = String::new();
        for _ in 0..100 {
            match self.client.find(Locator::Css(selector)).await {
                Ok(_) => {
                    seen = self.text(selector).await;
                    if wanted(&seen) {
                        break;
                    }
                }
                Err(error) if between_pages(&error) => {}
                Err(error) => panic!("find {selector}: {error}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    }

    async fn log_in(&self, app: &TestApp, token: &str) {
        self.client
            .goto(&app.url("/dashboard"))
            .await
            .expect("open");
        assert!(
            self.client
                .current_url()
                .await
                .expect("url")
                .path()
                .ends_with("/dashboard/login"),
            "sent to log in"
        );
        self.client
            .find(Locator::Css("input[name=token]"))
            .await
            .expect("token field")
            .send_keys(token)
            .await
            .expect("type");
        self.client
            .find(Locator::Id("login"))
            .await
            .expect("button")
            .click()
            .await
            .expect("click");
        self.client
            .wait()
            .for_element(Locator::Id("open-dead-letters"))
            .await
            .expect("the overview");
    }

    /// The browser's session cookie, for a request made outside the browser.
    async fn session_cookie(&self) -> String {
        let cookie = self
            .client
            .get_named_cookie("settle_session")
            .await
            .expect("a session cookie");
        assert_eq!(cookie.http_only(), Some(true), "HttpOnly");
        assert_eq!(cookie.secure(), Some(true), "Secure");
        format!("settle_session={}", cookie.value())
    }
}

/// Whether a WebDriver error means the element was looked for while the page was being replaced:
/// not there yet, gone stale, or (Chromium's own wording for a node of the page being unloaded)
/// "does not belong to the document".
fn between_pages(error: &fantoccini::error::CmdError) -> bool {
    use fantoccini::error::{CmdError, ErrorStatus};
    match error {
        CmdError::Standard(error) => match error.error {
            ErrorStatus::NoSuchElement | ErrorStatus::StaleElementReference => true,
            ErrorStatus::UnknownError => {
                error.message.contains("does not belong to the document")
                    || error.message.contains("No node with given id")
            }
            _ => false,
        },
        _ => false,
    }
}

#[tokio::test]
async fn ops_requeues_from_the_browser_and_finance_cannot_act() {
    let app = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nattempts_max = 2"),
        ..AppOptions::default()
    })
    .await;
    let payout = |kind: &str| {
        canonical(
            kind,
            json!({"movement_id": "po_1", "occurred_at": "2026-11-30T18:00:00Z",
        "currency": "USD", "amount": "500.00", "payout_id": "po_1"}),
        )
    };
    app.post_standard("msg_failed", &payout("payout_failed"))
        .await;
    app.post_standard("msg_bad", &charge("ch_2", "1.00", "0.10", "0.50"))
        .await;
    app.wait_settled(30).await;
    app.post_standard("msg_paid", &payout("payout_paid")).await;
    app.wait_settled(30).await;
    let failed = app.open_dead_letter("msg_failed").await;
    let bad = app.open_dead_letter("msg_bad").await;

    let browser = Browser::start().await;
    browser.log_in(&app, OPS_TOKEN).await;
    browser.shot("1-overview").await;
    assert_eq!(browser.text("#open-dead-letters").await, "2");
    browser
        .client
        .goto(&app.url("/dashboard/dead-letters"))
        .await
        .expect("list");
    browser.shot("2-dead-letters").await;
    browser
        .client
        .find(Locator::LinkText(&failed.to_string()))
        .await
        .expect("the dead letter's link")
        .click()
        .await
        .expect("open it");
    assert_eq!(browser.text_becoming("#state", "open").await, "open");
    browser
        .client
        .find(Locator::Id("requeue-reason"))
        .await
        .expect("reason")
        .send_keys("payout po_1 arrived")
        .await
        .expect("type");
    browser.shot("3-dead-letter").await;
    browser
        .client
        .find(Locator::Id("requeue"))
        .await
        .expect("requeue button")
        .click()
        .await
        .expect("requeue");
    assert_eq!(
        browser.text_becoming("#state", "requeued").await,
        "requeued"
    );
    app.wait_settled(30).await;
    browser.client.refresh().await.expect("reload");
    assert_eq!(browser.text("#event-status").await, "posted");
    assert!(
        browser.text("#audit").await.contains("payout po_1 arrived"),
        "the audit trail shows the reason"
    );
    browser.shot("4-requeued-and-posted").await;
    let ops_cookie = browser.session_cookie().await;

    // Another person, with a finance token.
    browser.client.delete_all_cookies().await.expect("log out");
    browser.log_in(&app, FINANCE_TOKEN).await;
    browser
        .client
        .goto(&app.url(&format!("/dashboard/dead-letters/{bad}")))
        .await
        .expect("open");
    assert_eq!(browser.text_becoming("#state", "open").await, "open");
    assert!(
        browser.client.find(Locator::Id("requeue")).await.is_err(),
        "finance sees no requeue button"
    );
    assert!(
        browser.client.find(Locator::Id("discard")).await.is_err(),
        "finance sees no discard button"
    );
    browser.shot("5-finance-view").await;
    let finance_cookie = browser.session_cookie().await;
    for (page, table) in [
        ("journal", "#journal"),
        ("balances", "#balances"),
        ("payouts", "table"),
        ("conflicts", "table"),
    ] {
        browser
            .client
            .goto(&app.url(&format!("/dashboard/{page}")))
            .await
            .expect("open");
        browser
            .client
            .find(Locator::Css(table))
            .await
            .unwrap_or_else(|_| panic!("the {page} page renders its table"));
    }
    assert!(browser.text("body").await.contains("Open conflicts"));
    browser
        .client
        .goto(&app.url("/dashboard/journal"))
        .await
        .expect("journal");
    assert!(
        browser
            .text("#journal")
            .await
            .contains("payout_failed po_1"),
        "the journal shows the reversal"
    );
    browser.shot("6-journal").await;
    browser.client.close().await.expect("close the browser");

    // Forged posts: finance with a form, ops without the session's CSRF token.
    let post = |cookie: String, body: &'static str| {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let url = app.url(&format!("/dashboard/dead-letters/{bad}/discard"));
        async move {
            http.post(url)
                .header("cookie", cookie)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .expect("sent")
                .status()
                .as_u16()
        }
    };
    assert_eq!(
        post(finance_cookie, "csrf=anything&reason=forged").await,
        403
    );
    assert_eq!(
        post(ops_cookie.clone(), "csrf=forged&reason=forged").await,
        403
    );
    assert_eq!(
        post(String::new(), "csrf=forged&reason=forged").await,
        303,
        "no session: sent to log in"
    );
    assert_eq!(
        app.event_state("msg_bad").await.0,
        "abandoned",
        "nothing forged was done"
    );
    assert_eq!(app.count("audit_log").await, 1);
}

impl Browser {
    async fn open(&self, app: &TestApp, path: &str) {
        self.client.goto(&app.url(path)).await.expect("open");
    }

    /// Discards the dead letter on the page with `reason`.
    async fn submit_discard(&self, reason: &str) {
        self.client
            .find(Locator::Css("form[action$='/discard'] input[name=reason]"))
            .await
            .expect("the discard reason")
            .send_keys(reason)
            .await
            .expect("type");
        self.client
            .find(Locator::Id("discard"))
            .await
            .expect("discard")
            .click()
            .await
            .expect("click");
    }

    /// Types `text` into the element with `id`, then clicks the button with id `button`.
    async fn submit(&self, field: &str, text: &str, button: &str) {
        self.client
            .find(Locator::Id(field))
            .await
            .expect(field)
            .send_keys(text)
            .await
            .expect("type");
        self.client
            .find(Locator::Id(button))
            .await
            .expect(button)
            .click()
            .await
            .expect("click");
    }
}

#[tokio::test]
async fn a_payload_is_shown_then_erased_on_request_and_by_expiry() {
    let app = spawn(AppOptions::default()).await;
    app.post_standard("msg_ok", &charge("ch_1", "100.00", "3.20", "96.80"))
        .await;
    app.post_standard("msg_bad", &charge("ch_2", "1.00", "0.10", "0.50"))
        .await;
    app.wait_settled(30).await;
    let bad = app.open_dead_letter("msg_bad").await;
    let ok = app
        .scalar("SELECT id FROM settlement_events WHERE external_id = 'msg_ok'")
        .await;

    let browser = Browser::start().await;
    browser.log_in(&app, OPS_TOKEN).await;
    // Found by the search, opened from its id.
    browser
        .open(&app, "/dashboard/events?external_id=msg_ok")
        .await;
    browser
        .client
        .find(Locator::LinkText(&ok.to_string()))
        .await
        .expect("the event's link")
        .click()
        .await
        .expect("open it");
    assert_eq!(
        browser.text_becoming("#event-status", "posted").await,
        "posted"
    );
    assert!(browser.text("#payload").await.contains("ch_1"));
    assert!(browser.text("#entries").await.contains("this event"));
    browser.shot("7-event-with-payload").await;
    browser
        .submit("erase-reason", "GDPR request 17", "erase-payload")
        .await;
    let erased = browser
        .text_once("#payload-erased", |text| text.contains("olivia"))
        .await;
    assert!(
        erased.contains("olivia") && erased.contains("GDPR request 17"),
        "{erased}"
    );
    assert!(browser.client.find(Locator::Id("payload")).await.is_err());
    browser.shot("8-event-payload-erased").await;

    // The dead letter shows what was received until it is discarded and its payload expires.
    browser
        .open(&app, &format!("/dashboard/dead-letters/{bad}"))
        .await;
    assert!(browser.text("#payload").await.contains("ch_2"));
    browser.submit_discard("wrong fee").await;
    assert_eq!(
        browser.text_becoming("#state", "discarded").await,
        "discarded"
    );
    app.store
        .prune_payloads(
            &ledger::store::RetentionPolicy {
                default_days: Some(90),
                sources: vec![],
            },
            chrono::Utc::now() + chrono::Duration::days(91),
            "settle (retention)",
            false,
        )
        .await
        .expect("expire");
    browser.client.refresh().await.expect("reload");
    let expired = browser.text("#payload-erased").await;
    assert!(
        expired.contains("settle (retention)") && expired.contains("90 day"),
        "{expired}"
    );
    browser.shot("9-dead-letter-payload-expired").await;
    browser.client.close().await.expect("close the browser");
}

#[tokio::test]
async fn paging_keeps_the_filter_and_a_bulk_discard_acts_after_its_preview() {
    let app = spawn(AppOptions {
        workers: format!("{FAST_WORKERS}\nattempts_max = 1"),
        ..AppOptions::default()
    })
    .await;
    // 52 invalid charges (invalid_facts) and 3 payouts failing before they were paid
    // (dependency_not_ready): 55 open dead letters, more than a page of 50.
    for i in 0..52 {
        app.post_standard(
            &format!("msg_bad_{i}"),
            &charge(&format!("ch_{i}"), "1.00", "0.10", "0.50"),
        )
        .await;
    }
    for i in 0..3 {
        let payout = canonical(
            "payout_failed",
            json!({"movement_id": format!("po_{i}"), "occurred_at": "2026-11-30T18:00:00Z",
                "currency": "USD", "amount": "500.00", "payout_id": format!("po_{i}")}),
        );
        app.post_standard(&format!("msg_payout_{i}"), &payout).await;
    }
    app.wait_settled(60).await;
    let open = "SELECT count(*) FROM dead_letters WHERE state = 'open'";
    assert_eq!(app.scalar(open).await, 55);

    let browser = Browser::start().await;
    browser.log_in(&app, OPS_TOKEN).await;
    browser
        .open(&app, "/dashboard/dead-letters?error_code=invalid_facts")
        .await;
    let rows = |text: String| {
        text.lines()
            .filter(|line| line.contains("invalid_facts") || line.contains("dependency_not_ready"))
            .map(|line| line.contains("invalid_facts"))
            .collect::<Vec<bool>>()
    };
    let first = rows(browser.text("#dead-letters").await);
    assert_eq!(first.len(), 50, "a page of 50");
    assert!(
        first.iter().all(|&invalid| invalid),
        "only the filter's code"
    );
    browser
        .client
        .find(Locator::LinkText("Older →"))
        .await
        .expect("the next page's link")
        .click()
        .await
        .expect("older");
    let url = browser.client.current_url().await.expect("url");
    assert!(url.as_str().contains("error_code=invalid_facts"), "{url}");
    let second = rows(browser.text("#dead-letters").await);
    assert_eq!(second, [true, true], "the rest, still filtered");
    browser.shot("10-dead-letters-page-2").await;

    // Bulk discard of what the filter matches: a preview first, nothing changed by it.
    browser
        .open(&app, "/dashboard/dead-letters?error_code=invalid_facts")
        .await;
    browser
        .client
        .find(Locator::Css(
            "#bulk select[name=action] option[value=discard]",
        ))
        .await
        .expect("discard option")
        .click()
        .await
        .expect("choose discard");
    browser
        .client
        .find(Locator::Css("#bulk input[name=reason]"))
        .await
        .expect("reason")
        .send_keys("sandbox data")
        .await
        .expect("type");
    browser
        .client
        .find(Locator::Id("bulk-preview"))
        .await
        .expect("preview")
        .click()
        .await
        .expect("preview");
    let summary = browser
        .text_once("#bulk-summary", |text| text.contains("match"))
        .await;
    assert!(
        summary.contains("52 open dead letter(s) match"),
        "{summary}"
    );
    assert_eq!(app.scalar(open).await, 55, "a preview changes nothing");
    browser.shot("11-bulk-preview").await;
    browser
        .client
        .find(Locator::Id("bulk-confirm"))
        .await
        .expect("confirm")
        .click()
        .await
        .expect("confirm");
    let done = browser
        .text_once("#bulk-summary", |text| text.contains("discarded"))
        .await;
    assert!(done.contains("discarded: 52"), "{done}");
    assert_eq!(app.scalar(open).await, 3, "only the other code stays open");
    assert_eq!(
        app.scalar("SELECT count(*) FROM audit_log WHERE action = 'dead_letter.discard' AND reason = 'sandbox data'")
            .await,
        52,
        "every item audited"
    );
    browser.shot("12-bulk-done").await;
    browser.client.close().await.expect("close the browser");
}

#[tokio::test]
async fn ops_pauses_and_resumes_a_source_from_the_browser() {
    let app = spawn(AppOptions::default()).await;
    let browser = Browser::start().await;
    browser.log_in(&app, OPS_TOKEN).await;
    browser.open(&app, "/dashboard/sources").await;
    // The Adyen source books from notifications: the page says its books hold gross amounts only.
    let note = browser.text("#note-adyen-0").await;
    assert!(
        note.contains("adyen") && note.contains("no fees, no settlement currency, no payouts"),
        "{note}"
    );
    browser
        .submit("pause-std-reason", "bad deploy upstream", "pause-std")
        .await;
    let row = browser
        .text_once("#source-std", |text| text.contains("paused"))
        .await;
    assert!(
        row.contains("paused") && row.contains("olivia") && row.contains("bad deploy upstream"),
        "{row}"
    );
    app.post_standard("msg_1", &charge("ch_1", "100.00", "3.20", "96.80"))
        .await;
    browser.open(&app, "/dashboard").await;
    let alert = browser.text("#paused-std").await;
    assert!(alert.contains("is paused"), "{alert}");
    browser.shot("13-source-paused").await;
    assert_eq!(app.event_state("msg_1").await.0, "recorded");

    browser.open(&app, "/dashboard/sources").await;
    browser
        .submit("resume-std-reason", "upstream fixed", "resume-std")
        .await;
    let row = browser
        .text_once("#source-std", |text| text.contains("running"))
        .await;
    assert!(row.contains("running"), "{row}");
    assert!(browser.text("#pauses").await.contains("upstream fixed"));
    browser.shot("14-source-resumed").await;
    app.wait_settled(30).await;
    assert_eq!(app.event_state("msg_1").await.0, "posted");
    browser.open(&app, "/dashboard").await;
    assert!(
        browser
            .client
            .find(Locator::Id("paused-std"))
            .await
            .is_err()
    );
    browser.client.close().await.expect("close the browser");
}

#[tokio::test]
async fn finance_corrects_an_entry_from_the_browser_and_ops_cannot() {
    let app = spawn(AppOptions::default()).await;
    app.post_standard("msg_1", &charge("ch_1", "100.00", "3.20", "96.80"))
        .await;
    app.wait_settled(30).await;
    let entry = app
        .scalar("SELECT posted_entry_id FROM settlement_events WHERE external_id = 'msg_1'")
        .await;

    let browser = Browser::start().await;
    browser.log_in(&app, OPS_TOKEN).await;
    browser
        .open(&app, &format!("/dashboard/journal/{entry}"))
        .await;
    browser.text("#lines").await;
    assert!(
        browser.client.find(Locator::Id("correct")).await.is_err(),
        "ops sees no correction form"
    );
    browser.client.delete_all_cookies().await.expect("log out");
    browser.log_in(&app, FINANCE_TOKEN).await;
    browser.open(&app, "/dashboard/journal").await;
    browser
        .client
        .find(Locator::LinkText(&entry.to_string()))
        .await
        .expect("the entry's link")
        .click()
        .await
        .expect("open it");
    let lines = browser.text_once("#lines", |t| t.contains("3.20")).await;
    assert!(lines.contains("96.80"), "{lines}");
    let textarea = browser
        .client
        .find(Locator::Id("correct-lines"))
        .await
        .expect("the lines");
    let typed = textarea
        .prop("value")
        .await
        .expect("value")
        .unwrap_or_default();
    textarea.clear().await.expect("clear");
    textarea
        .send_keys(&typed.replace("96.80", "97.00").replace("3.20", "3.00"))
        .await
        .expect("type");
    browser
        .client
        .find(Locator::Id("correct-date"))
        .await
        .expect("date")
        .send_keys("2026-12-02")
        .await
        .expect("type");
    browser.shot("15-correction-form").await;
    browser
        .submit("correct-reason", "fee was 3.00", "correct")
        .await;
    let reversed = browser
        .text_once("#reversed-by", |t| t.contains("Reversed by"))
        .await;
    assert!(reversed.contains("Reversed by entry"), "{reversed}");
    browser.shot("16-corrected").await;
    assert_eq!(
        app.texts("SELECT actor || ': ' || reason FROM journal_corrections")
            .await,
        ["fred: fee was 3.00"]
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM journal_lines l JOIN journal_corrections c ON c.correction_entry_id = l.entry_id WHERE l.amount = 3.00")
            .await,
        1,
        "the correction carries the fee as typed"
    );
    browser.client.close().await.expect("close the browser");
}

/// A Stripe source with its feed on: the sources page shows how far the feed has read and its
/// backfill's progress; its books page shows Stripe's balance against the books, equal, and the
/// coverage of the days asked for, complete.
#[tokio::test]
async fn the_sources_page_shows_a_feed_its_backfill_and_its_books_against_stripe() {
    use providers::stripe::fake::FakeStripe;
    use tests::stripe::Txn;

    let fake = std::sync::Arc::new(
        FakeStripe::start(tests::app::STRIPE_API_KEY)
            .await
            .expect("the fake Stripe API starts"),
    );
    let now = chrono::Utc::now().timestamp();
    let mut old = Txn::charge("txn_d_old", "ch_d_old", 20_000, 610);
    old["created"] = json!(now - 3 * 86_400);
    fake.add_transaction(None, old);
    let mut yesterday = Txn::charge("txn_d_1", "ch_d_1", 5_000, 175);
    yesterday["created"] = json!(now - 86_400);
    fake.add_transaction(None, yesterday);
    let options = AppOptions {
        extra: format!(
            r#"
            [[sources]]
            name = "stripe-feed"
            provider = "stripe"
            secrets = ["{secret}"]
            livemode = false
            api_key = "{key}"
            api_base = "{base}"
            "#,
            secret = tests::app::STRIPE_SECRET,
            key = tests::app::STRIPE_API_KEY,
            base = fake.url(),
        ),
        stripe: Some(fake.clone()),
        ..AppOptions::default()
    };
    let app = spawn(options.clone()).await;
    let scratch = Scratch::new();
    let config = scratch.write(
        "settle.toml",
        &tests::app::config_toml(&app.database_url(), &options),
    );
    let since = (chrono::Utc::now() - chrono::TimeDelta::days(2))
        .date_naive()
        .to_string();
    let (ok, output) = tests::process::run_settle(
        &config,
        &app.database_url(),
        &["backfill", "stripe-feed", "--since", &since],
    )
    .await;
    assert!(ok, "{output}");

    let browser = Browser::start().await;
    browser.log_in(&app, FINANCE_TOKEN).await;
    browser.open(&app, "/dashboard/sources").await;
    let feed = browser.text("#feed-stripe-feed").await;
    assert!(
        feed.contains("read to") && feed.contains("s behind"),
        "{feed}"
    );
    assert!(
        feed.contains(&format!("backfill from {since}")) && feed.contains("opening posted"),
        "{feed}"
    );
    assert!(
        browser.text("#feed-std").await.is_empty(),
        "a source with no feed shows none"
    );
    browser.shot("15-source-feed").await;
    browser
        .client
        .find(Locator::Id("books-stripe-feed"))
        .await
        .expect("the books link")
        .click()
        .await
        .expect("click");
    let verdict = browser.text("#balance-verdict").await;
    assert_eq!(verdict, "The books equal the provider's balance.");
    let balance = browser.text("#balance").await;
    assert!(
        balance.contains("USD") && balance.contains("242.15"),
        "{balance}"
    );
    let today = chrono::Utc::now().date_naive().to_string();
    browser
        .open(
            &app,
            &format!("/dashboard/sources/stripe-feed/books?from={since}&to={today}"),
        )
        .await;
    let coverage = browser.text("#coverage-verdict").await;
    assert_eq!(
        coverage,
        "Every movement the provider lists is in the books, for the same net."
    );
    assert!(browser.text("#coverage").await.contains("charge"));
    browser.shot("16-source-books").await;
    browser.client.close().await.expect("close the browser");
}
