//! Conflicts: the open ones, one beside its original event, and resolving it.

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use ledger::review::{Decision, PageRequest};
use maud::html;

use super::session::Viewer;
use super::{ActionForm, DashboardState, Id, Page, PageError, check_action, layout};

pub(super) async fn conflicts(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
) -> Page {
    let page = state
        .store
        .conflicts(Some("open"), PageRequest::new(None, Some(100)))
        .await?;
    Ok(layout(
        "Open conflicts",
        Some(&session),
        html! {
            table {
                tr { th { "ID" } th { "Event" } th { "Source" } th { "External id" } th { "Deliveries" } th { "Last seen" } }
                @for c in &page.items {
                    tr { td { a href=(format!("/dashboard/conflicts/{}", c.id)) { (c.id) } } td { (c.event_id) } td { (c.source) }
                         td { (c.external_id) } td.num { (c.deliveries) } td { (c.last_seen_at.format("%Y-%m-%d %H:%M:%S")) } }
                }
            }
        },
    ))
}

pub(super) async fn conflict(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Id(id): Id,
) -> Page {
    let Some(detail) = state.store.conflict(id).await? else {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            format!("No conflict {id}."),
        ));
    };
    let show = |facts: &Option<serde_json::Value>, error: &Option<String>| {
        facts
            .as_ref()
            .map(|f| serde_json::to_string_pretty(f).unwrap_or_default())
            .or(error.clone())
            .unwrap_or_default()
    };
    Ok(layout(
        &format!("Conflict {id}"),
        Some(&session),
        html! {
            p { (detail.original.source) " / " (detail.original.external_id) " · " (detail.conflict.state) " · "
                (detail.conflict.deliveries) " conflicting delivery(ies)" }
            div.side {
                div { h2 { "Original (authoritative)" } pre { (show(&detail.original.facts, &detail.original.validation_error)) } }
                div { h2 { "Conflicting delivery" } pre { (show(&detail.conflict.facts, &detail.conflict.validation_error)) } }
            }
            @if detail.conflict.state == ledger::review::ConflictState::Open && session.caller.role.may_act() {
                form.action method="post" action=(format!("/dashboard/conflicts/{id}/resolve")) {
                    input type="hidden" name="csrf" value=(session.csrf);
                    label { "Reason " input name="reason" required; }
                    " " button type="submit" { "Resolve" }
                }
            }
        },
    ))
}

pub(super) async fn resolve_conflict(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Id(id): Id,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, true) {
        return refused;
    }
    let decision = Decision {
        actor: session.caller.name.clone(),
        reason: form.reason,
    };
    match state.store.resolve_conflict(id, &decision).await {
        Ok(_) => Redirect::to(&format!("/dashboard/conflicts/{id}")).into_response(),
        Err(error) => (
            StatusCode::CONFLICT,
            layout("Not done", Some(&session), html! { p.error { (error) } }),
        )
            .into_response(),
    }
}
