//! Dead letters: the filtered list, one letter with its attempts and audit trail, and the
//! requeue/discard actions.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use ledger::review::{BULK_LIMIT_MAX, DeadLetterFilter, DeadLetterState, Decision, PageRequest};
use ledger::state::StateMachine;
use maud::html;
use serde::Deserialize;

use super::session::Viewer;
use super::{ActionForm, DashboardState, Id, Page, PageError, check_action, layout, non_empty};
use crate::actions::{self, Action};

#[derive(Debug, Default, Deserialize)]
pub(super) struct DeadLetterQuery {
    state: Option<String>,
    source: Option<String>,
    error_code: Option<String>,
    cursor: Option<i64>,
}

pub(super) async fn dead_letters(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Query(query): Query<DeadLetterQuery>,
) -> Page {
    let wanted = query.state.clone().unwrap_or_else(|| "open".into());
    let filter = DeadLetterFilter {
        state: DeadLetterState::parse(&wanted),
        source: non_empty(&query.source),
        error_code: non_empty(&query.error_code),
        ..DeadLetterFilter::default()
    };
    let page = state
        .store
        .dead_letters(&filter, PageRequest::new(query.cursor, Some(50)))
        .await?;
    Ok(layout(
        "Dead letters",
        Some(&session),
        html! {
            form method="get" {
                "State " select name="state" {
                    @for option in ["open", "requeued", "discarded", "all"] {
                        option selected[option == wanted] { (option) }
                    }
                }
                " Source " input name="source" value=(query.source.clone().unwrap_or_default());
                " Error code " input name="error_code" value=(query.error_code.clone().unwrap_or_default());
                " " button type="submit" { "Filter" }
            }
            table id="dead-letters" {
                tr { th { "ID" } th { "State" } th { "Source" } th { "External id" } th { "Class" } th { "Code" } th { "Attempts" } th { "Abandoned" } th { "Last error" } }
                @for d in &page.items {
                    tr {
                        td { a href=(format!("/dashboard/dead-letters/{}", d.id)) { (d.id) } }
                        td { (d.state) } td { (d.source) } td { (d.external_id) } td { (d.error_class) } td { (d.error_code) }
                        td.num { (d.attempts) } td { (d.abandoned_at.format("%Y-%m-%d %H:%M:%S")) } td { (d.last_error) }
                    }
                }
            }
            @if wanted == "open" && session.caller.role.may_act() && !page.items.is_empty() {
                form method="post" action="/dashboard/dead-letters/bulk" id="bulk" {
                    input type="hidden" name="csrf" value=(session.csrf);
                    input type="hidden" name="source" value=(query.source.clone().unwrap_or_default());
                    input type="hidden" name="error_code" value=(query.error_code.clone().unwrap_or_default());
                    "Every open one matching this filter: "
                    select name="action" { option value="requeue" { "requeue" } option value="discard" { "discard" } }
                    " reason " input name="reason" required size="30";
                    " " button type="submit" id="bulk-preview" { "Preview" }
                }
            }
            @if let Some(cursor) = page.next_cursor {
                a href=(super::query_string(&[
                    ("state", Some(wanted.as_str())),
                    ("source", query.source.as_deref()),
                    ("error_code", query.error_code.as_deref()),
                    ("cursor", Some(cursor.to_string().as_str())),
                ])) { "Older →" }
            }
        },
    ))
}

