//! Scenario 8, Abusive clients: `settle serve` at its defaults, started with the common
//! open-file limit (1,024 at full scale), faced at once with slowloris heads, idle keep-alive
//! connections, bodies trickled a byte at a time, large unauthenticated bodies that stall, a
//! chunked body that never ends, clients leaving mid-body and floods of wrong tokens, while a
//! provider sends a signed delivery every 200 ms and resends on 503 → every delivery is
//! answered 2xx and recorded; slow and idle connections are closed by their deadlines; memory
//! and open files stay bounded; wrong tokens are answered 429 and logged; and SIGTERM with slow
//! connections open stops the process within its deadline.

use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::json;
use tests::TestDb;
use tests::app::{AppOptions, FAST_WORKERS, STANDARD_SECRET, charge, config_toml};
use tests::process::{Listen, Scratch, command_without_harness_env, settle_binary};
use tests::sign::{now, standard_headers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Child;

use crate::{report, scale, verify};

/// The deadlines the scenario runs with: the product's header and body deadlines (10 s each),
/// and a shutdown deadline short enough to wait for.
const CONFIG: &str = "[http]\nshutdown_timeout_secs = 5\n";
/// A deadline's worst case here: the deadline itself plus a busy machine's slack.
const DEADLINE_SLACK: Duration = Duration::from_secs(15);

fn spawn_limited(
    scratch: &Scratch,
    config: &std::path::Path,
    url: &str,
    listen: &Listen,
    files: u64,
) -> Child {
    let log = std::fs::File::create(scratch.dir.join("serve.log")).expect("log");
    command_without_harness_env("prlimit")
        .arg(format!("--nofile={files}:{files}"))
        .arg(settle_binary())
        .arg("--config")
        .arg(config)
        .args(listen.args("serve"))
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "info,sqlx::postgres::notice=warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("prlimit settle serve")
}

/// Waits for `/readyz`; if the process exits or stays unready, fails with its log.
async fn wait_started(base: &str, serve: &mut Child, scratch: &Scratch) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = serve.try_wait() {
            panic!("settle serve exited ({status}):\n{}", scratch.logs());
        }
        let ready = http.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("settle serve never became ready:\n{}", scratch.logs());
}

/// `(peak RSS in KiB, open files)` of a process.
fn usage(pid: u32) -> (u64, u64) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let files = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (rss, files)
}

/// What the server does with a connection: answers (the start of its answer) or closes, and
/// when. `None` if it did neither within `wait`.
async fn outcome(stream: &mut TcpStream, wait: Duration) -> Option<(String, Duration)> {
    let started = Instant::now();
    let mut buffer = [0u8; 512];
    match tokio::time::timeout(wait, stream.read(&mut buffer)).await {
        Ok(Ok(n)) => Some((
            String::from_utf8_lossy(&buffer[..n]).into(),
            started.elapsed(),
        )),
        Ok(Err(_)) => Some((String::new(), started.elapsed())),
        Err(_) => None,
    }
}

/// A connection that sends a request head a byte at a time, every `pause`.
async fn slowloris(addr: String, pause: Duration) -> Option<(String, Duration)> {
    let mut stream = TcpStream::connect(&addr).await.ok()?;
    let started = Instant::now();
    let head = b"POST /webhooks/std HTTP/1.1\r\nhost: x\r\nx-a: b\r\n";
    let mut read = [0u8; 512];
    for byte in head.iter().cycle() {
        tokio::select! {
            n = stream.read(&mut read) => {
                let text = match n { Ok(n) => String::from_utf8_lossy(&read[..n]).into_owned(), Err(_) => String::new() };
                return Some((text, started.elapsed()));
            }
            _ = tokio::time::sleep(pause) => {}
        }
        if stream.write_all(&[*byte]).await.is_err() {
            return Some((String::new(), started.elapsed()));
        }
        if started.elapsed() > Duration::from_secs(120) {
            return None;
        }
    }
    None
}

/// A keep-alive connection that asks once, then idles.
async fn idle(addr: String) -> Option<(String, Duration)> {
    let mut stream = TcpStream::connect(&addr).await.ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .ok()?;
    let mut first = [0u8; 512];
    let n = stream.read(&mut first).await.ok()?;
    if !String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200") {
        return Some((String::from_utf8_lossy(&first[..n]).into(), Duration::ZERO));
    }
    outcome(&mut stream, Duration::from_secs(120)).await
}

