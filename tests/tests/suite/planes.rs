//! The two listeners: `listen` (public: webhooks and `/healthz`) and `ops_listen` (internal: the
//! API, the dashboard, `/metrics`, `/readyz`), for every role that serves HTTP. What a listener
//! does not serve is a 404 there, whatever the token.

use ops::Role;
use tests::TestApp;
use tests::app::{AppOptions, Backend, OPS_TOKEN, spawn};
use tests::sign;

tests::on_both_backends!(
    a_login_holds_on_every_operator_process_and_across_a_restart_until_logout_everywhere,
    a_session_expires_and_a_token_removed_from_the_configuration_ends_its_sessions,
);

/// The internal paths, as an operator or a scraper asks for them.
const INTERNAL: [&str; 6] = [
    "/api/dead-letters",
    "/dashboard",
    "/dashboard/login",
    "/metrics",
    "/readyz",
    "/",
];

async fn status(app: &TestApp, url: String) -> u16 {
    app.http
        .get(url)
        .bearer_auth(OPS_TOKEN)
        .send()
        .await
        .expect("sent")
        .status()
        .as_u16()
}

/// A signed delivery to the `std` source at `url`.
async fn deliver(app: &TestApp, url: String, id: &str) -> u16 {
    let body = serde_json::json!({"type": "settlement.charge_settled", "timestamp": "2026-11-30T12:00:00Z",
        "data": {"movement_id": id, "occurred_at": "2026-11-30T11:59:00Z", "currency": "USD",
                 "gross": "10.00", "fee": "0.30", "net": "9.70"}})
    .to_string();
    let mut request = app
        .http
        .post(url)
        .header("content-type", "application/json")
        .body(body.clone());
    for (name, value) in sign::standard_headers(
        tests::app::STANDARD_SECRET,
        id,
        sign::now(),
        body.as_bytes(),
    ) {
        request = request.header(name, value);
    }
    request.send().await.expect("sent").status().as_u16()
}

async fn app(role: Role) -> TestApp {
    spawn(AppOptions {
        role,
        ..AppOptions::default()
    })
    .await
}

/// The public listener: webhooks and `/healthz`; every internal path a 404.
async fn public_serves_webhooks_only(app: &TestApp) {
    assert_eq!(
        deliver(app, app.public_url("/webhooks/std"), "msg_public").await,
        200
    );
    assert_eq!(status(app, app.public_url("/healthz")).await, 200);
    for path in INTERNAL {
        assert_eq!(
            status(app, app.public_url(path)).await,
            404,
            "{path} on the public listener"
        );
    }
}

#[tokio::test]
async fn serve_splits_webhooks_from_the_operator_plane() {
    let app = app(Role::Serve).await;
    public_serves_webhooks_only(&app).await;
    for (path, expected) in [
        ("/api/dead-letters", 200),
        ("/dashboard/login", 200),
        ("/metrics", 200),
        ("/readyz", 200),
        // The dashboard asks for a login; the root sends a browser to the dashboard.
        ("/dashboard", 303),
        ("/", 303),
    ] {
        let response = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
            .get(app.ops_url(path))
            .bearer_auth(OPS_TOKEN)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status().as_u16(), expected, "{path} internally");
    }
    assert_eq!(
        deliver(&app, app.ops_url("/webhooks/std"), "msg_internal").await,
        404,
        "webhooks are not taken on the internal listener"
    );
    assert_eq!(status(&app, app.ops_url("/healthz")).await, 404);
}

#[tokio::test]
async fn an_ingress_serves_webhooks_publicly_and_only_metrics_and_readiness_internally() {
    let app = app(Role::Ingress).await;
    public_serves_webhooks_only(&app).await;
    assert_eq!(status(&app, app.ops_url("/metrics")).await, 200);
    assert_eq!(status(&app, app.ops_url("/readyz")).await, 200);
    for path in ["/api/dead-letters", "/dashboard", "/dashboard/login", "/"] {
        assert_eq!(
            status(&app, app.ops_url(path)).await,
            404,
            "{path}: an ingress has no operator plane"
        );
    }
}

#[tokio::test]
async fn a_console_serves_the_operator_plane_and_no_webhooks() {
    let app = app(Role::Console).await;
    assert_eq!(app.addr.port(), 0, "a console has no public listener");
    for path in [
        "/api/dead-letters",
        "/dashboard/login",
        "/metrics",
        "/readyz",
    ] {
        assert_eq!(status(&app, app.ops_url(path)).await, 200, "{path}");
    }
    assert_eq!(
        deliver(&app, app.ops_url("/webhooks/std"), "msg_console").await,
        404
    );
    assert_eq!(status(&app, app.ops_url("/healthz")).await, 404);
    assert_eq!(app.count("settlement_events").await, 0);
}

