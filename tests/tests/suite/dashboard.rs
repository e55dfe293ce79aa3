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
    /// read (a navigation still finishing).
    async fn text(&self, selector: &str) -> String {
        for _ in 0..20 {
            let element = self
                .client
                .find(Locator::Css(selector))
                .await
                .expect(selector);
            match element.text().await {
                Ok(text) => return text,
                Err(fantoccini::error::CmdError::Standard(error))
                    if error.error == fantoccini::error::ErrorStatus::StaleElementReference =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("text of {selector}: {error}"),
            }
        }
        panic!("{selector} kept going stale")
    }

    /// The element's text once it reads `expected`, or the last text seen after ten seconds: a
    /// click that submits a form may return before the next page has replaced this one.
    async fn text_becoming(&self, selector: &str, expected: &str) -> String {
        let mut seen = String::new();
        for _ in 0..100 {
            match self.client.find(Locator::Css(selector)).await {
                Ok(_) => {
                    seen = self.text(selector).await;
                    if seen == expected {
                        break;
                    }
                }
                Err(fantoccini::error::CmdError::Standard(error))
                    if error.error == fantoccini::error::ErrorStatus::NoSuchElement => {}
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
