//! `/api/events` and `/api/conflicts`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use jobs::review::{ConflictDetail, ConflictView, Decided, Decision, EventView, Page, PageRequest};
use jobs::{EventId, Store};
use serde::Deserialize;

use super::dead_letters::{ReasonBody, body};
use super::{Actor, ApiError, Reader};

pub(super) async fn event(
    Reader(_): Reader,
    State(store): State<Store>,
    Path(id): Path<i64>,
) -> Result<Json<EventView>, ApiError> {
    store
        .event(EventId::new(id))
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("event"))
}

#[derive(Debug, Deserialize)]
pub(super) struct EventKey {
    source: String,
    external_id: String,
}

pub(super) async fn find_event(
    Reader(_): Reader,
    State(store): State<Store>,
    key: Result<Query<EventKey>, QueryRejection>,
) -> Result<Json<EventView>, ApiError> {
    let Query(key) = key.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    store
        .event_by_key(&key.source, &key.external_id)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("event"))
}

#[derive(Debug, Deserialize)]
pub(super) struct ConflictParams {
    state: Option<String>,
    cursor: Option<i64>,
    limit: Option<u32>,
}

pub(super) async fn conflicts(
    Reader(_): Reader,
    State(store): State<Store>,
    params: Result<Query<ConflictParams>, QueryRejection>,
) -> Result<Json<Page<ConflictView>>, ApiError> {
    let Query(params) = params.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    let state = match params.state.as_deref() {
        None => Some("open"),
        Some("all") => None,
        Some(state @ ("open" | "resolved")) => Some(state),
        Some(_) => {
            return Err(ApiError::BadRequest(
                "state must be open, resolved or all".into(),
            ));
        }
    };
    Ok(Json(
        store
            .conflicts(state, PageRequest::new(params.cursor, params.limit))
            .await?,
    ))
}

pub(super) async fn conflict(
    Reader(_): Reader,
    State(store): State<Store>,
    Path(id): Path<i64>,
) -> Result<Json<ConflictDetail>, ApiError> {
    store
        .conflict(id)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("conflict"))
}

pub(super) async fn resolve_conflict(
    Actor(caller): Actor,
    State(store): State<Store>,
    Path(id): Path<i64>,
    bytes: Bytes,
) -> Result<Json<Decided>, ApiError> {
    let ReasonBody { reason } = body(&bytes)?;
    Ok(Json(
        store
            .resolve_conflict(
                id,
                &Decision {
                    actor: caller.name,
                    reason,
                },
            )
            .await?,
    ))
}