/// A second operator process (`settle console`) over `app`'s database; stops when dropped.
struct Console {
    base: String,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Console {
    /// A console over `app`'s database, connecting as `settle_console` on PostgreSQL.
    async fn start(app: &TestApp) -> Console {
        let url = match app.backend() {
            Backend::Postgres => tests::db::as_role(&app.database_url(), "settle_console"),
            Backend::Sqlite => app.database_url(),
        };
        let mut config =
            ops::Config::from_toml(&tests::app::config_toml(&url, &AppOptions::default()))
                .expect("configuration");
        config.migrate_on_start = false;
        Console::configured(&config).await
    }

    /// A console over the database of `app`'s test configuration changed by `edit` (as the
    /// owner).
    async fn edited(app: &TestApp, edit: impl Fn(String) -> String) -> Console {
        let text = tests::app::config_toml(&app.database_url(), &AppOptions::default());
        let config = ops::Config::from_toml(&edit(text)).expect("configuration");
        Console::configured(&config).await
    }

    async fn configured(config: &ops::Config) -> Console {
        let console = ops::App::build(config, Role::Console)
            .await
            .expect("a console builds");
        let base = format!("http://{}", console.ops_addr().expect("bound"));
        let shutdown = tokio_util::sync::CancellationToken::new();
        tokio::spawn(console.run(shutdown.clone()));
        Console { base, shutdown }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Logs in at `base` with `token`; answers the session cookie (`settle_session=...`).
async fn login(base: &str, token: &str) -> String {
    let response = no_redirects()
        .post(format!("{base}/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status().as_u16(), 303, "logged in");
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a session cookie")
        .to_owned();
    cookie.split(';').next().expect("name=value").to_owned()
}

/// A dashboard page at `url` with `cookie`: its status and HTML.
async fn get_page(url: String, cookie: &str) -> (u16, String) {
    let response = no_redirects()
        .get(url)
        .header("cookie", cookie)
        .send()
        .await
        .expect("page");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// The overview at `base` with `cookie`: its status and page.
async fn overview(base: &str, cookie: &str) -> (u16, String) {
    get_page(format!("{base}/dashboard"), cookie).await
}

/// The page's CSRF token (every action form carries it).
fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    page[at..].split('"').next().expect("value").to_owned()
}

async fn a_login_holds_on_every_operator_process_and_across_a_restart_until_logout_everywhere(
    backend: Backend,
) {
    let app = spawn(AppOptions::on(backend)).await;
    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    let (status, _) = overview(&app.ops_url(""), &cookie).await;
    assert_eq!(status, 200);
    // The store keeps the session's hash, never its id.
    let id = cookie.trim_start_matches("settle_session=");
    let stored = app.texts("SELECT id_sha256 FROM dashboard_sessions").await;
    assert_eq!(
        stored,
        [hex::encode(<sha2::Sha256 as sha2::Digest>::digest(id))]
    );

    // Another operator process over the same database knows it.
    let console = Console::start(&app).await;
    let (status, _) = overview(&console.base, &cookie).await;
    assert_eq!(status, 200, "the session is shared");
    drop(console);

    // And so does the process itself after a restart.
    let database = app.stop().await;
    let app = tests::app::start(database, AppOptions::on(backend)).await;
    let (status, page) = overview(&app.ops_url(""), &cookie).await;
    assert_eq!(status, 200, "the session survived the restart");

    // A second login of the same token (another browser), then logout everywhere from the
    // first: both end, on every process.
    let other = login(&app.ops_url(""), OPS_TOKEN).await;
    let finance = login(&app.ops_url(""), tests::app::FINANCE_TOKEN).await;
    let console = Console::start(&app).await;
    let response = no_redirects()
        .post(app.ops_url("/dashboard/logout-everywhere"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}", csrf(&page)))
        .send()
        .await
        .expect("logout everywhere");
    assert_eq!(response.status().as_u16(), 303);
    for (base, session) in [(app.ops_url(""), &cookie), (console.base.clone(), &other)] {
        let (status, _) = overview(&base, session).await;
        assert_eq!(status, 303, "sent back to the login page");
    }
    let (status, _) = overview(&console.base, &finance).await;
    assert_eq!(status, 200, "another token's session is not touched");
    // Without the session's CSRF token, nothing is ended.
    let response = no_redirects()
        .post(app.ops_url("/dashboard/logout-everywhere"))
        .header("cookie", &finance)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("csrf=forged")
        .send()
        .await
        .expect("forged");
    assert_eq!(response.status().as_u16(), 403);
    let (status, _) = overview(&console.base, &finance).await;
    assert_eq!(status, 200);
}

async fn a_session_expires_and_a_token_removed_from_the_configuration_ends_its_sessions(
    backend: Backend,
) {
    let app = spawn(AppOptions {
        extra: "[dashboard]\nsession_lifetime_secs = 2\n".into(),
        ..AppOptions::on(backend)
    })
    .await;
    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    assert_eq!(overview(&app.ops_url(""), &cookie).await.0, 200);
    tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
    assert_eq!(
        overview(&app.ops_url(""), &cookie).await.0,
        303,
        "expired after its lifetime"
    );
    // A fresh login prunes the expired rows.
    let _fresh = login(&app.ops_url(""), OPS_TOKEN).await;
    assert_eq!(app.count("dashboard_sessions").await, 1);

    // A session whose token is no longer configured is refused by a process that does not
    // know the token (its configuration has none of the test tokens).
    let lasting = spawn(AppOptions::on(backend)).await;
    let cookie = login(&lasting.ops_url(""), OPS_TOKEN).await;
    let console = Console::edited(&lasting, |text| {
        text.replace("name = \"olivia\"", "name = \"olivia-renamed\"")
    })
    .await;
    assert_eq!(overview(&console.base, &cookie).await.0, 303);
    assert_eq!(overview(&lasting.ops_url(""), &cookie).await.0, 200);
    drop(console);

    // Nor is it honoured once its token is replaced under the same name (a leaked token
    // rotated): the session was the old token's.
    let console = Console::edited(&lasting, |text| {
        text.replace(
            &ops::auth::token_sha256(OPS_TOKEN),
            &ops::auth::token_sha256("a-token-replacing-the-leaked-one"),
        )
    })
    .await;
    assert_eq!(
        overview(&console.base, &cookie).await.0,
        303,
        "the old token's session ended"
    );
    assert_eq!(overview(&lasting.ops_url(""), &cookie).await.0, 200);
}

#[tokio::test]
async fn the_dashboard_answers_a_bad_address_with_its_own_page_and_pages_keep_their_filters() {
    let app = app(Role::Serve).await;
    // 52 dead letters (invalid facts), enough for a second page of 50.
    for i in 0..52 {
        let body = tests::app::charge(&format!("ch_bad_{i}"), "100.00", "3.20", "90.00");
        assert_eq!(
            app.post_standard(&format!("msg_bad_{i}"), &body)
                .await
                .status()
                .as_u16(),
            200
        );
    }
    app.wait_for(
        "52 dead letters",
        60,
        "SELECT count(*) = 52 FROM dead_letters",
    )
    .await;
    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    let page = |path: &str| get_page(app.ops_url(path), &cookie);
    let (status, first) = page("/dashboard/dead-letters?source=std&error_code=invalid_facts").await;
    assert_eq!(status, 200);
    let older = first
        .split("href=\"")
        .filter_map(|rest| rest.split('"').next())
        .find(|href| href.contains("cursor="))
        .expect("an Older link")
        .replace("&amp;", "&");
    assert!(
        older.contains("source=std") && older.contains("error_code=invalid_facts"),
        "{older}"
    );
    let (status, second) = page(&format!("/dashboard/dead-letters{older}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        second.matches("href=\"/dashboard/dead-letters/").count(),
        2,
        "the two older ones"
    );

    for (path, status, says) in [
        ("/dashboard/dead-letters/abc", 400, "is not an id"),
        ("/dashboard/conflicts/1x", 400, "is not an id"),
        (
            "/dashboard/dead-letters/999999",
            404,
            "No dead letter 999999",
        ),
        ("/dashboard/no-such-page", 404, "no such page"),
    ] {
        let (got, html) = page(path).await;
        assert_eq!(got, status, "{path}");
        assert!(
            html.contains("<html") && html.contains(says),
            "{path}: a page of the dashboard saying so: {html}"
        );
    }
}

#[tokio::test]
async fn the_journal_reads_newest_first_in_the_dashboard_and_on_request_in_the_api() {
    let app = app(Role::Serve).await;
    for day in 1..=5 {
        let body = tests::app::charge(&format!("ch_day_{day}"), "10.00", "0.30", "9.70")
            .replace("2026-11-30T11:59:00Z", &format!("2026-11-0{day}T12:00:00Z"));
        assert_eq!(
            app.post_standard(&format!("msg_day_{day}"), &body)
                .await
                .status()
                .as_u16(),
            200
        );
    }
    app.wait_settled(30).await;
    // Paged two at a time, newest first: every entry once, latest date first.
    let mut dates = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/journal?newest_first=true&limit=2&cursor={c}"),
            None => "/api/journal?newest_first=true&limit=2".to_owned(),
        };
        let (status, page) = app.api_get(&path, Some(OPS_TOKEN)).await;
        assert_eq!(status, 200, "{page}");
        for entry in page["items"].as_array().expect("items") {
            dates.push(entry["effective_date"].as_str().expect("date").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(
        dates,
        [
            "2026-11-05",
            "2026-11-04",
            "2026-11-03",
            "2026-11-02",
            "2026-11-01"
        ]
    );
    let (_, oldest) = app.api_get("/api/journal?limit=1", Some(OPS_TOKEN)).await;
    assert_eq!(
        oldest["items"][0]["effective_date"], "2026-11-01",
        "oldest first by default"
    );

    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    let html = no_redirects()
        .get(app.ops_url("/dashboard/journal?source=std"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("journal")
        .text()
        .await
        .expect("page");
    let first = html.find("2026-11-05").expect("the newest entry");
    let last = html.find("2026-11-01").expect("the oldest entry");
    assert!(
        first < last,
        "the dashboard's journal opens at the newest entry"
    );
}

#[tokio::test]
async fn the_dashboard_finds_events_by_any_filter_and_pages_keep_them() {
    let app = app(Role::Serve).await;
    for i in 0..53 {
        let body = tests::app::charge(&format!("ch_find_{i}"), "10.00", "0.30", "9.70");
        assert_eq!(
            app.post_standard(&format!("find_{i}"), &body)
                .await
                .status()
                .as_u16(),
            200
        );
    }
    let other = tests::app::charge("ch_other", "10.00", "0.30", "9.70");
    assert_eq!(
        app.post_standard("other_1", &other).await.status().as_u16(),
        200
    );
    app.wait_settled(60).await;
    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    let get = |url: String| get_page(url, &cookie);
    let (status, first) =
        get(app.ops_url("/dashboard/events?external_id_prefix=find_&status=posted")).await;
    assert_eq!(status, 200);
    assert!(
        first.contains("find_52") && !first.contains("other_1"),
        "newest first, filtered"
    );
    let older = first
        .split("href=\"")
        .filter_map(|rest| rest.split('"').next())
        .find(|href| href.contains("cursor="))
        .expect("an Older link")
        .replace("&amp;", "&");
    assert!(
        older.contains("external_id_prefix=find_") && older.contains("status=posted"),
        "{older}"
    );
    let (_, second) = get(app.ops_url(&format!("/dashboard/events{older}"))).await;
    assert!(
        second.contains("find_0") && !second.contains("find_52") && !second.contains("other_1")
    );
    let (status, refused) = get(app.ops_url("/dashboard/events?status=postd")).await;
    assert_eq!(status, 400);
    assert!(refused.contains("postd") && refused.contains("<html"));
}

/// Posts a form to the dashboard with `cookie`; answers the status and page.
async fn post_form(app: &TestApp, path: &str, cookie: &str, body: String) -> (u16, String) {
    let response = no_redirects()
        .post(app.ops_url(path))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .expect("form");
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_bulk_action_in_the_dashboard_previews_then_acts_on_exactly_what_was_confirmed() {
    let app = app(Role::Serve).await;
    let bad = |i: usize| tests::app::charge(&format!("ch_bulk_{i}"), "100.00", "3.20", "90.00");
    for i in 0..3 {
        assert_eq!(
            app.post_standard(&format!("bulk_{i}"), &bad(i))
                .await
                .status()
                .as_u16(),
            200
        );
    }
    app.wait_for(
        "three dead letters",
        30,
        "SELECT count(*) = 3 FROM dead_letters",
    )
    .await;
    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    let (_, list) = overview(&app.ops_url(""), &cookie).await;
    let token = csrf(&list);
    let form = |extra: &str| {
        format!(
            "csrf={token}&action=requeue&reason=fixed+the+mapping&source=std&error_code=invalid_facts{extra}"
        )
    };
    let (status, preview) =
        post_form(&app, "/dashboard/dead-letters/bulk", &cookie, form("")).await;
    assert_eq!(status, 200, "{preview}");
    assert!(preview.contains("3 open dead letter(s) match"), "{preview}");
    assert!(preview.contains("would_requeue: 3"), "{preview}");
    assert!(
        preview.contains("id=\"bulk-permanent\""),
        "permanent failures are called out"
    );
    assert!(preview.contains("name=\"confirm\" value=\"3\""));
    assert_eq!(app.count("audit_log").await, 0, "a preview changes nothing");

    // A fourth arrives before the confirmation: nothing is done.
    assert_eq!(
        app.post_standard("bulk_3", &bad(3)).await.status().as_u16(),
        200
    );
    app.wait_for(
        "four dead letters",
        30,
        "SELECT count(*) = 4 FROM dead_letters",
    )
    .await;
    let (_, grown) = post_form(
        &app,
        "/dashboard/dead-letters/bulk",
        &cookie,
        form("&confirm=3"),
    )
    .await;
    assert!(grown.contains("More dead letters match now (4)"), "{grown}");
    assert_eq!(
        app.scalar("SELECT count(*) FROM dead_letters WHERE state = 'open'")
            .await,
        4
    );
    let (status, done) = post_form(
        &app,
        "/dashboard/dead-letters/bulk",
        &cookie,
        form("&confirm=4"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(done.contains("requeued: 4"), "{done}");
    assert_eq!(
        app.scalar(
            "SELECT count(*) FROM audit_log WHERE reason = 'fixed the mapping' AND actor = 'olivia'"
        )
        .await,
        4,
        "every item audited"
    );
    // Without a reason, or from a finance session, nothing.
    let no_reason = format!("csrf={token}&action=discard&reason=&source=std");
    let (status, _) = post_form(&app, "/dashboard/dead-letters/bulk", &cookie, no_reason).await;
    assert_eq!(status, 400);
    let finance = login(&app.ops_url(""), tests::app::FINANCE_TOKEN).await;
    let (_, finance_page) = overview(&app.ops_url(""), &finance).await;
    let finance_form = format!(
        "csrf={}&action=discard&reason=x&source=std",
        csrf(&finance_page)
    );
    let (status, _) = post_form(&app, "/dashboard/dead-letters/bulk", &finance, finance_form).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_dead_letter_shows_what_was_received_a_permanent_requeue_needs_a_reason_and_a_conflict_its_differences()
 {
    let app = app(Role::Serve).await;
    let bad = tests::app::charge("ch_bad", "100.00", "3.20", "90.00");
    assert_eq!(
        app.post_standard("msg_bad", &bad).await.status().as_u16(),
        200
    );
    let good = tests::app::charge("ch_good", "10.00", "0.30", "9.70");
    assert_eq!(
        app.post_standard("msg_good", &good).await.status().as_u16(),
        200
    );
    let changed = tests::app::charge("ch_good", "10.50", "0.30", "10.20");
    assert_eq!(
        app.post_standard("msg_good", &changed)
            .await
            .status()
            .as_u16(),
        409
    );
    app.wait_settled(30).await;
    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    let letter = app.scalar("SELECT id FROM dead_letters").await;
    let (status, page) = overview(&app.ops_url(""), &cookie).await;
    assert_eq!(status, 200);
    let token = csrf(&page);
    let get = |url: String| async { get_page(url, &cookie).await.1 };
    let detail = get(app.ops_url(&format!("/dashboard/dead-letters/{letter}"))).await;
    assert!(
        detail.contains("id=\"payload\"") && detail.contains("ch_bad") && detail.contains("90.00"),
        "the payload as received: {detail}"
    );
    assert!(detail.contains("id=\"requeue-warning\""));
    let (status, refused) = post_form(
        &app,
        &format!("/dashboard/dead-letters/{letter}/requeue"),
        &cookie,
        format!("csrf={token}&reason="),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        app.scalar("SELECT count(*) FROM dead_letters WHERE state = 'open'")
            .await,
        1,
        "nothing requeued"
    );
    let conflict = app.scalar("SELECT id FROM event_conflicts").await;
    let page = get(app.ops_url(&format!("/dashboard/conflicts/{conflict}"))).await;
    let differences = page
        .split("id=\"differences\"")
        .nth(1)
        .and_then(|rest| rest.split("</table>").next())
        .expect("the differences");
    assert!(
        differences.contains("gross")
            && differences.contains("10.50")
            && differences.contains("net"),
        "{differences}"
    );
    assert!(
        !differences.contains("movement_id"),
        "equal fields are not listed"
    );
}

/// Every list of the dashboard pages: 52 open conflicts and 52 payouts are two pages each, the
/// next page's link keeping the list's filter, no row twice, none missed.
#[tokio::test]
async fn the_conflicts_and_payouts_lists_page_through_everything() {
    let app = spawn(AppOptions::default()).await;
    for i in 0..52 {
        let body = tests::app::canonical(
            "charge_settled",
            serde_json::json!({"movement_id": format!("ch_{i}"), "occurred_at": "2026-11-30T11:59:00Z",
                "currency": "USD", "gross": "10.00", "fee": "0.30", "net": "9.70",
                "payout_id": format!("po_{i:03}")}),
        );
        assert_eq!(
            app.post_standard(&format!("msg_{i}"), &body)
                .await
                .status()
                .as_u16(),
            200
        );
        let changed = body
            .replace("\"10.00\"", "\"11.00\"")
            .replace("\"9.70\"", "\"10.70\"");
        assert_eq!(
            app.post_standard(&format!("msg_{i}"), &changed)
                .await
                .status()
                .as_u16(),
            409
        );
    }
    app.wait_settled(30).await;
    let cookie = login(&app.ops_url(""), OPS_TOKEN).await;
    let rows = |page: &str, marker: &str| page.matches(marker).count();

    let (status, first) = get_page(app.ops_url("/dashboard/conflicts?state=open"), &cookie).await;
    assert_eq!(status, 200);
    assert_eq!(rows(&first, "href=\"/dashboard/conflicts/"), 50);
    let older = first
        .split("href=\"")
        .find(|s| s.starts_with("?state=open&amp;cursor="))
        .and_then(|s| s.split('"').next())
        .expect("an Older link keeping the state")
        .replace("&amp;", "&");
    let (_, second) = get_page(
        app.ops_url(&format!("/dashboard/conflicts{older}")),
        &cookie,
    )
    .await;
    assert_eq!(rows(&second, "href=\"/dashboard/conflicts/"), 2);
    assert!(!second.contains("cursor="), "no page after the last");

    let (status, first) = get_page(app.ops_url("/dashboard/payouts"), &cookie).await;
    assert_eq!(status, 200);
    assert_eq!(rows(&first, "href=\"/dashboard/payouts/po_"), 50);
    assert!(
        first.contains("href=\"?after=po_049\""),
        "the next page starts after the last shown"
    );
    let (_, second) = get_page(app.ops_url("/dashboard/payouts?after=po_049"), &cookie).await;
    assert_eq!(rows(&second, "href=\"/dashboard/payouts/po_"), 2);
    assert!(second.contains("po_051") && !second.contains("?after="));
}

/// Webhook signing secrets are read only by the roles that verify webhooks: a worker and a
/// console start without them; the ingress refuses to start, naming the variable.
#[tokio::test]
async fn only_the_roles_that_verify_webhooks_read_the_signing_secrets() {
    let db = tests::TestDb::create().await;
    let text = tests::app::config_toml(&db.url, &AppOptions::default()).replace(
        &format!(
            "secrets = [\"{}\", \"{}\"]",
            tests::app::STANDARD_SECRET,
            tests::app::STANDARD_SECRET_OLD
        ),
        "secrets_env = \"SETTLE_TEST_SECRETS_NOT_IN_THIS_PROCESS\"",
    );
    assert!(text.contains("SETTLE_TEST_SECRETS_NOT_IN_THIS_PROCESS"));
    let config = ops::Config::from_toml(&text).expect("the configuration loads without them");
    for role in [Role::Worker, Role::Console] {
        let app = ops::App::build(&config, role)
            .await
            .unwrap_or_else(|error| panic!("{role:?} builds without the secrets: {error:#}"));
        drop(app);
    }
    for role in [Role::Ingress, Role::Serve] {
        let error = match ops::App::build(&config, role).await {
            Ok(_) => panic!("{role:?} built without its secrets"),
            Err(error) => format!("{error:#}"),
        };
        assert!(
            error.contains("SETTLE_TEST_SECRETS_NOT_IN_THIS_PROCESS"),
            "{role:?}: {error}"
        );
    }
}