/// A delivery whose head is signed-looking (fresh timestamp, wrong signature) and whose body
/// comes `per_byte` apart, or `stall_after` bytes then nothing.
async fn slow_body(
    addr: String,
    length: usize,
    sent: usize,
    per_byte: Duration,
) -> Option<(String, Duration)> {
    let mut stream = TcpStream::connect(&addr).await.ok()?;
    let head = format!(
        "POST /webhooks/std HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\
         webhook-id: msg_abuse\r\nwebhook-timestamp: {}\r\nwebhook-signature: v1,AAAA\r\n\r\n",
        now()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    let started = Instant::now();
    if per_byte.is_zero() {
        // Refused before its body is read (over the budget), the write may fail: the answer
        // is then already waiting to be read.
        let _ = stream.write_all(&vec![b' '; sent]).await;
        return outcome(&mut stream, Duration::from_secs(120)).await;
    }
    let mut read = [0u8; 512];
    for _ in 0..length {
        tokio::select! {
            n = stream.read(&mut read) => {
                let text = match n { Ok(n) => String::from_utf8_lossy(&read[..n]).into_owned(), Err(_) => String::new() };
                return Some((text, started.elapsed()));
            }
            _ = tokio::time::sleep(per_byte) => {}
        }
        if stream.write_all(b" ").await.is_err() {
            return Some((String::new(), started.elapsed()));
        }
    }
    None
}

/// A chunked body that never ends.
async fn endless_chunks(addr: String) -> Option<(String, Duration)> {
    let mut stream = TcpStream::connect(&addr).await.ok()?;
    let head = format!(
        "POST /webhooks/std HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\
         webhook-id: msg_chunks\r\nwebhook-timestamp: {}\r\nwebhook-signature: v1,AAAA\r\n\r\n1\r\n{{\r\n",
        now()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    outcome(&mut stream, Duration::from_secs(120)).await
}

/// A client that sends half a signed delivery and leaves.
async fn leaves_mid_body(addr: String, id: String) {
    let body = charge(&format!("ch_{id}"), "10.00", "0.30", "9.70");
    let headers = standard_headers(STANDARD_SECRET, &id, now(), body.as_bytes());
    let mut head = format!(
        "POST /webhooks/std HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    if let Ok(mut stream) = TcpStream::connect(&addr).await {
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&body.as_bytes()[..body.len() / 2]).await;
    }
}

/// The provider: a signed delivery every 200 ms for `duration`, each resent after a 503, a
/// refused connection or no answer, until it gets its 2xx. Answers `(sent, first tries refused)`
/// with every id it delivered.
async fn provider(base: String, duration: Duration) -> (Vec<String>, usize) {
    // A new connection per delivery, as webhook senders mostly do: each meets the cap afresh.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let started = Instant::now();
    let mut deliveries = Vec::new();
    let mut n = 0;
    while started.elapsed() < duration {
        let id = format!("legit-{n}");
        n += 1;
        let (http, base) = (http.clone(), base.clone());
        deliveries.push(tokio::spawn(async move {
            let body = charge(&format!("ch_{id}"), "10.00", "0.30", "9.70");
            let mut refused = 0;
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                let headers = standard_headers(STANDARD_SECRET, &id, now(), body.as_bytes());
                let mut request = http
                    .post(format!("{base}/webhooks/std"))
                    .header("content-type", "application/json")
                    .body(body.clone());
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                match request.send().await {
                    Ok(response) if response.status().is_success() => return (id, refused, true),
                    _ if Instant::now() > deadline => return (id, refused, false),
                    _ => {
                        refused += 1;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut ids = Vec::new();
    let mut refused_first = 0;
    for delivery in join_all(deliveries).await {
        let (id, refused, answered) = delivery.expect("delivery task");
        assert!(answered, "{id} never got its 2xx");
        refused_first += usize::from(refused > 0);
        ids.push(id);
    }
    (ids, refused_first)
}

/// How many of `outcomes` the server closed or answered within `limit`, and how many it
/// answered starting with `status`.
fn closed_within(
    outcomes: &[Option<(String, Duration)>],
    limit: Duration,
    status: &str,
) -> (usize, usize) {
    let closed = outcomes
        .iter()
        .filter(|o| o.as_ref().is_some_and(|(_, after)| *after <= limit))
        .count();
    let answered = outcomes
        .iter()
        .filter(|o| o.as_ref().is_some_and(|(text, _)| text.starts_with(status)))
        .count();
    (closed, answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abusive_clients_never_cost_a_delivery_and_every_deadline_holds() {
    let files = scale(512, 1024) as u64;
    let loris = scale(300, 1_100);
    let idlers = scale(100, 2_000);
    let slow_bodies = scale(30, 200);
    let big_bodies = scale(100, 1_000);
    let tokens = scale(200, 2_000);
    let leavers = scale(20, 100);
    let db = TestDb::create().await;
    let scratch = Scratch::new();
    let options = AppOptions {
        extra: CONFIG.to_owned(),
        workers: FAST_WORKERS.to_owned(),
        ..AppOptions::default()
    };
    let config = scratch.write("settle.toml", &config_toml(&db.url, &options));
    let listen = Listen::new();
    let mut serve = spawn_limited(&scratch, &config, &db.url, &listen, files);
    let pid = serve.id().expect("pid");
    let base = listen.base();
    let ops = listen.ops_base();
    wait_started(&ops, &mut serve, &scratch).await;
    let (rss_before, files_before) = usage(pid);

    let provider = tokio::spawn(provider(
        base.clone(),
        Duration::from_secs(scale(20, 90) as u64),
    ));
    let sampler = tokio::spawn(async move {
        let (mut rss, mut open) = (0, 0);
        for _ in 0..400 {
            let (r, f) = usage(pid);
            (rss, open) = (rss.max(r), open.max(f));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        (rss, open)
    });
    // The clients that leave mid-body first, while there is room under the connection cap (over
    // it they would be refused before their body is read); then the slow bodies (their deadlines
    // must be seen, not the cap), then the idle connections, then the slowloris heads, enough of
    // them to pass the cap.
    let addr = listen.public.clone();
    join_all((0..leavers).map(|i| leaves_mid_body(addr.clone(), format!("leaver-{i}")))).await;
    let slow_tasks: Vec<_> = (0..slow_bodies)
        .map(|_| tokio::spawn(slow_body(addr.clone(), 60_000, 0, Duration::from_secs(1))))
        .collect();
    let chunk_tasks: Vec<_> = (0..5)
        .map(|_| tokio::spawn(endless_chunks(addr.clone())))
        .collect();
    let big_tasks: Vec<_> = (0..big_bodies)
        .map(|_| tokio::spawn(slow_body(addr.clone(), 260_000, 200_000, Duration::ZERO)))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_tasks: Vec<_> = (0..idlers)
        .map(|_| tokio::spawn(idle(addr.clone())))
        .collect();
    let loris_tasks: Vec<_> = (0..loris)
        .map(|_| tokio::spawn(slowloris(addr.clone(), Duration::from_secs(2))))
        .collect();

    let collect = |tasks: Vec<tokio::task::JoinHandle<Option<(String, Duration)>>>| async move {
        join_all(tasks)
            .await
            .into_iter()
            .map(|t| t.ok().flatten())
            .collect::<Vec<_>>()
    };
    let loris_outcomes = collect(loris_tasks).await;
    let idle_outcomes = collect(idle_tasks).await;
    let slow_outcomes = collect(slow_tasks).await;
    let big_outcomes = collect(big_tasks).await;
    let chunk_outcomes = collect(chunk_tasks).await;
    // Wrong tokens at the API, then at the login form, from one address (once the slow heads
    // no longer hold every connection slot).
    let http = reqwest::Client::new();
    let mut api_answers = std::collections::BTreeMap::new();
    for _ in 0..tokens / 2 {
        if let Ok(response) = http
            .get(format!("{ops}/api/dead-letters"))
            .bearer_auth("guess")
            .send()
            .await
        {
            *api_answers.entry(response.status().as_u16()).or_insert(0) += 1;
        }
    }
    let mut login_answers = std::collections::BTreeMap::new();
    for _ in 0..tokens / 2 {
        if let Ok(response) = http
            .post(format!("{ops}/dashboard/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("token=guess")
            .send()
            .await
        {
            *login_answers.entry(response.status().as_u16()).or_insert(0) += 1;
        }
    }

    let (delivered, refused_first) = provider.await.expect("provider");
    let (rss_peak, files_peak) = sampler.await.expect("sampler");

    let (loris_closed, loris_refused) =
        closed_within(&loris_outcomes, DEADLINE_SLACK, "HTTP/1.1 503");
    let (idle_closed, _) = closed_within(&idle_outcomes, DEADLINE_SLACK, "");
    let (slow_closed, slow_408) = closed_within(&slow_outcomes, DEADLINE_SLACK, "HTTP/1.1 408");
    let slow_503 = slow_outcomes
        .iter()
        .filter(|o| {
            o.as_ref()
                .is_some_and(|(t, _)| t.starts_with("HTTP/1.1 503"))
        })
        .count();
    let (big_closed, big_408) = closed_within(&big_outcomes, DEADLINE_SLACK, "HTTP/1.1 408");
    let big_503 = big_outcomes
        .iter()
        .filter(|o| {
            o.as_ref()
                .is_some_and(|(t, _)| t.starts_with("HTTP/1.1 503"))
        })
        .count();
    // Refused at the connection cap while its body was on the way, a connection may be reset
    // before its 503 is read.
    let big_reset = big_outcomes
        .iter()
        .filter(|o| o.as_ref().is_some_and(|(t, _)| t.is_empty()))
        .count();
    let (chunks_closed, chunks_408) =
        closed_within(&chunk_outcomes, DEADLINE_SLACK, "HTTP/1.1 408");
    assert_eq!(
        loris_closed, loris,
        "every slow head closed (or refused) within its deadline"
    );
    assert_eq!(
        idle_closed, idlers,
        "every idle connection closed within its deadline"
    );
    assert_eq!(
        slow_closed, slow_bodies,
        "slow bodies answered within their deadline"
    );
    assert_eq!(
        slow_408 + slow_503,
        slow_bodies,
        "slow bodies: 408 (or 503 over the cap)"
    );
    assert!(slow_408 > 0, "the body deadline was seen");
    assert_eq!(big_closed, big_bodies, "stalled bodies answered");
    assert_eq!(
        big_408 + big_503 + big_reset,
        big_bodies,
        "stalled bodies: 408, or 503 over the budget or the cap"
    );
    assert!(big_408 > 0, "the body deadline was seen");
    let chunks_503 = chunk_outcomes
        .iter()
        .filter(|o| {
            o.as_ref()
                .is_some_and(|(t, _)| t.starts_with("HTTP/1.1 503"))
        })
        .count();
    assert_eq!(
        chunks_closed, 5,
        "endless chunks answered within their deadline"
    );
    assert_eq!(
        chunks_408 + chunks_503,
        5,
        "endless chunks: 408 (or 503 over the budget)"
    );
    assert!(
        files_peak < files,
        "open files {files_peak} stay under the limit {files}"
    );
    assert!(
        rss_peak < 160 * 1024,
        "peak RSS {} MiB (bodies being read are budgeted at 32 MiB)",
        rss_peak / 1024
    );
    assert!(
        api_answers.get(&429).copied().unwrap_or(0) > 0,
        "{api_answers:?}"
    );
    assert_eq!(api_answers.get(&200), None);
    assert!(
        login_answers.get(&429).copied().unwrap_or(0) > 0,
        "{login_answers:?}"
    );

    let metrics = http
        .get(format!("{ops}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("page");
    assert!(
        metrics.contains(r#"reason="client_aborted""#),
        "clients that left mid-body are counted as such"
    );
    let pool = db.pool().await;
    let recorded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM settlement_events WHERE external_id LIKE 'legit-%'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(recorded, delivered.len() as i64, "every delivery recorded");
    let foreign: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM settlement_events WHERE external_id NOT LIKE 'legit-%'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(foreign, 0, "nothing of the abuse was recorded");

    // SIGTERM with slow connections open: the process exits within its deadline.
    let held: Vec<_> = (0..scale(20, 50))
        .map(|_| {
            tokio::spawn(slow_body(
                listen.public.clone(),
                60_000,
                0,
                Duration::from_secs(1),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let signalled = Instant::now();
    tests::process::sigterm(&serve);
    // prlimit execs settle, so the child is settle itself.
    let exited = tokio::time::timeout(Duration::from_secs(30), serve.wait()).await;
    let stopped_after = signalled.elapsed();
    assert!(exited.is_ok(), "settle still running 30 s after SIGTERM");
    held.iter().for_each(|h| h.abort());
    let logs = scratch.logs();
    assert!(logs.contains("authentication throttled"), "abuse is logged");
    assert!(
        !logs.contains("guess"),
        "the presented secret is never logged"
    );
    assert!(
        logs.contains("open-file limit"),
        "the limits are logged at start"
    );
    verify(&config, &db.url).await;
    report(
        "abusive_clients",
        json!({"open_files_limit": files, "slowloris": loris, "slowloris_refused_503": loris_refused,
               "idle": idlers, "slow_bodies": slow_bodies, "slow_bodies_408": slow_408, "slow_bodies_503": slow_503,
               "stalled_large_bodies": big_bodies,
               "stalled_large_bodies_408": big_408, "stalled_large_bodies_503": big_503,
               "stalled_large_bodies_reset": big_reset,
               "wrong_tokens_api": api_answers, "wrong_tokens_login": login_answers,
               "left_mid_body": leavers,
               "deliveries": delivered.len(), "deliveries_refused_then_resent": refused_first,
               "rss_before_mib": rss_before / 1024, "rss_peak_mib": rss_peak / 1024,
               "open_files_before": files_before, "open_files_peak": files_peak,
               "stopped_after_sigterm_ms": stopped_after.as_millis(), "verify": "passed"}),
    );
}
