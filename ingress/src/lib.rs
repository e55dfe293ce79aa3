//! settle's webhook ingress: `POST /webhooks/{source}`. Each configured source has its
//! provider's receiving half (`providers::Receive`): the signature is checked on the raw bytes
//! before anything is parsed, the payload is read into events, and the events are recorded with
//! their jobs in one transaction. No 2xx leaves before the commit returned.

mod budget;
mod error;
mod recorder;
mod source;
mod webhook;

use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use ledger::Store;
use recorder::Recorder;

pub use error::IngressError;
pub use recorder::IngressSettings;
pub use source::{Source, SourceError, Sources};

/// The default limit on a webhook body.
pub const BODY_BYTES_MAX_DEFAULT: usize = 256 * 1024;

/// The ingress role's state: where to record, and which sources exist.
#[derive(Clone, Debug)]
pub struct Ingress {
    recorder: Arc<Recorder>,
    sources: Arc<Sources>,
    body_bytes_max: usize,
    body_read_timeout: std::time::Duration,
    body_min_bytes_per_sec: u64,
    budget: budget::BodyBudget,
}

/// The address a request came from (the peer, or a trusted proxy's `X-Forwarded-For`), as the
/// server tells each request: a client's share of the body budget is kept by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddress(pub std::net::IpAddr);

impl Ingress {
    /// Spawns the recording group loop, so it must be called on a tokio runtime.
    pub fn new(
        store: Store,
        sources: Sources,
        body_bytes_max: usize,
        settings: &IngressSettings,
    ) -> Self {
        for source in sources.iter() {
            webhook::heard_from(&source.name);
            if let Some(secs) = source.expected_within_secs {
                metrics::gauge!("settle_source_expected_within_seconds", "source" => source.name.to_string())
                    .set(secs as f64);
            }
        }
        Self {
            recorder: Arc::new(Recorder::spawn(store, settings)),
            sources: Arc::new(sources),
            body_bytes_max,
            body_read_timeout: std::time::Duration::from_millis(settings.body_read_timeout_ms),
            body_min_bytes_per_sec: settings.body_min_bytes_per_sec,
            budget: budget::BodyBudget::new(budget::Limits {
                total: settings.body_budget_bytes,
                client: settings.client_budget_bytes,
                source: settings.source_budget_bytes,
            }),
        }
    }

    /// `POST /webhooks/{source}`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/webhooks/{source}", post(webhook::receive))
            .with_state(self)
    }
}
