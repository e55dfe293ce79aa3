//! The operator listener answers only the names it is reached by: a browser page on another
//! site whose name is made to resolve to this address (DNS rebinding) sends its own name as
//! `Host`, and is refused before any route (`/metrics`, the API's documents, the dashboard) runs.
//! Allowed: loopback names (`localhost`, `*.localhost`), any IP address (a rebinding name is
//! never one), and the names configured in `http.ops_hosts`. A request with no `Host` (HTTP/1.0,
//! a script) is not a browser's and passes.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::http::header::HOST;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The names, beyond loopback names and addresses, the operator listener answers.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts(Arc<Vec<String>>);

impl AllowedHosts {
    pub fn new(names: &[String]) -> Self {
        Self(Arc::new(
            names.iter().map(|name| name.to_ascii_lowercase()).collect(),
        ))
    }

    /// Whether a `Host` value (a name or address, with or without a port) is answered.
    pub fn allows(&self, host: &str) -> bool {
        let name = name_of(host).to_ascii_lowercase();
        name == "localhost"
            || name.ends_with(".localhost")
            || name.parse::<IpAddr>().is_ok()
            || self.0.contains(&name)
    }
}

/// The name or address of a `Host` value, without its port (`[::1]:9090` -> `::1`).
fn name_of(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(address, _)| address);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Refuses a request whose `Host` is not allowed: 421, counted.
pub async fn check(allowed: AllowedHosts, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(HOST)
        .map(|value| value.to_str().unwrap_or("\u{fffd}"));
    match host {
        Some(host) if !allowed.allows(host) => {
            metrics::counter!("settle_http_misdirected_total").increment(1);
            (
                StatusCode::MISDIRECTED_REQUEST,
                axum::Json(serde_json::json!({
                    "error": "misdirected_request",
                    "message": "this listener does not answer that host name (http.ops_hosts)",
                })),
            )
                .into_response()
        }
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_addresses_and_configured_names_only() {
        let allowed = AllowedHosts::new(&["Settle.Example.com".to_owned()]);
        for host in [
            "localhost",
            "localhost:9090",
            "app.localhost:1",
            "127.0.0.1:9090",
            "10.0.0.7",
            "[::1]:9090",
            "[::1]",
            "settle.example.com",
            "SETTLE.EXAMPLE.COM:443",
        ] {
            assert!(allowed.allows(host), "{host}");
        }
        for host in [
            "rebind.attacker.example",
            "rebind.attacker.example:9090",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "example.com",
            "",
        ] {
            assert!(!allowed.allows(host), "{host}");
        }
    }
}
