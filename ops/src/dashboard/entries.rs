//! One journal entry: its lines, what it reverses or is reversed by, and for a finance user the
//! correction form (a reason, an effective date, and the lines it should have had: none to
//! reverse it only).

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::NaiveDate;
use ledger::posting::Line;
use ledger::review::{Decision, DecisionError};
use ledger::store::CorrectionRequest;
use maud::html;
use serde::Deserialize;

use super::session::Viewer;
use super::{DashboardState, Id, Page, PageError, check_action, layout};

pub(super) async fn entry(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Id(id): Id,
) -> Page {
    let Some(entry) = state.store.entry(id).await? else {
        return Err(PageError(StatusCode::NOT_FOUND, format!("No entry {id}.")));
    };
    let may_correct = session.caller.role.may_correct()
        && entry.reverses_entry_id.is_none()
        && entry.reversed_by_entry_id.is_none();
    Ok(layout(
        &format!("Entry {id}"),
        Some(&session),
        html! {
            p { (entry.effective_date) " · " (entry.source) " / " (entry.kind) " · movement " (entry.movement_id)
                " · " a href=(format!("/dashboard/events/{}", entry.event_id)) { "event " (entry.event_id) } }
            p id="description" { (entry.description) }
            @if let Some(reversed) = entry.reverses_entry_id {
                p { "Reverses " a href=(format!("/dashboard/journal/{reversed}")) { "entry " (reversed) } }
            }
            @if let Some(by) = entry.reversed_by_entry_id {
                p id="reversed-by" { "Reversed by " a href=(format!("/dashboard/journal/{by}")) { "entry " (by) } }
            }
            table id="lines" {
                tr { th { "Account" } th.num { "Debit" } th.num { "Credit" } th { "Cur" } }
                @for line in &entry.lines {
                    tr { td { (line.account) }
                         td.num { @if !line.amount.starts_with('-') { (line.amount) } }
                         td.num { @if let Some(credit) = line.amount.strip_prefix('-') { (credit) } }
                         td { (line.currency) } }
                }
            }
            @if may_correct {
                h2 { "Correct" }
                p.muted { "The entry stays as it is: it is reversed on the date you choose and, if you give lines, the lines it should have had are posted that day. Leave the lines empty to reverse it only." }
                form.action method="post" action=(format!("/dashboard/journal/{id}/correct")) {
                    input type="hidden" name="csrf" value=(session.csrf);
                    p { label { "Reason " input name="reason" id="correct-reason" required size="40"; } }
                    p { label { "Effective date " input name="effective_date" id="correct-date" placeholder="YYYY-MM-DD (today if empty)" pattern="[0-9]{4}-[0-9]{2}-[0-9]{2}" size="26"; } }
                    p { label { "Lines, one per row: ACCOUNT CURRENCY AMOUNT (debit positive)" br;
                        textarea name="lines" id="correct-lines" rows="5" cols="60" {
                            @for line in &entry.lines { (line.account) " " (line.currency) " " (line.amount) "\n" }
                        } } }
                    button type="submit" name="action" value="correct" id="correct" { "Reverse and correct" }
                    " "
                    button type="submit" name="action" value="reverse" id="reverse" { "Reverse only" }
                }
            }
        },
    ))
}

#[derive(Debug, Deserialize)]
pub(super) struct CorrectionForm {
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    effective_date: String,
    #[serde(default)]
    lines: String,
    action: String,
}

fn typed_lines(text: &str) -> Result<Vec<Line>, String> {
    text.lines()
        .map(str::trim)
        .filter(|row| !row.is_empty())
        .map(|row| {
            let parts: Vec<&str> = row.split_whitespace().collect();
            let [account, currency, amount] = parts.as_slice() else {
                return Err(format!("{row:?}: expected ACCOUNT CURRENCY AMOUNT"));
            };
            Ok(Line {
                account: (*account).to_owned(),
                currency: ledger::Currency::parse(currency)
                    .map_err(|error| format!("{row:?}: {error}"))?,
                amount: amount
                    .parse()
                    .map_err(|_| format!("{row:?}: {amount:?} is not a decimal amount"))?,
            })
        })
        .collect()
}

pub(super) async fn correct(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Id(id): Id,
    headers: HeaderMap,
    Form(form): Form<CorrectionForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, false) {
        return refused;
    }
    let refused = |status: StatusCode, why: String| {
        (
            status,
            layout("Not done", Some(&session), html! { p.error { (why) } }),
        )
            .into_response()
    };
    if !session.caller.role.may_correct() {
        return refused(
            StatusCode::FORBIDDEN,
            "Only a finance user corrects the journal.".into(),
        );
    }
    let effective_date = match form.effective_date.trim() {
        "" => chrono::Utc::now().date_naive(),
        text => match NaiveDate::parse_from_str(text, "%Y-%m-%d") {
            Ok(date) => date,
            Err(_) => return refused(StatusCode::BAD_REQUEST, format!("{text:?} is not a date")),
        },
    };
    let lines = match form.action.as_str() {
        "reverse" => None,
        _ => match typed_lines(&form.lines) {
            Ok(lines) => Some(lines),
            Err(why) => return refused(StatusCode::BAD_REQUEST, why),
        },
    };
    let decision = Decision {
        actor: session.caller.name.clone(),
        reason: form.reason,
    };
    match state
        .store
        .correct_entry(
            id,
            &CorrectionRequest {
                effective_date,
                lines,
            },
            &decision,
        )
        .await
    {
        Ok(_) => Redirect::to(&format!("/dashboard/journal/{id}")).into_response(),
        Err(error) => {
            let status = match &error {
                DecisionError::NotFound(_) => StatusCode::NOT_FOUND,
                DecisionError::ReasonRequired | DecisionError::Invalid(_) => {
                    StatusCode::BAD_REQUEST
                }
                DecisionError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::CONFLICT,
            };
            refused(status, error.to_string())
        }
    }
}
