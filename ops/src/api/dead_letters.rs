//! `/api/dead-letters`: list, show, requeue, discard, and their bulk forms.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use ledger::Store;
use ledger::job::ErrorClass;
use ledger::review::{
    DeadLetterDetail, DeadLetterFilter, DeadLetterState, DeadLetterSummary, Decided, Decision,
    Page, PageRequest,
};
use ledger::state::StateMachine;
use serde::Deserialize;

use utoipa::{IntoParams, ToSchema};

use super::{Actor, ApiError, ErrorBody, Reader};
use crate::actions::{self, Action, Report, parse_time};

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListParams {
    /// open (default), requeued, discarded or all.
    state: Option<String>,
    source: Option<String>,
    kind: Option<String>,
    error_class: Option<String>,
    error_code: Option<String>,
    /// Date (YYYY-MM-DD) or RFC 3339 time.
    abandoned_before: Option<String>,
    /// Date (YYYY-MM-DD) or RFC 3339 time.
    abandoned_after: Option<String>,
    /// `next_cursor` of the previous page.
    cursor: Option<i64>,
    /// At most this many (default 50, at most 500).
    limit: Option<u32>,
}

impl ListParams {
    /// `state` defaults to `open`; `all` lists every state.
    fn filter(&self) -> Result<DeadLetterFilter, ApiError> {
        let state = match self.state.as_deref() {
            None => Some(DeadLetterState::Open),
            Some("all") => None,
            Some(text) => Some(
                DeadLetterState::parse(text)
                    .ok_or_else(|| bad("state must be open, requeued, discarded or all"))?,
            ),
        };
        let error_class = self
            .error_class
            .as_deref()
            .map(|text| {
                ErrorClass::parse(text)
                    .ok_or_else(|| bad("error_class must be permanent or exhausted"))
            })
            .transpose()?;
        let time = |text: &Option<String>| {
            text.as_deref()
                .map(parse_time)
                .transpose()
                .map_err(ApiError::BadRequest)
        };
        Ok(DeadLetterFilter {
            state,
            source: self.source.clone(),
            kind: self.kind.clone(),
            error_class,
            error_code: self.error_code.clone(),
            abandoned_before: time(&self.abandoned_before)?,
            abandoned_after: time(&self.abandoned_after)?,
        })
    }
}

fn bad(message: &str) -> ApiError {
    ApiError::BadRequest(message.into())
}

pub(super) fn body<T: serde::de::DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|error| ApiError::BadRequest(format!("invalid JSON body: {error}")))
}

/// Dead letters matching the filters, newest first.
#[utoipa::path(get, path = "/api/dead-letters", tag = "dead letters", params(ListParams),
    responses((status = 200, body = Page<DeadLetterSummary>), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list(
    Reader(_): Reader,
    State(store): State<Store>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<Page<DeadLetterSummary>>, ApiError> {
    let Query(params) = params.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    let page = PageRequest::new(params.cursor, params.limit);
    Ok(Json(store.dead_letters(&params.filter()?, page).await?))
}

/// One dead letter: its event, every attempt, its audit trail.
#[utoipa::path(get, path = "/api/dead-letters/{id}", tag = "dead letters", params(("id" = i64, Path)),
    responses((status = 200, body = DeadLetterDetail), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn show(
    Reader(_): Reader,
    State(store): State<Store>,
    Path(id): Path<i64>,
) -> Result<Json<DeadLetterDetail>, ApiError> {
    store
        .dead_letter(id)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("dead letter"))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReasonBody {
    #[serde(default)]
    pub(super) reason: String,
}

/// Give the event a fresh job with fresh attempts. Idempotent.
#[utoipa::path(post, path = "/api/dead-letters/{id}/requeue", tag = "dead letters", params(("id" = i64, Path)),
    request_body = ReasonBody,
    responses((status = 200, body = Decided), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn requeue(
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
    Ok(Json(store.requeue_dead_letter(id, &decision).await?))
}

/// Close it for good: the event never posts. A reason is required. Idempotent.
#[utoipa::path(post, path = "/api/dead-letters/{id}/discard", tag = "dead letters", params(("id" = i64, Path)),
    request_body = ReasonBody,
    responses((status = 200, body = Decided), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn discard(
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
    Ok(Json(store.discard_dead_letter(id, &decision).await?))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkBody {
    #[serde(default)]
    filter: DeadLetterFilter,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    dry_run: bool,
    limit: Option<u32>,
}

/// Requeue every open dead letter matching the filter (per item; `dry_run` changes nothing).
#[utoipa::path(post, path = "/api/dead-letters/requeue", tag = "dead letters", request_body = BulkBody,
    responses((status = 200, body = Report), (status = 403, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn bulk_requeue(
    actor: Actor,
    state: State<Store>,
    bytes: Bytes,
) -> Result<Json<Report>, ApiError> {
    bulk(actor, state, bytes, Action::Requeue).await
}

/// Discard every open dead letter matching the filter (per item; `dry_run` changes nothing).
#[utoipa::path(post, path = "/api/dead-letters/discard", tag = "dead letters", request_body = BulkBody,
    responses((status = 200, body = Report), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn bulk_discard(
    actor: Actor,
    state: State<Store>,
    bytes: Bytes,
) -> Result<Json<Report>, ApiError> {
    bulk(actor, state, bytes, Action::Discard).await
}

async fn bulk(
    Actor(caller): Actor,
    State(store): State<Store>,
    bytes: Bytes,
    action: Action,
) -> Result<Json<Report>, ApiError> {
    let request: BulkBody = body(&bytes)?;
    if action == Action::Discard && request.reason.trim().is_empty() {
        return Err(bad("a non-empty reason is required to discard"));
    }
    let limit = request.limit.unwrap_or(ledger::review::BULK_LIMIT_MAX);
    let ids = actions::matching(&store, &request.filter, limit).await?;
    let decision = Decision {
        actor: caller.name,
        reason: request.reason,
    };
    Ok(Json(
        actions::act(&store, action, &ids, &decision, request.dry_run).await,
    ))
}
