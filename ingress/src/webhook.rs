//! `POST /webhooks/{source}`: verify, adapt, record with its job in one transaction, and answer
//! 2xx only after the commit returned.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use ledger::{Content, Recorded};
use providers::{Acknowledgement, Adapted};
use serde_json::json;
use tracing::{info, instrument, warn};

use crate::budget::Reservation;
use crate::error::IngressError;
use crate::{ClientAddress, Ingress};

/// The span names the source only when it is configured: the path segment is percent-decoded
/// and anyone's (a newline in it would forge a line of a text log).
#[instrument(name = "webhook", skip_all, fields(source = tracing::field::Empty))]
pub(crate) async fn receive(
    State(ingress): State<Ingress>,
    Path(source_name): Path<String>,
    client: Option<Extension<ClientAddress>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let client = client.map(|Extension(ClientAddress(address))| address);
    let started = std::time::Instant::now();
    // Only configured names become label values: an unknown path cannot grow the metrics.
    let source_label = if ingress.sources.get(&source_name).is_some() {
        source_name.clone()
    } else {
        "unknown".into()
    };
    tracing::Span::current().record("source", tracing::field::display(&source_label));
    let response = match handle(&ingress, &source_name, client, &headers, body).await {
        Ok(response) => response,
        Err(error) => {
            info!(outcome = error.code(), "delivery refused");
            if !matches!(error, IngressError::Conflict { .. }) {
                metrics::counter!("settle_deliveries_total", "source" => source_label.clone(), "outcome" => "rejected", "reason" => error.code())
                    .increment(1);
            }
            error.into_response()
        }
    };
    metrics::histogram!("settle_ingress_request_duration_seconds", "source" => source_label)
        .record(started.elapsed().as_secs_f64());
    response
}

async fn handle(
    ingress: &Ingress,
    source_name: &str,
    client: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, IngressError> {
    let source = ingress
        .sources
        .get(source_name)
        .ok_or(IngressError::UnknownSource)?;
    if !is_json(headers) {
        return Err(IngressError::UnsupportedMediaType);
    }
    let limit_bytes = ingress.body_bytes_max;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit_bytes as u64) {
        return Err(IngressError::PayloadTooLarge { limit_bytes });
    }
    // What can be checked before the body is read is checked first: a delivery without a
    // readable signature header, or with a stale timestamp, is refused without reading it.
    let now = chrono::Utc::now().timestamp();
    source
        .receiver
        .precheck(headers, now)
        .map_err(providers::Rejection::from)?;
    let mut reservation = ingress.budget.reservation(client, source_name);
    let body = read_body(body, ingress, &mut reservation).await?;
    let acknowledgement = source.receiver.acknowledgement();
    let events = match source.receiver.receive(headers, &body, now)? {
        Adapted::Ignored(why) => {
            info!(
                outcome = "ignored",
                reason = why.as_str(),
                "delivery acknowledged"
            );
            heard_from(&source.name);
            metrics::counter!("settle_deliveries_total", "source" => source.name.to_string(), "outcome" => "ignored", "reason" => why.as_str())
                .increment(1);
            if let Acknowledgement::Fixed { content_type, body } = acknowledgement {
                return Ok(fixed(content_type, body));
            }
            return Ok(Json(json!({"status": "ignored", "reason": why.as_str()})).into_response());
        }
        Adapted::Events(events) => std::sync::Arc::new(events),
    };
    let outcomes = ingress.recorder.record(&events).await.map_err(|error| {
        warn!(error = %error, transient = error.is_transient(), "recording failed");
        IngressError::Unavailable
    })?;
    for (event, outcome) in events.iter().zip(&outcomes) {
        let label = match (outcome, &event.content) {
            (Recorded::New(_), Content::Invalid(_)) => "invalid",
            _ => label(outcome),
        };
        info!(external_id = %event.external_id, event_id = %outcome.event_id(), outcome = label, "delivery recorded");
        metrics::counter!("settle_deliveries_total", "source" => source.name.to_string(), "outcome" => label, "reason" => "")
            .increment(1);
    }
    heard_from(&source.name);
    if let Acknowledgement::Fixed { content_type, body } = acknowledgement {
        // The delivery is durably kept (events or conflict rows): a conflict surfaces on the
        // ops side.
        return Ok(fixed(content_type, body));
    }
    match outcomes.as_slice() {
        [Recorded::New(event_id)] => {
            Ok(Json(json!({"status": "recorded", "event_id": event_id})).into_response())
        }
        [Recorded::Duplicate(event_id)] => {
            Ok(Json(json!({"status": "duplicate", "event_id": event_id})).into_response())
        }
        [Recorded::Conflict { event_id, .. }] => Err(IngressError::Conflict {
            event_id: *event_id,
        }),
        _ => Err(IngressError::Unavailable),
    }
}

/// Reads the whole body: at most `body_bytes_max` of it, within `body_read_timeout`, at
/// `body_min_bytes_per_sec` on average after its first second, each chunk reserved in the body
/// budget as it arrives. A body over the limit is `PayloadTooLarge`; one too slow or too late
/// `BodyTooSlow` / `BodyTimeout`; a chunk the budget has no room for `Busy`; a connection that
/// closed or failed mid-body `ClientAborted` (the client is gone, whatever the answer).
async fn read_body(
    body: Body,
    ingress: &Ingress,
    reservation: &mut Reservation,
) -> Result<axum::body::Bytes, IngressError> {
    let limit_bytes = ingress.body_bytes_max;
    let timeout = ingress.body_read_timeout;
    let min_rate = ingress.body_min_bytes_per_sec.max(1);
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let mut data = body.into_data_stream();
    let mut read = Vec::new();
    loop {
        // The next chunk must come by the time the average rate would fall below the minimum.
        let received = read.len() as u64;
        let due = started
            + Duration::from_millis(RATE_GRACE_MS + received.saturating_add(1) * 1000 / min_rate);
        let wait = due.min(deadline);
        let chunk = match tokio::time::timeout_at(wait, data.next()).await {
            Err(_) if wait == deadline => {
                return Err(IngressError::BodyTimeout {
                    timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                });
            }
            Err(_) => {
                return Err(IngressError::BodyTooSlow {
                    min_bytes_per_sec: min_rate,
                });
            }
            Ok(None) => return Ok(read.into()),
            Ok(Some(Err(_))) => return Err(IngressError::ClientAborted),
            Ok(Some(Ok(chunk))) => chunk,
        };
        if read.len() + chunk.len() > limit_bytes {
            return Err(IngressError::PayloadTooLarge { limit_bytes });
        }
        reservation
            .grow(chunk.len())
            .map_err(|_| IngressError::Busy)?;
        read.extend_from_slice(&chunk);
    }
}

/// How long a body may take before its average rate is held to the minimum (a connection's
/// first bytes may wait on the network).
const RATE_GRACE_MS: u64 = 1_000;

/// The one answer of a provider that expects the same for every delivery kept.
fn fixed(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn label(outcome: &Recorded) -> &'static str {
    match outcome {
        Recorded::New(_) => "recorded",
        Recorded::Duplicate(_) => "duplicate",
        Recorded::Conflict { .. } => "conflict",
    }
}

/// `application/json`, with or without parameters such as `charset=utf-8`.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// An authentic delivery from `source` arrived now (or this process started listening for it):
/// `settle_source_last_delivery_timestamp_seconds`, which the shipped alert on a silent source
/// compares with `settle_source_expected_within_seconds`.
pub(crate) fn heard_from(source: &ledger::SourceName) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    metrics::gauge!("settle_source_last_delivery_timestamp_seconds", "source" => source.to_string())
        .set(now);
}
