//! The public edge under slow, idle and abusive clients, over raw sockets: each deadline closes
//! what it should, bodies are budgeted before they are read, failed authentication is limited
//! per address, and the dashboard says what a browser will do with its cookie.

use std::time::Duration;

use tests::TestApp;
use tests::app::{OPS_TOKEN, STANDARD_SECRET, charge, spawn_app_with};
use tests::sign::{now, standard_headers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request head for `path`, with `headers`, announcing a JSON body of `length` bytes.
fn head(path: &str, headers: &[(String, String)], length: usize) -> String {
    let mut text = format!(
        "POST {path} HTTP/1.1\r\nhost: settle.test\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n"
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.addr).await.expect("connect")
}

/// Everything the server sends until it closes the connection (or `wait` passes: then what
/// came so far, and `false`).
async fn read_until_closed(stream: &mut TcpStream, wait: Duration) -> (String, bool) {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&received).into(), true),
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_) => return (String::from_utf8_lossy(&received).into(), false),
        }
    }
}

/// A signed delivery of `charge` split in two: its head, and its body.
fn signed_delivery(id: &str) -> (String, String) {
    let body = charge(&format!("ch_{id}"), "10.00", "0.30", "9.70");
    let headers = standard_headers(STANDARD_SECRET, id, now(), body.as_bytes());
    (head("/webhooks/std", &headers, body.len()), body)
}

const LIMITS: &str = "
body_bytes_max = 4096
[http]
header_read_timeout_ms = 500
auth_failures_per_minute = 60
[ingress]
body_read_timeout_ms = 800
body_budget_bytes = 8192
";

