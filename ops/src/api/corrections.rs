//! `POST /api/journal/{id}/reverse` and `/correct`: a finance user reverses an entry (void) or
//! reverses it and posts the lines it should have had, with a reason, on an effective date
//! (default today, UTC). The original is never edited; balances as of a date before the
//! correction's still show it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use chrono::NaiveDate;
use ledger::posting::Line;
use ledger::review::Decision;
use ledger::store::{Corrected, CorrectionRequest};
use ledger::{Currency, Store};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{Accountant, ApiError, ErrorBody};

/// A line as typed: the account, the currency (ISO 4217) and the signed amount (debit positive).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LineBody {
    account: String,
    currency: String,
    amount: String,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReverseBody {
    #[serde(default)]
    reason: String,
    /// When the reversal takes effect (YYYY-MM-DD; default today, UTC).
    effective_date: Option<NaiveDate>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CorrectBody {
    #[serde(default)]
    reason: String,
    /// When the reversal and the correction take effect (YYYY-MM-DD; default today, UTC).
    effective_date: Option<NaiveDate>,
    /// The lines the entry should have had: at least two, summing to zero per currency.
    #[serde(default)]
    lines: Vec<LineBody>,
}

fn parse<T: serde::de::DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, ApiError> {
    super::dead_letters::body(bytes)
}

fn lines(typed: &[LineBody]) -> Result<Vec<Line>, ApiError> {
    typed
        .iter()
        .map(|line| {
            let currency = Currency::parse(&line.currency)
                .map_err(|error| ApiError::BadRequest(format!("{}: {error}", line.currency)))?;
            let amount = line.amount.trim().parse().map_err(|_| {
                ApiError::BadRequest(format!("{:?} is not a decimal amount", line.amount))
            })?;
            Ok(Line {
                account: line.account.trim().to_owned(),
                currency,
                amount,
            })
        })
        .collect()
}

fn today() -> NaiveDate {
    chrono::Utc::now().date_naive()
}

/// Reverse the entry: an entry of the opposite lines on the effective date, with a reason. The
/// original stays as it was. A repeat by the same person with the same reason changes nothing.
#[utoipa::path(post, path = "/api/journal/{id}/reverse", tag = "finance", params(("id" = i64, Path)),
    request_body = ReverseBody,
    responses((status = 200, body = Corrected), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn reverse(
    Accountant(caller): Accountant,
    State(store): State<Store>,
    Path(id): Path<i64>,
    bytes: Bytes,
) -> Result<Json<Corrected>, ApiError> {
    let body: ReverseBody = parse(&bytes)?;
    let request = CorrectionRequest {
        effective_date: body.effective_date.unwrap_or_else(today),
        lines: None,
    };
    let decision = Decision {
        actor: caller.name,
        reason: body.reason,
    };
    Ok(Json(store.correct_entry(id, &request, &decision).await?))
}

/// Reverse the entry and post the lines it should have had, both on the effective date, with a
/// reason. The original stays as it was.
#[utoipa::path(post, path = "/api/journal/{id}/correct", tag = "finance", params(("id" = i64, Path)),
    request_body = CorrectBody,
    responses((status = 200, body = Corrected), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn correct(
    Accountant(caller): Accountant,
    State(store): State<Store>,
    Path(id): Path<i64>,
    bytes: Bytes,
) -> Result<Json<Corrected>, ApiError> {
    let body: CorrectBody = parse(&bytes)?;
    let request = CorrectionRequest {
        effective_date: body.effective_date.unwrap_or_else(today),
        lines: Some(lines(&body.lines)?),
    };
    let decision = Decision {
        actor: caller.name,
        reason: body.reason,
    };
    Ok(Json(store.correct_entry(id, &request, &decision).await?))
}
