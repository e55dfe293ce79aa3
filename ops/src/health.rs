//! `GET /healthz` (the process is up) and `GET /readyz` (the database is reachable and every
//! migration this build knows is applied).

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jobs::Store;
use serde_json::json;

pub fn router(store: Store) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(store)
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(store): State<Store>) -> Response {
    match store.ready().await {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(error) => {
            let reason = if error.is_transient() {
                "database_unreachable"
            } else {
                "database_not_ready"
            };
            tracing::warn!(%error, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "not_ready", "error": reason})),
            )
                .into_response()
        }
    }
}
