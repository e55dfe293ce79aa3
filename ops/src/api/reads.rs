//! `/api/events` (one, its detail, by key, the search, and erasing its payload) and
//! `/api/conflicts`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use ledger::review::{
    ConflictDetail, ConflictView, Decided, Decision, EventDetail, EventFilter, EventSummary,
    EventView, Page, PageRequest,
};
use ledger::{EventId, Store};
use serde::Deserialize;

use super::dead_letters::{ReasonBody, body};
use utoipa::IntoParams;

use super::{Actor, ApiError, ErrorBody, Reader};

/// One event as stored.
#[utoipa::path(get, path = "/api/events/{id}", tag = "events", params(("id" = i64, Path)),
    responses((status = 200, body = EventView), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
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

/// The event with its payload's erasure, attempts, dead letters, conflicting deliveries, entries
/// and audit trail.
#[utoipa::path(get, path = "/api/events/{id}/detail", tag = "events", params(("id" = i64, Path)),
    responses((status = 200, body = EventDetail), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn event_detail(
    Reader(_): Reader,
    State(store): State<Store>,
    Path(id): Path<i64>,
) -> Result<Json<EventDetail>, ApiError> {
    store
        .event_detail(EventId::new(id))
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("event"))
}

/// Erase the event's payload (and its resolved conflicting deliveries') on request: key,
/// fingerprint, facts, entries and audit stay. A reason is required. Refused (409 `in_use`) while
/// the event is in flight, in an open dead letter or in an open conflict. Idempotent.
#[utoipa::path(post, path = "/api/events/{id}/erase-payload", tag = "events", params(("id" = i64, Path)),
    request_body = ReasonBody,
    responses((status = 200, body = Decided), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn erase_payload(
    Actor(caller): Actor,
    State(store): State<Store>,
    Path(id): Path<i64>,
    bytes: Bytes,
) -> Result<Json<Decided>, ApiError> {
    let ReasonBody { reason } = body(&bytes)?;
    let decision = Decision {
        actor: caller.name,
        reason,
    };
    Ok(Json(store.erase_payload(id, &decision).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct EventKey {
    source: String,
    external_id: String,
}

/// The event with a natural key.
#[utoipa::path(get, path = "/api/events", tag = "events", params(EventKey),
    responses((status = 200, body = EventView), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
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

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct SearchPage {
    /// `next_cursor` of the previous page.
    cursor: Option<i64>,
    /// At most this many events (default 50).
    limit: Option<u32>,
}

/// Events matching every filter given, newest first, paged by `cursor`.
#[utoipa::path(get, path = "/api/events/search", tag = "events", params(EventFilter, SearchPage),
    responses((status = 200, body = Page<EventSummary>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn search_events(
    Reader(_): Reader,
    State(store): State<Store>,
    filter: Result<Query<EventFilter>, QueryRejection>,
    page: Result<Query<SearchPage>, QueryRejection>,
) -> Result<Json<Page<EventSummary>>, ApiError> {
    let Query(filter) = filter.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    let Query(page) = page.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    filter.check().map_err(ApiError::BadRequest)?;
    Ok(Json(
        store
            .search_events(&filter, PageRequest::new(page.cursor, page.limit))
            .await?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ConflictParams {
    /// open (default), resolved or all.
    state: Option<String>,
    cursor: Option<i64>,
    limit: Option<u32>,
}

/// Conflicting deliveries, newest first.
#[utoipa::path(get, path = "/api/conflicts", tag = "conflicts", params(ConflictParams),
    responses((status = 200, body = Page<ConflictView>), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
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

/// A conflict beside the original event.
#[utoipa::path(get, path = "/api/conflicts/{id}", tag = "conflicts", params(("id" = i64, Path)),
    responses((status = 200, body = ConflictDetail), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
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

/// Acknowledge a conflict; the original stays authoritative. Idempotent.
#[utoipa::path(post, path = "/api/conflicts/{id}/resolve", tag = "conflicts", params(("id" = i64, Path)),
    request_body = ReasonBody,
    responses((status = 200, body = Decided), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
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
