//! `/api/journal`, `/api/journal.csv`, `/api/balances`, `/api/payouts`, `/api/receivables`:
//! what finance reads.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::NaiveDate;
use futures::StreamExt;
use ledger::finance::{
    BalanceQuery, BalanceRow, JournalCursor, JournalFilter, JournalPage, OpenReceivable,
    PayoutSummary, RECEIVABLE_DAYS, Reconciliation, open_since,
};
use ledger::review::PAGE_LIMIT_MAX;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{ApiError, ApiState, ErrorBody, Reader};
use crate::actions::parse_time;
use crate::export::{self, Format};

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct JournalParams {
    /// Effective date on or after (YYYY-MM-DD).
    from: Option<NaiveDate>,
    /// Effective date on or before (YYYY-MM-DD).
    to: Option<NaiveDate>,
    account: Option<String>,
    currency: Option<String>,
    source: Option<String>,
    kind: Option<String>,
    reference: Option<String>,
    payout_id: Option<String>,
    /// Latest effective date first (default: oldest first).
    newest_first: Option<bool>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// At most this many entries (default 50, at most 500).
    limit: Option<u32>,
}

impl JournalParams {
    fn filter(&self) -> JournalFilter {
        JournalFilter {
            from: self.from,
            to: self.to,
            account: self.account.clone(),
            currency: self.currency.clone(),
            source: self.source.clone(),
            kind: self.kind.clone(),
            reference: self.reference.clone(),
            payout_id: self.payout_id.clone(),
            newest_first: self.newest_first.unwrap_or(false),
        }
    }
}

pub(super) fn query<T>(params: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    params
        .map(|Query(params)| params)
        .map_err(|error| ApiError::BadRequest(error.body_text()))
}

/// Journal entries with their lines, in effective-date order, paged.
#[utoipa::path(get, path = "/api/journal", tag = "finance", params(JournalParams),
    responses((status = 200, body = JournalPage), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn journal(
    Reader(_): Reader,
    State(state): State<ApiState>,
    params: Result<Query<JournalParams>, QueryRejection>,
) -> Result<Json<JournalPage>, ApiError> {
    let params = query(params)?;
    let after = params
        .cursor
        .as_deref()
        .map(|text| {
            JournalCursor::parse(text).ok_or_else(|| ApiError::BadRequest("invalid cursor".into()))
        })
        .transpose()?;
    let limit = params.limit.unwrap_or(50).clamp(1, PAGE_LIMIT_MAX);
    Ok(Json(
        state.store.journal(&params.filter(), after, limit).await?,
    ))
}

/// The journal as CSV, one row per line, streamed.
#[utoipa::path(get, path = "/api/journal.csv", tag = "finance", params(JournalParams),
    responses((status = 200, description = "CSV, one row per journal line", content_type = "text/csv"),
              (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn journal_csv(
    Reader(_): Reader,
    State(state): State<ApiState>,
    params: Result<Query<JournalParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let params = query(params)?;
    let chunks = export::stream(
        state.store.clone(),
        Format::Csv,
        params.filter(),
        state.rules.clone(),
    )
    .map(|chunk| chunk.map_err(|error| std::io::Error::other(error.to_string())));
    Ok((
        [(header::CONTENT_TYPE, Format::Csv.content_type())],
        Body::from_stream(chunks),
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct BalanceParams {
    /// Balances as of this effective date (inclusive).
    as_of: Option<NaiveDate>,
    /// Count only entries recorded by this time (RFC 3339), to reproduce an earlier report.
    recorded_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Balances {
    as_of: Option<NaiveDate>,
    recorded_at: Option<String>,
    balances: Vec<BalanceRow>,
}

/// Balances per account and currency.
#[utoipa::path(get, path = "/api/balances", tag = "finance", params(BalanceParams),
    responses((status = 200, body = Balances), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn balances(
    Reader(_): Reader,
    State(state): State<ApiState>,
    params: Result<Query<BalanceParams>, QueryRejection>,
) -> Result<Json<Balances>, ApiError> {
    let params = query(params)?;
    let recorded_at = params
        .recorded_at
        .as_deref()
        .map(parse_time)
        .transpose()
        .map_err(ApiError::BadRequest)?;
    let balances = state
        .store
        .balances(BalanceQuery {
            as_of: params.as_of,
            recorded_at,
        })
        .await?;
    Ok(Json(Balances {
        as_of: params.as_of,
        recorded_at: recorded_at.map(|t| t.to_rfc3339()),
        balances,
    }))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct PayoutParams {
    /// The last payout id of the previous page.
    cursor: Option<String>,
    limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct PayoutPage {
    items: Vec<PayoutSummary>,
    next_cursor: Option<String>,
}

/// Every payout with its reconciliation status, in payout-id order.
#[utoipa::path(get, path = "/api/payouts", tag = "finance", params(PayoutParams),
    responses((status = 200, body = PayoutPage), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn payouts(
    Reader(_): Reader,
    State(state): State<ApiState>,
    params: Result<Query<PayoutParams>, QueryRejection>,
) -> Result<Json<PayoutPage>, ApiError> {
    let params = query(params)?;
    let limit = params.limit.unwrap_or(50).clamp(1, 100);
    let items = state.store.payouts(params.cursor.as_deref(), limit).await?;
    let next_cursor = if items.len() == limit as usize {
        items.last().map(|p| p.payout_id.clone())
    } else {
        None
    };
    Ok(Json(PayoutPage { items, next_cursor }))
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ReceivableParams {
    /// Only receivables open for at least this many days (default 7).
    days: Option<u32>,
    limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ReceivablePage {
    /// Oldest first.
    items: Vec<OpenReceivable>,
}

/// Receivables never cleared: sales captured (booked from their capture notification) that no
/// settlement line has settled after `days` days, or settled for another amount, per capture and
/// currency.
#[utoipa::path(get, path = "/api/receivables", tag = "finance", params(ReceivableParams),
    responses((status = 200, body = ReceivablePage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn receivables(
    Reader(_): Reader,
    State(state): State<ApiState>,
    params: Result<Query<ReceivableParams>, QueryRejection>,
) -> Result<Json<ReceivablePage>, ApiError> {
    let params = query(params)?;
    let limit = params.limit.unwrap_or(100).clamp(1, 1000);
    let cutoff = open_since(params.days.unwrap_or(RECEIVABLE_DAYS));
    let items = state
        .store
        .open_receivables(&state.rules.receivables_accounts(), cutoff, limit)
        .await?;
    Ok(Json(ReceivablePage { items }))
}

/// A payout beside the settled items carrying its id.
#[utoipa::path(get, path = "/api/payouts/{id}/reconciliation", tag = "finance",
    params(("id" = String, Path, description = "The provider's payout id")),
    responses((status = 200, body = Reconciliation), (status = 404, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn reconciliation(
    Reader(_): Reader,
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Reconciliation>, ApiError> {
    state
        .store
        .reconciliation(&id)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("payout"))
}
