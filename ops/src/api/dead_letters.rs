//! `/api/dead-letters`: list, show, requeue, discard, and their bulk forms.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use jobs::Store;
use jobs::job::ErrorClass;
use jobs::review::{
    DeadLetterDetail, DeadLetterFilter, DeadLetterState, DeadLetterSummary, Decided, Decision,
    Page, PageRequest,
};
use serde::Deserialize;

use super::{Actor, ApiError, Reader};
use crate::actions::{self, Action, Report, parse_time};

#[derive(Debug, Default, Deserialize)]
pub(super) struct ListParams {
    state: Option<String>,
    source: Option<String>,
    kind: Option<String>,
    error_class: Option<String>,
    error_code: Option<String>,
    abandoned_before: Option<String>,
    abandoned_after: Option<String>,
    cursor: Option<i64>,
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

pub(super) async fn list(
    Reader(_): Reader,
    State(store): State<Store>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<Page<DeadLetterSummary>>, ApiError> {
    let Query(params) = params.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    let page = PageRequest::new(params.cursor, params.limit);
    Ok(Json(store.dead_letters(&params.filter()?, page).await?))
}

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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReasonBody {
    #[serde(default)]
    pub(super) reason: String,
}

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

#[derive(Debug, Default, Deserialize)]
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

pub(super) async fn bulk_requeue(
    actor: Actor,
    state: State<Store>,
    bytes: Bytes,
) -> Result<Json<Report>, ApiError> {
    bulk(actor, state, bytes, Action::Requeue).await
}

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
    let limit = request.limit.unwrap_or(jobs::review::BULK_LIMIT_MAX);
    let ids = actions::matching(&store, &request.filter, limit).await?;
    let decision = Decision {
        actor: caller.name,
        reason: request.reason,
    };
    Ok(Json(
        actions::act(&store, action, &ids, &decision, request.dry_run).await,
    ))
}
