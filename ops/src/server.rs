//! The HTTP server at settle's public edge: hyper's HTTP/1 connections (hyper-util's tokio
//! runtime pieces), each in a task of its own, with
//! - a header-read timeout (hyper's timer, which runs from the moment a connection waits for a
//!   request head: a slow head and an idle keep-alive connection are closed alike);
//! - a cap on open connections, below the process' open-file limit (raised to its hard limit
//!   at start): a connection beyond it is answered 503 with `Retry-After` and closed;
//! - accept errors logged and counted, with a pause, rather than retried in a tight loop;
//! - each request told its client's address ([`ClientAddress`]);
//! - graceful shutdown with a deadline: no new connections, in-flight requests finish, and after
//!   `shutdown_timeout_secs` whatever is left is closed, so the process always exits.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::{info, warn};

/// The `[http]` settings. Every limit carries its unit in its name.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// A connection must send a whole request head within this long of waiting for one (also
    /// how long an idle keep-alive connection stays open).
    pub header_read_timeout_ms: u64,
    /// A request to `/api` or `/dashboard` gets this long in all, then 408.
    pub request_timeout_ms: u64,
    /// Connections open at once; 0: the open-file limit less [`FILES_RESERVED`].
    pub connections_max: usize,
    /// On SIGTERM: how long in-flight requests get to finish before their connections close.
    pub shutdown_timeout_secs: u64,
    /// Wrong API tokens and dashboard login tokens allowed per client address per minute (in a
    /// burst of as many); beyond them, every wrong one from that address gets 429 until it
    /// recovers (a request with no token costs nothing, a valid token always passes).
    pub auth_failures_per_minute: u32,
    /// Take the client's address from the last `X-Forwarded-For` entry (set by a proxy in front
    /// of settle) instead of the connection's peer. Only behind a proxy that sets it.
    pub trust_forwarded_for: bool,
    /// Host names the operator listener answers besides loopback names and IP addresses (the
    /// name operators reach the dashboard by); any other `Host` is answered 421.
    pub ops_hosts: Vec<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            connections_max: 0,
            shutdown_timeout_secs: 30,
            auth_failures_per_minute: 10,
            trust_forwarded_for: false,
            ops_hosts: Vec::new(),
        }
    }
}

impl HttpSettings {
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
            (
                "auth_failures_per_minute",
                u64::from(self.auth_failures_per_minute),
            ),
        ] {
            if value == 0 {
                return Err(format!("http.{name} must be positive"));
            }
        }
        Ok(())
    }
}

/// File descriptors kept free for everything but client connections: the database pool, log
/// files, the listener, outbound calls.
pub const FILES_RESERVED: u64 = 256;

pub use ingress::ClientAddress;

/// The connection cap for this process: the configured one, else the open-file limit (its soft
/// limit raised to the hard one first) less [`FILES_RESERVED`]. Logs both limits.
pub fn connections_max(settings: &HttpSettings) -> usize {
    let (soft_before, hard) = rlimit::Resource::NOFILE.get().unwrap_or((1024, 1024));
    let soft = rlimit::increase_nofile_limit(hard).unwrap_or(soft_before);
    let auto = usize::try_from(soft.saturating_sub(FILES_RESERVED).max(64)).unwrap_or(64);
    let cap = match settings.connections_max {
        0 => auto,
        set => set.min(auto),
    };
    info!(
        open_files_soft = soft,
        open_files_soft_before = soft_before,
        open_files_hard = hard,
        connections_max = cap,
        "open-file limit"
    );
    metrics::gauge!("settle_http_connections_max").set(cap as f64);
    cap
}

/// Serves `router` on `listener`, at most `cap` connections at once, until `shutdown`, then
/// drains as described above.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &HttpSettings,
    cap: usize,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(cap));
    let closing = CancellationToken::new();
    let mut connections = JoinSet::new();
    let header_timeout = Duration::from_millis(settings.header_read_timeout_ms);
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                accept_failed(&error).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refuse(&stream);
            continue;
        };
        metrics::gauge!("settle_http_connections_open").increment(1.0);
        let connection = Connection {
            router: router.clone(),
            peer,
            trust_forwarded_for: settings.trust_forwarded_for,
            header_timeout,
        };
        let closing = closing.clone();
        connections.spawn(async move {
            connection.run(stream, closing).await;
            drop(permit);
            metrics::gauge!("settle_http_connections_open").decrement(1.0);
        });
    }
    drop(listener);
    let deadline = Duration::from_secs(settings.shutdown_timeout_secs);
    let open = connections.len();
    info!(
        connections = open,
        deadline_secs = settings.shutdown_timeout_secs,
        "no longer accepting; finishing in-flight requests"
    );
    closing.cancel();
    let drained = tokio::time::timeout(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            connections = connections.len(),
            "shutdown deadline reached; closing the connections left"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

/// An accept that failed (out of file descriptors, the kernel's own limits): logged and
/// counted, then a pause so the loop does not spin while the cause lasts.
async fn accept_failed(error: &std::io::Error) {
    let kind = match error.raw_os_error() {
        Some(24) => "too_many_open_files",
        Some(23) => "file_table_full",
        Some(105) | Some(12) => "out_of_memory",
        _ => "other",
    };
    metrics::counter!("settle_http_accept_errors_total", "kind" => kind).increment(1);
    warn!(%error, kind, "accepting a connection failed; pausing");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Over the connection cap: an immediate 503 (if the socket takes it at once) and close.
fn refuse(stream: &TcpStream) {
    const BODY: &str = r#"{"error":"busy","message":"too many open connections; retry later"}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = stream.try_write(response.as_bytes());
    metrics::counter!("settle_http_connections_refused_total").increment(1);
}

/// One client connection.
struct Connection {
    router: Router,
    peer: SocketAddr,
    trust_forwarded_for: bool,
    header_timeout: Duration,
}

impl Connection {
    async fn run(self, stream: TcpStream, closing: CancellationToken) {
        let Connection {
            router,
            peer,
            trust_forwarded_for,
            header_timeout,
        } = self;
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let client = client_address(&request, peer.ip(), trust_forwarded_for);
            request.extensions_mut().insert(ClientAddress(client));
            router.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            _ = closing.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.as_mut().await
            }
        };
        if let Err(error) = result {
            let reason = if error.is_timeout() {
                "header_timeout"
            } else if error.is_incomplete_message() {
                "client_closed"
            } else {
                "error"
            };
            metrics::counter!("settle_http_connections_closed_total", "reason" => reason)
                .increment(1);
        }
    }
}

/// The peer, or with `trust_forwarded_for` the last `X-Forwarded-For` entry (the one the
/// trusted proxy added).
fn client_address<B>(request: &Request<B>, peer: IpAddr, trust_forwarded_for: bool) -> IpAddr {
    if !trust_forwarded_for {
        return peer;
    }
    request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|entry| entry.trim().parse::<IpAddr>().ok())
        .next_back()
        .unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_says() {
        let peer: IpAddr = "10.0.0.9".parse().expect("ip");
        let request = Request::builder()
            .header("x-forwarded-for", "203.0.113.7, 198.51.100.2")
            .body(())
            .expect("request");
        assert_eq!(client_address(&request, peer, false), peer);
        assert_eq!(
            client_address(&request, peer, true),
            "198.51.100.2".parse::<IpAddr>().expect("ip")
        );
        let plain = Request::builder().body(()).expect("request");
        assert_eq!(client_address(&plain, peer, true), peer);
    }
}
