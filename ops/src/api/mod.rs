//! The ops/finance HTTP API under `/api/`: bearer tokens, two roles (finance reads, ops reads and
//! acts), cursor pagination, typed JSON errors.

mod dead_letters;
mod error;
mod reads;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::routing::{get, post};
use jobs::Store;

pub use error::ApiError;

use crate::auth::{Caller, Tokens};

/// What every API handler gets.
#[derive(Clone, Debug)]
pub struct ApiState {
    pub store: Store,
    pub tokens: Arc<Tokens>,
}

impl FromRef<ApiState> for Store {
    fn from_ref(state: &ApiState) -> Store {
        state.store.clone()
    }
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/api/dead-letters", get(dead_letters::list))
        .route(
            "/api/dead-letters/requeue",
            post(dead_letters::bulk_requeue),
        )
        .route(
            "/api/dead-letters/discard",
            post(dead_letters::bulk_discard),
        )
        .route("/api/dead-letters/{id}", get(dead_letters::show))
        .route(
            "/api/dead-letters/{id}/requeue",
            post(dead_letters::requeue),
        )
        .route(
            "/api/dead-letters/{id}/discard",
            post(dead_letters::discard),
        )
        .route("/api/events", get(reads::find_event))
        .route("/api/events/{id}", get(reads::event))
        .route("/api/conflicts", get(reads::conflicts))
        .route("/api/conflicts/{id}", get(reads::conflict))
        .route("/api/conflicts/{id}/resolve", post(reads::resolve_conflict))
        .with_state(state)
}

/// A caller with a valid token (any role).
#[derive(Debug)]
pub struct Reader(pub Caller);

/// A caller whose role may act.
#[derive(Debug)]
pub struct Actor(pub Caller);

impl FromRequestParts<ApiState> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState,
    ) -> Result<Self, Self::Rejection> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or(ApiError::Unauthorized)?;
        state
            .tokens
            .caller(token.trim())
            .map(Reader)
            .ok_or(ApiError::Unauthorized)
    }
}

impl FromRequestParts<ApiState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState,
    ) -> Result<Self, Self::Rejection> {
        let Reader(caller) = Reader::from_request_parts(parts, state).await?;
        if caller.role.may_act() {
            Ok(Actor(caller))
        } else {
            Err(ApiError::Forbidden)
        }
    }
}