pub(super) async fn dead_letter(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Id(id): Id,
) -> Page {
    let Some(detail) = state.store.dead_letter(id).await? else {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            format!("No dead letter {id}."),
        ));
    };
    let (d, e) = (&detail.dead_letter, &detail.event);
    let erasure = match e.payload_erased_by {
        Some(erasure) => state.store.payload_erasure(erasure).await?,
        None => None,
    };
    Ok(layout(
        &format!("Dead letter {id}"),
        Some(&session),
        html! {
            p { "State: " strong id="state" { (d.state) } " · " (d.error_class) " / " (d.error_code) " · " (d.attempts) " attempt(s)" }
            p { "Last error: " (d.last_error) }
            @if let Some(by) = &d.decided_by { p { "Decided by " (by) ": " (d.decision_reason.clone().unwrap_or_default()) } }
            h2 { "Event " (e.id) }
            p { (e.source) " / " (e.external_id) " · status " strong id="event-status" { (e.status) } }
            @if let Some(facts) = &e.facts { pre { (serde_json::to_string_pretty(facts).unwrap_or_default()) } }
            @if let Some(error) = &e.validation_error { p.error { "Invalid facts: " (error) } }
            p { a href=(format!("/dashboard/events/{}", e.id)) { "The event's page" } }
            (super::events::payload_section(e, erasure.as_ref()))
            @if d.state == DeadLetterState::Open && session.caller.role.may_act() {
                h2 { "Decide" }
                @let permanent = d.error_class == ledger::job::ErrorClass::Permanent;
                @if permanent {
                    p.alert id="requeue-warning" { "This failed for its own facts (" (d.error_code) "): requeued as it is, it will fail again unless something changed (the configuration, a fix deployed). Say what changed." }
                }
                form.action method="post" action=(format!("/dashboard/dead-letters/{id}/requeue")) {
                    input type="hidden" name="csrf" value=(session.csrf);
                    label { "Reason " input name="reason" id="requeue-reason" required[permanent]; }
                    " " button type="submit" id="requeue" { "Requeue" }
                }
                form.action method="post" action=(format!("/dashboard/dead-letters/{id}/discard")) {
                    input type="hidden" name="csrf" value=(session.csrf);
                    label { "Reason " input name="reason" required; }
                    " " button type="submit" id="discard" { "Discard" }
                }
            }
            h2 { "Attempts" }
            table {
                tr { th { "Job" } th { "#" } th { "Started" } th { "Outcome" } th { "Error" } }
                @for a in &detail.attempts {
                    tr { td { (a.job_id) } td.num { (a.attempt) } td { (a.started_at.format("%Y-%m-%d %H:%M:%S%.3f")) }
                         td { (a.outcome.map_or("running", |o| o.as_str())) } td { (a.error.clone().unwrap_or_default()) } }
                }
            }
            h2 { "Audit trail" }
            table id="audit" {
                tr { th { "At" } th { "Actor" } th { "Action" } th { "Change" } th { "Reason" } }
                @for a in &detail.audit {
                    tr { td { (a.at.format("%Y-%m-%d %H:%M:%S")) } td { (a.actor) } td { (a.action) } td { (a.before_state) " → " (a.after_state) } td { (a.reason) } }
                }
            }
        },
    ))
}

pub(super) async fn decide_dead_letter(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Id(id): Id,
    Path((_, action)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, true) {
        return refused;
    }
    if action == "requeue" && form.reason.trim().is_empty() {
        match state.store.dead_letter(id).await {
            Ok(Some(detail))
                if detail.dead_letter.error_class == ledger::job::ErrorClass::Permanent =>
            {
                return PageError(
                    StatusCode::BAD_REQUEST,
                    "Requeueing a permanent failure needs a reason: say what changed, or it will fail again."
                        .into(),
                )
                .into_response();
            }
            Ok(_) => {}
            Err(error) => return PageError::from(error).into_response(),
        }
    }
    let decision = Decision {
        actor: session.caller.name.clone(),
        reason: form.reason,
    };
    let result = match action.as_str() {
        "requeue" => state.store.requeue_dead_letter(id, &decision).await,
        "discard" => state.store.discard_dead_letter(id, &decision).await,
        _ => return PageError(StatusCode::NOT_FOUND, "No such action.".into()).into_response(),
    };
    match result {
        Ok(_) => Redirect::to(&format!("/dashboard/dead-letters/{id}")).into_response(),
        Err(error) => (
            StatusCode::CONFLICT,
            layout("Not done", Some(&session), html! { p.error { (error) } }),
        )
            .into_response(),
    }
}

/// The bulk form: the list's filter, the action, a reason, and on confirmation the count the
/// person saw in the preview (the cap).
#[derive(Debug, Deserialize)]
pub(super) struct BulkForm {
    csrf: String,
    action: String,
    #[serde(default)]
    reason: String,
    source: Option<String>,
    error_code: Option<String>,
    /// Present on confirmation: how many the preview showed.
    confirm: Option<usize>,
}

