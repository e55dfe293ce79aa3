//! `/api/sources`: the configured sources with the pause in force on each, and pausing or
//! resuming one (ops, with a reason). A paused source's deliveries are still verified, recorded
//! and acknowledged; its events wait to be posted until it is resumed.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use ledger::Store;
use ledger::review::Decision;
use ledger::store::{PauseChange, SourcePause};
use serde::Serialize;
use utoipa::ToSchema;

use super::dead_letters::{ReasonBody, body};
use super::{Actor, ApiError, ApiState, ErrorBody, Reader};

/// The names of the configured sources.
#[derive(Clone, Debug, Default)]
pub struct SourceNames(pub Arc<Vec<String>>);

impl FromRef<ApiState> for SourceNames {
    fn from_ref(state: &ApiState) -> SourceNames {
        state.sources.clone()
    }
}

impl SourceNames {
    fn check(&self, name: &str) -> Result<(), ApiError> {
        if self.0.iter().any(|s| s == name) {
            Ok(())
        } else {
            Err(ApiError::NotFound("source"))
        }
    }
}

/// A configured source and the pause in force on it, if any.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SourceState {
    name: String,
    paused: Option<SourcePause>,
}

/// Every configured source, with the pause in force on it.
#[utoipa::path(get, path = "/api/sources", tag = "sources",
    responses((status = 200, body = Vec<SourceState>), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list(
    Reader(_): Reader,
    State(store): State<Store>,
    State(names): State<SourceNames>,
) -> Result<Json<Vec<SourceState>>, ApiError> {
    let in_force = store.source_pauses(true, 10_000).await?;
    Ok(Json(
        names
            .0
            .iter()
            .map(|name| SourceState {
                name: name.clone(),
                paused: in_force.iter().find(|p| &p.source == name).cloned(),
            })
            .collect(),
    ))
}

/// Pause the source: deliveries are still recorded and acknowledged, nothing of it posts until
/// it is resumed. A reason is required. Idempotent.
#[utoipa::path(post, path = "/api/sources/{name}/pause", tag = "sources", params(("name" = String, Path)),
    request_body = ReasonBody,
    responses((status = 200, body = PauseChange), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn pause(
    Actor(caller): Actor,
    State(store): State<Store>,
    State(names): State<SourceNames>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<PauseChange>, ApiError> {
    names.check(&name)?;
    let ReasonBody { reason } = body(&bytes)?;
    let decision = Decision {
        actor: caller.name,
        reason,
    };
    Ok(Json(store.pause_source(&name, &decision).await?))
}

/// Resume the source: its waiting events are due at once. A reason is required. Idempotent.
#[utoipa::path(post, path = "/api/sources/{name}/resume", tag = "sources", params(("name" = String, Path)),
    request_body = ReasonBody,
    responses((status = 200, body = PauseChange), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn resume(
    Actor(caller): Actor,
    State(store): State<Store>,
    State(names): State<SourceNames>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<PauseChange>, ApiError> {
    names.check(&name)?;
    let ReasonBody { reason } = body(&bytes)?;
    let decision = Decision {
        actor: caller.name,
        reason,
    };
    Ok(Json(store.resume_source(&name, &decision).await?))
}
