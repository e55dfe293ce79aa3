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
ops_hosts = [\"settle.example.com\"]
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

/// A client reached from another loopback address (Linux routes all of 127/8 to `lo`): its
/// share of the body budget is its own.
fn from_address(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, last]))
        .build()
        .expect("client")
}

/// A signed delivery of `id` through `client`, its body padded to `bytes`.
async fn post_signed(
    client: &reqwest::Client,
    app: &TestApp,
    id: &str,
    bytes: usize,
) -> reqwest::Response {
    let body = charge(&format!("ch_{id}"), "1.00", "0.00", "1.00");
    let body = format!("{body}{}", " ".repeat(bytes.saturating_sub(body.len())));
    let mut request = client
        .post(app.url("/webhooks/std"))
        .header("content-type", "application/json")
        .body(body.clone());
    for (name, value) in standard_headers(STANDARD_SECRET, id, now(), body.as_bytes()) {
        request = request.header(name, value);
    }
    request.send().await.expect("sent")
}

/// Bytes are reserved as they arrive, against the whole budget and the client address' share:
/// one address holding most of its share is refused more (503, a provider retries), another
/// address is not, and the room comes back when the held bodies are answered.
#[tokio::test]
async fn bodies_are_reserved_as_they_arrive_and_one_address_holds_only_its_share() {
    let app = spawn_app_with(
        "body_bytes_max = 4096\n[ingress]\nbody_read_timeout_ms = 20000\nbody_budget_bytes = 8192\n\
         client_budget_bytes = 7000\nbody_min_bytes_per_sec = 1\n",
    )
    .await;
    // Two deliveries from 127.0.0.1 send 3,000 and 2,900 of their 4,000 bytes and wait: 5,900
    // held of the address' 7,000 (reserving what each announced would hold 8,000).
    let mut holding = Vec::new();
    for (id, sent) in [("msg_hold_1", 3000), ("msg_hold_2", 2900)] {
        let body = charge(&format!("ch_{id}"), "10.00", "0.30", "9.70");
        let padded = format!("{body}{}", " ".repeat(4000 - body.len()));
        let headers = standard_headers(STANDARD_SECRET, id, now(), padded.as_bytes());
        let mut stream = connect(&app).await;
        stream
            .write_all(head("/webhooks/std", &headers, padded.len()).as_bytes())
            .await
            .expect("head");
        stream
            .write_all(&padded.as_bytes()[..sent])
            .await
            .expect("most of the body");
        holding.push((stream, padded, sent));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // 2,000 more from the same address would hold 7,900 of its 7,000.
    let response = post_signed(&from_address(1), &app, "msg_third", 2000).await;
    assert_eq!(
        response.status().as_u16(),
        503,
        "the address' share is held"
    );
    assert!(response.headers().contains_key("retry-after"));
    let json: serde_json::Value = response.json().await.expect("json");
    assert_eq!(json["error"], "busy");
    // From another address the same 2,000 fit the whole budget (7,900 of 8,192).
    let response = post_signed(&from_address(2), &app, "msg_other", 2000).await;
    assert_eq!(response.status().as_u16(), 200, "another address has room");
    assert!(
        app.metric("settle_ingress_body_budget_refused_total{limit=\"client\"}")
            .await
            >= 1.0
    );
    // The held ones finish, one after the other; then there is room again.
    for (stream, padded, sent) in &mut holding {
        stream
            .write_all(&padded.as_bytes()[*sent..])
            .await
            .expect("the rest");
        let (answer, _) = read_until_closed(stream, Duration::from_millis(1500)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let response = post_signed(&from_address(1), &app, "msg_third", 2000).await;
    assert_eq!(
        response.status().as_u16(),
        200,
        "the provider's retry goes through"
    );
    assert_eq!(app.count("settlement_events").await, 4);
}

/// 128 connections from one address, each declaring a full body and trickling it, at the
/// defaults: they hold only what they sent, are closed for their rate, and a signed delivery
/// from another address is recorded meanwhile, within a provider's deadline.
#[tokio::test]
async fn trickling_clients_at_one_address_do_not_stop_another_addresses_delivery() {
    let app = tests::app::spawn_app().await;
    let mut tricklers = Vec::new();
    for i in 0..128 {
        let (_, body) = signed_delivery(&format!("msg_trickle_{i}"));
        let headers = standard_headers(
            STANDARD_SECRET,
            &format!("msg_trickle_{i}"),
            now(),
            body.as_bytes(),
        );
        let mut stream = connect(&app).await;
        stream
            .write_all(head("/webhooks/std", &headers, 256 * 1024).as_bytes())
            .await
            .expect("head");
        stream.write_all(b"{").await.expect("a first byte");
        tricklers.push(stream);
    }
    let started = std::time::Instant::now();
    let response = post_signed(&from_address(2), &app, "msg_meanwhile", 0).await;
    assert_eq!(response.status().as_u16(), 200);
    // Within a provider's deadline for an answer (Adyen waits 10 s), not a speed measure.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered in {:?}",
        started.elapsed()
    );
    // Each trickler is closed for its rate (1 KiB a second after its first), long before the
    // 10 s body timeout.
    for stream in tricklers.iter_mut().take(8) {
        let (answer, closed) = read_until_closed(stream, Duration::from_secs(6)).await;
        assert!(closed && answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert_eq!(app.count("settlement_events").await, 1);
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

/// Requests with no token (a health check, a browser, a script with its variable unset) cost
/// the address nothing: they never lock out the operators who share it.
#[tokio::test]
async fn requests_without_a_token_never_throttle_an_address() {
    let app = spawn_app_with(LIMITS).await;
    for _ in 0..100 {
        let (status, body) = app.api_get("/api/dead-letters", None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("unauthorized"))
        );
    }
    for _ in 0..20 {
        assert_eq!(app.log_in("").await.status().as_u16(), 401);
    }
    let (status, _) = app.api_get("/api/dead-letters", Some("wrong")).await;
    assert_eq!(status, 401, "the first wrong token is still only wrong");
    let (status, _) = app.api_get("/api/dead-letters", Some(OPS_TOKEN)).await;
    assert_eq!(status, 200);
    assert_eq!(
        app.metric("settle_auth_failures_total{surface=\"api\"}")
            .await,
        1.0,
        "only the wrong token counted"
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
    let (status, _) = app.api_get("/api/dead-letters", Some(OPS_TOKEN)).await;
    assert_eq!(status, 200, "while throttled, a right token passes");
    let (status, body) = app.api_get("/api/dead-letters", Some("wrong")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("too_many_failed_attempts")),
        "while throttled, a wrong one waits"
    );
    assert_eq!(
        app.log_in("wrong").await.status().as_u16(),
        429,
        "the same address, the same allowance"
    );
    assert_eq!(
        app.log_in(OPS_TOKEN).await.status().as_u16(),
        303,
        "a right token logs in while its address is throttled"
    );
    tokio::time::sleep(Duration::from_secs(retry + 1)).await;
    let (status, _) = app.api_get("/api/dead-letters", Some("wrong")).await;
    assert_eq!(status, 401, "recovered");
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

/// A page on another site whose name is made to resolve to the operator listener (DNS
/// rebinding) sends its own name as `Host`: refused before any route, `/metrics` included.
#[tokio::test]
async fn the_operator_listener_answers_only_its_own_names() {
    let app = spawn_app_with(LIMITS).await;
    let get = |path: &'static str, host: &'static str| {
        let request = app.http.get(app.url(path)).header("host", host);
        async move {
            let response = request.send().await.expect("sent");
            let status = response.status().as_u16();
            (status, response.text().await.expect("body"))
        }
    };
    for path in [
        "/metrics",
        "/api/openapi.json",
        "/dashboard/login",
        "/readyz",
    ] {
        let (status, body) = get(path, "rebind.attacker.example:9090").await;
        assert_eq!(status, 421, "{path}");
        assert!(body.contains("misdirected_request"), "{path}: {body}");
        for host in ["localhost:9090", "127.0.0.1", "settle.example.com"] {
            let (status, _) = get(path, host).await;
            assert_ne!(status, 421, "{path} by {host}");
        }
    }
    assert_eq!(
        app.metric("settle_http_misdirected_total").await,
        4.0,
        "counted"
    );
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