/// Requeue or discard every open dead letter the list's filter matches: first a preview (what
/// each would become, how many, and a warning when permanent failures would be requeued), then,
/// confirmed with the count seen, the action item by item (each audited in its own transaction);
/// if more match by then than were confirmed, nothing is done and the preview is shown again.
pub(super) async fn bulk(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    headers: HeaderMap,
    Form(form): Form<BulkForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, true) {
        return refused;
    }
    let action = match form.action.as_str() {
        "requeue" => Action::Requeue,
        "discard" => Action::Discard,
        _ => return PageError(StatusCode::BAD_REQUEST, "No such action.".into()).into_response(),
    };
    if form.reason.trim().is_empty() {
        return PageError(
            StatusCode::BAD_REQUEST,
            "A bulk action needs a reason (it is kept in the audit log).".into(),
        )
        .into_response();
    }
    let filter = DeadLetterFilter {
        source: non_empty(&form.source),
        error_code: non_empty(&form.error_code),
        ..DeadLetterFilter::default()
    };
    let ids = match actions::matching(&state.store, &filter, BULK_LIMIT_MAX).await {
        Ok(ids) => ids,
        Err(error) => return PageError::from(error).into_response(),
    };
    let decision = Decision {
        actor: session.caller.name.clone(),
        reason: form.reason.clone(),
    };
    let confirmed = form.confirm.filter(|&seen| ids.len() <= seen);
    let report = actions::act(&state.store, action, &ids, &decision, confirmed.is_none()).await;
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for item in &report.items {
        match counts
            .iter_mut()
            .find(|(outcome, _)| *outcome == item.outcome)
        {
            Some((_, n)) => *n += 1,
            None => counts.push((item.outcome, 1)),
        }
    }
    let permanent = if action == Action::Requeue && report.dry_run {
        let permanent = DeadLetterFilter {
            error_class: Some(ledger::job::ErrorClass::Permanent),
            ..filter.clone()
        };
        match actions::matching(&state.store, &permanent, BULK_LIMIT_MAX).await {
            Ok(permanent) => permanent.len(),
            Err(error) => return PageError::from(error).into_response(),
        }
    } else {
        0
    };
    let grown = form.confirm.is_some() && confirmed.is_none();
    layout(
        if report.dry_run { "Bulk action: preview" } else { "Bulk action: done" },
        Some(&session),
        html! {
            @if grown {
                p.alert { "More dead letters match now (" (ids.len()) ") than you confirmed (" (form.confirm.unwrap_or_default()) "): nothing was done. Check the preview again." }
            }
            p id="bulk-summary" {
                (ids.len()) " open dead letter(s) match"
                @if let Some(source) = non_empty(&form.source) { " (source " (source) ")" }
                @if let Some(code) = non_empty(&form.error_code) { " (code " (code) ")" }
                ". "
                @for (outcome, n) in &counts { (outcome) ": " (n) ". " }
            }
            @if permanent > 0 {
                p.alert id="bulk-permanent" { (permanent) " of these failed for their own facts (a permanent error): requeued as they are, they will fail again unless something changed (the configuration, a fix deployed)." }
            }
            @if report.dry_run && !ids.is_empty() {
                form method="post" action="/dashboard/dead-letters/bulk" {
                    input type="hidden" name="csrf" value=(session.csrf);
                    input type="hidden" name="action" value=(form.action);
                    input type="hidden" name="reason" value=(form.reason);
                    input type="hidden" name="source" value=(form.source.clone().unwrap_or_default());
                    input type="hidden" name="error_code" value=(form.error_code.clone().unwrap_or_default());
                    input type="hidden" name="confirm" value=(ids.len());
                    button type="submit" id="bulk-confirm" { (form.action) " these " (ids.len()) }
                }
            }
            p { a href="/dashboard/dead-letters" { "Back to the dead letters" } }
        },
    )
    .into_response()
}
