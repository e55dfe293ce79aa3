//! The ingress' one error type: every 4xx/5xx body is typed JSON, and says nothing internal.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ledger::EventId;
use serde_json::json;

use providers::Rejection;

/// Seconds a sender should wait before retrying after a 503.
const RETRY_AFTER_SECS: &str = "5";

/// Why a delivery got no 2xx.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    #[error("no webhook source is configured under this name")]
    UnknownSource,
    #[error("content type must be application/json")]
    UnsupportedMediaType,
    #[error("body exceeds {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: usize },
    #[error("{0}")]
    Rejected(#[from] Rejection),
    #[error("this event id was already received with different financial facts")]
    Conflict { event_id: EventId },
    #[error("the delivery could not be stored; retry later")]
    Unavailable,
    #[error("too many deliveries are being read at once; retry later")]
    Busy,
    #[error("the body did not arrive within {timeout_ms} ms")]
    BodyTimeout { timeout_ms: u64 },
    #[error("the body arrived slower than {min_bytes_per_sec} bytes a second")]
    BodyTooSlow { min_bytes_per_sec: u64 },
    #[error("the client closed the connection before its body arrived")]
    ClientAborted,
}

impl IngressError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            IngressError::UnknownSource => (StatusCode::NOT_FOUND, "unknown_source"),
            IngressError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            IngressError::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            IngressError::Rejected(Rejection::Signature(error)) => {
                (StatusCode::UNAUTHORIZED, error.code())
            }
            IngressError::Rejected(Rejection::Unparseable(_)) => {
                (StatusCode::BAD_REQUEST, "unparseable_payload")
            }
            IngressError::Conflict { .. } => (StatusCode::CONFLICT, "event_conflict"),
            IngressError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            IngressError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            IngressError::BodyTimeout { .. } | IngressError::BodyTooSlow { .. } => {
                (StatusCode::REQUEST_TIMEOUT, "request_timeout")
            }
            IngressError::ClientAborted => (StatusCode::BAD_REQUEST, "client_aborted"),
        }
    }

    /// A short label for logs and metrics.
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }
}

impl IntoResponse for IngressError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut body = json!({"error": code, "message": self.to_string()});
        if let IngressError::Conflict { event_id } = self {
            body["event_id"] = json!(event_id);
        }
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        response
    }
}
