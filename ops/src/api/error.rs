//! The API's one error type: a typed JSON body, nothing internal.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ledger::StoreError;
use ledger::review::DecisionError;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("this token's role may read but not act")]
    Forbidden,
    #[error("no such {0}")]
    NotFound(&'static str),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    AlreadyDecided(String),
    #[error("{0}")]
    InUse(String),
    #[error("the database is unavailable; retry later")]
    Unavailable,
    #[error("internal error")]
    Internal,
    #[error("the provider: {0}")]
    Provider(String),
    #[error("too many failed attempts from this address; retry after {} s", .0.retry_after_secs())]
    Throttled(crate::abuse::Throttled),
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::AlreadyDecided(_) => (StatusCode::CONFLICT, "already_decided"),
            ApiError::InUse(_) => (StatusCode::CONFLICT, "in_use"),
            ApiError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::Provider(_) => (StatusCode::BAD_GATEWAY, "provider"),
            ApiError::Throttled(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_failed_attempts"),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        tracing::warn!(%error, "store error");
        match error {
            StoreError::InvalidTransition { .. } => ApiError::AlreadyDecided(error.to_string()),
            error if error.is_transient() => ApiError::Unavailable,
            _ => ApiError::Internal,
        }
    }
}

impl From<DecisionError> for ApiError {
    fn from(error: DecisionError) -> Self {
        match error {
            DecisionError::NotFound(what) => ApiError::NotFound(what),
            DecisionError::AlreadyDecided(detail) => ApiError::AlreadyDecided(detail),
            DecisionError::InUse(detail) => ApiError::InUse(detail),
            DecisionError::Invalid(detail) => ApiError::BadRequest(detail),
            DecisionError::ReasonRequired => {
                ApiError::BadRequest("a non-empty reason is required".into())
            }
            DecisionError::Store(error) => error.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut response = (
            status,
            Json(json!({"error": code, "message": self.to_string()})),
        )
            .into_response();
        if let ApiError::Throttled(throttled) = self
            && let Ok(value) = throttled.retry_after_secs().to_string().parse()
        {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, value);
        }
        response
    }
}
