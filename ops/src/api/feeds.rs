//! `/api/sources/{name}/feed|balance|coverage|sequence`: a source's feed and its books against
//! the provider's own (ARCHITECTURE.md, Feeds and Sequences). The balance and the coverage ask the provider,
//! within the source's request budget.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use chrono::{NaiveDate, TimeDelta};
use ledger::SourceName;
use ledger::feed::Opening;
use providers::ProviderLedger;
use serde::Deserialize;
use utoipa::IntoParams;

use super::finance::query;
use super::{ApiError, ApiState, ErrorBody, Reader};
use crate::feeds::{self, BalanceCheck, Coverage, FeedState, SequenceCoverage};

/// The configured source `name` whose provider keeps a ledger settle reads.
fn provider<'a>(
    state: &'a ApiState,
    name: &str,
) -> Result<(SourceName, &'a dyn ProviderLedger), ApiError> {
    let source = SourceName::parse(name).map_err(|_| ApiError::NotFound("source"))?;
    let ledger = state
        .resolvers
        .ledger_of(&source)
        .ok_or(ApiError::NotFound("source with a provider ledger"))?;
    Ok((source, ledger))
}

/// A failure of a read that asked the provider: the store's own, or the provider's (502).
fn failed(error: anyhow::Error) -> ApiError {
    match error.downcast::<ledger::StoreError>() {
        Ok(error) => error.into(),
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "a read of the provider failed");
            ApiError::Provider(format!("{error:#}"))
        }
    }
}

/// The source's feed: its newest window, what the books have read up to and how far behind now
/// that is, and its backfill's progress (windows posted, in the dead letter, the opening).
#[utoipa::path(get, path = "/api/sources/{name}/feed", tag = "sources", params(("name" = String, Path)),
    responses((status = 200, body = FeedState), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn feed(
    Reader(_): Reader,
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<FeedState>, ApiError> {
    let source = SourceName::parse(&name).map_err(|_| ApiError::NotFound("source"))?;
    if state.resolvers.feed_of(&source).is_none() {
        return Err(ApiError::NotFound("source with a feed"));
    }
    Ok(Json(
        feeds::feed_state(&state.store, &source)
            .await
            .map_err(failed)?,
    ))
}

/// The provider's balance against the books' balance account, per currency: equal to the minor
/// unit when the account is quiet, else the difference explained by what the provider listed
/// after the feed's cut (`difference` is what nothing explains).
#[utoipa::path(get, path = "/api/sources/{name}/balance", tag = "sources", params(("name" = String, Path)),
    responses((status = 200, body = BalanceCheck), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 502, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn balance(
    Reader(_): Reader,
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<BalanceCheck>, ApiError> {
    let (source, ledger) = provider(&state, &name)?;
    let accounts = state.rules.accounts(&source);
    Ok(Json(
        feeds::check_balance(&state.store, &source, ledger, &accounts)
            .await
            .map_err(failed)?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct CoverageParams {
    /// The first day (YYYY-MM-DD, UTC).
    from: NaiveDate,
    /// The last day, included (YYYY-MM-DD, UTC).
    to: NaiveDate,
}

/// The provider's list of movements created over the days against the books: count and net per
/// currency and category on each side, the ids the books miss or hold for another net, and the
/// ids the books hold for those days that the provider does not list.
#[utoipa::path(get, path = "/api/sources/{name}/coverage", tag = "sources", params(("name" = String, Path), CoverageParams),
    responses((status = 200, body = Coverage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 502, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn coverage(
    Reader(_): Reader,
    State(state): State<ApiState>,
    Path(name): Path<String>,
    params: Result<Query<CoverageParams>, QueryRejection>,
) -> Result<Json<Coverage>, ApiError> {
    let params = query(params)?;
    if params.to < params.from {
        return Err(ApiError::BadRequest("`to` is before `from`".into()));
    }
    let (source, ledger) = provider(&state, &name)?;
    let accounts = state.rules.accounts(&source);
    let from = Opening::of_day(params.from).since;
    let to = Opening::of_day(params.to).since + TimeDelta::days(1);
    Ok(Json(
        feeds::coverage(&state.store, &source, ledger, &accounts, from, to)
            .await
            .map_err(failed)?,
    ))
}

/// The source's numbered documents (a payment provider's settlement batches, per merchant account) as the
/// books hold them: per series, the numbers booked, being fetched, in the dead letter or closed,
/// and those missing between the first and the last recorded (and since when).
#[utoipa::path(get, path = "/api/sources/{name}/sequence", tag = "sources", params(("name" = String, Path)),
    responses((status = 200, body = SequenceCoverage), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn sequence(
    Reader(_): Reader,
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<SequenceCoverage>, ApiError> {
    let source = SourceName::parse(&name).map_err(|_| ApiError::NotFound("source"))?;
    let sequence = state
        .resolvers
        .sequence_of(&source)
        .ok_or(ApiError::NotFound("source with numbered documents"))?;
    Ok(Json(
        feeds::sequence_coverage(&state.store, &source, sequence)
            .await
            .map_err(failed)?,
    ))
}
