//! The two listeners: `listen` (public: webhooks and `/healthz`) and `ops_listen` (internal: the
//! API, the dashboard, `/metrics`, `/readyz`), for every role that serves HTTP. What a listener
//! does not serve is a 404 there, whatever the token.

use ops::Role;
use tests::TestApp;
use tests::app::{AppOptions, OPS_TOKEN, spawn};
use tests::sign;

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