#[tokio::test]
async fn a_slow_head_and_an_idle_connection_are_closed_by_the_header_deadline() {
    let app = spawn_app_with(LIMITS).await;
    let mut slow = connect(&app).await;
    slow.write_all(b"POST /webhooks/std HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("half a head");
    let (_, closed) = read_until_closed(&mut slow, Duration::from_secs(10)).await;
    assert!(closed, "a head that never ends is closed");

    let mut idle = connect(&app).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("a request");
    let mut first = [0u8; 64];
    let n = idle.read(&mut first).await.expect("its answer");
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let (_, closed) = read_until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(closed, "an idle keep-alive connection is closed");
    assert!(
        app.metric("settle_http_connections_closed_total{reason=\"header_timeout\"}")
            .await
            >= 2.0
    );
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408_and_writes_nothing() {
    let app = spawn_app_with(LIMITS).await;
    let (head, body) = signed_delivery("msg_slow");
    let mut slow = connect(&app).await;
    slow.write_all(head.as_bytes()).await.expect("head");
    slow.write_all(&body.as_bytes()[..10])
        .await
        .expect("a trickle");
    let (answer, _) = read_until_closed(&mut slow, Duration::from_secs(10)).await;
    assert!(
        answer.starts_with("HTTP/1.1 408") && answer.contains("request_timeout"),
        "{answer}"
    );
    // A chunked body that never ends.
    let headers = standard_headers(STANDARD_SECRET, "msg_chunked", now(), body.as_bytes());
    let mut chunked = connect(&app).await;
    let mut text = "POST /webhooks/std HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n".to_owned();
    for (name, value) in &headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n5\r\n{\"typ\r\n");
    chunked.write_all(text.as_bytes()).await.expect("a chunk");
    let (answer, _) = read_until_closed(&mut chunked, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(app.count("settlement_events").await, 0);
}

#[tokio::test]
async fn bodies_beyond_the_budget_are_refused_before_they_are_read() {
    let app = spawn_app_with(
        "body_bytes_max = 4096\n[ingress]\nbody_read_timeout_ms = 20000\nbody_budget_bytes = 8192\n",
    )
    .await;
    // Two deliveries announcing 4 KiB each hold the whole 8 KiB budget while their bodies lag.
    let mut holding = Vec::new();
    for id in ["msg_hold_1", "msg_hold_2"] {
        let body = charge(&format!("ch_{id}"), "10.00", "0.30", "9.70");
        let padded = format!("{body}{}", " ".repeat(4000 - body.len()));
        let headers = standard_headers(STANDARD_SECRET, id, now(), padded.as_bytes());
        let mut stream = connect(&app).await;
        stream
            .write_all(head("/webhooks/std", &headers, padded.len()).as_bytes())
            .await
            .expect("head");
        holding.push((stream, padded));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let response = app
        .post_standard("msg_third", &charge("ch_3", "1.00", "0.00", "1.00"))
        .await;
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let json: serde_json::Value = response.json().await.expect("json");
    assert_eq!(json["error"], "busy");
    // The held ones finish; then there is room again.
    for (stream, padded) in &mut holding {
        stream.write_all(padded.as_bytes()).await.expect("body");
        let (answer, _) = read_until_closed(stream, Duration::from_millis(1500)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let response = app
        .post_standard("msg_third", &charge("ch_3", "1.00", "0.00", "1.00"))
        .await;
    assert_eq!(
        response.status().as_u16(),
        200,
        "the provider's retry goes through"
    );
    assert_eq!(app.count("settlement_events").await, 3);
}

#[tokio::test]
async fn a_delivery_without_a_readable_signature_is_refused_before_its_body() {
    let app = spawn_app_with(LIMITS).await;
    let mut unsigned = connect(&app).await;
    unsigned
        .write_all(head("/webhooks/std", &[], 3000).as_bytes())
        .await
        .expect("head only");
    let (answer, _) = read_until_closed(&mut unsigned, Duration::from_secs(5)).await;
    assert!(
        answer.starts_with("HTTP/1.1 401") && answer.contains("missing_signature"),
        "answered without waiting for the body: {answer}"
    );
    let stale = [
        ("webhook-id".to_owned(), "msg_stale".to_owned()),
        ("webhook-timestamp".to_owned(), (now() - 3600).to_string()),
        ("webhook-signature".to_owned(), "v1,AAAA".to_owned()),
    ];
    let mut old = connect(&app).await;
    old.write_all(head("/webhooks/std", &stale, 3000).as_bytes())
        .await
        .expect("head only");
    let (answer, _) = read_until_closed(&mut old, Duration::from_secs(5)).await;
    assert!(answer.contains("timestamp_out_of_tolerance"), "{answer}");
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_is_counted_as_such() {
    let app = spawn_app_with(LIMITS).await;
    let (head, body) = signed_delivery("msg_gone");
    let mut stream = connect(&app).await;
    stream.write_all(head.as_bytes()).await.expect("head");
    stream
        .write_all(&body.as_bytes()[..20])
        .await
        .expect("part");
    drop(stream);
    let series =
        "settle_deliveries_total{source=\"std\",outcome=\"rejected\",reason=\"client_aborted\"}";
    for _ in 0..50 {
        if app.metric(series).await >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(app.metric(series).await, 1.0);
    assert_eq!(
        app.metric("settle_deliveries_total{source=\"std\",outcome=\"rejected\",reason=\"payload_too_large\"}")
            .await,
        0.0
    );
}

#[tokio::test]
async fn failed_tokens_are_throttled_per_address_then_recover() {
    let app = spawn_app_with(LIMITS).await;
    for _ in 0..60 {
        let (status, _) = app.api_get("/api/dead-letters", Some("wrong")).await;
        assert_eq!(status, 401);
    }
    let response = app
        .http
        .get(app.url("/api/dead-letters"))
        .bearer_auth("wrong")
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 429);
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds");
    assert!(retry >= 1);
    let (status, body) = app.api_get("/api/dead-letters", Some(OPS_TOKEN)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("too_many_failed_attempts")),
        "while throttled, a right token waits too"
    );
    let login = app
        .http
        .post(app.url("/dashboard/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=wrong")
        .send()
        .await
        .expect("login");
    assert_eq!(
        login.status().as_u16(),
        429,
        "the same address, the same allowance"
    );
    tokio::time::sleep(Duration::from_secs(retry + 1)).await;
    let (status, _) = app.api_get("/api/dead-letters", Some(OPS_TOKEN)).await;
    assert_eq!(status, 200, "recovered");
    assert!(
        app.metric("settle_auth_failures_total{surface=\"api\"}")
            .await
            >= 61.0
    );
}

#[tokio::test]
async fn the_dashboard_is_never_cached_or_framed_and_says_when_its_cookie_will_be_dropped() {
    let app = spawn_app_with(LIMITS).await;
    let page = |host: &'static str, proto: Option<&'static str>| {
        let mut request = app
            .http
            .get(app.url("/dashboard/login"))
            .header("host", host);
        if let Some(proto) = proto {
            request = request.header("x-forwarded-proto", proto);
        }
        async move { request.send().await.expect("login page") }
    };
    let response = page("settle.example.com", None).await;
    let headers = response.headers().clone();
    assert_eq!(headers["cache-control"], "no-store");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .expect("text")
            .contains("frame-ancestors 'none'")
    );
    assert_eq!(headers["referrer-policy"], "same-origin");
    let text = response.text().await.expect("page");
    assert!(
        text.contains("cookie-warning"),
        "plain HTTP to a public name: {text}"
    );
    let text = page("settle.example.com", Some("https"))
        .await
        .text()
        .await
        .expect("page");
    assert!(!text.contains("cookie-warning"), "behind TLS");
    let text = page("127.0.0.1:8080", None)
        .await
        .text()
        .await
        .expect("page");
    assert!(!text.contains("cookie-warning"), "loopback");
}

#[tokio::test]
async fn connections_beyond_the_cap_are_answered_503_and_closed() {
    let app = spawn_app_with("[http]\nconnections_max = 3\n").await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect(&app).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = connect(&app).await;
    let (answer, closed) = read_until_closed(&mut extra, Duration::from_secs(5)).await;
    assert!(closed && answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_lowercase().contains("retry-after"));
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = app
        .post_standard("msg_after", &charge("ch_a", "1.00", "0.00", "1.00"))
        .await;
    assert_eq!(
        response.status().as_u16(),
        200,
        "slots free as connections close"
    );
}

#[tokio::test]
async fn shutdown_finishes_within_its_deadline_whatever_the_clients_do() {
    let app = spawn_app_with(
        "[http]\nshutdown_timeout_secs = 1\n[ingress]\nbody_read_timeout_ms = 60000\n",
    )
    .await;
    let (head, body) = signed_delivery("msg_never");
    let mut slow = connect(&app).await;
    slow.write_all(head.as_bytes()).await.expect("head");
    slow.write_all(&body.as_bytes()[..5])
        .await
        .expect("a trickle");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(20), app.stop()).await;
    assert!(stopped.is_ok(), "the app stopped");
    // A bound, not a speed figure: the deadline is 1 s, the workers' drain 5 s in tests.
    assert!(started.elapsed() < Duration::from_secs(15));
}
