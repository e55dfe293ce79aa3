//! Sources: each configured source, whether it is paused (since when, by whom, why), pausing and
//! resuming it (ops, with a reason), and every pause there has been.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use ledger::review::Decision;
use maud::html;

use super::session::Viewer;
use super::{ActionForm, DashboardState, Page, PageError, check_action, layout};

pub(super) async fn sources(State(state): State<DashboardState>, Viewer(session): Viewer) -> Page {
    let history = state.store.source_pauses(false, 200).await?;
    Ok(layout(
        "Sources",
        Some(&session),
        html! {
            p.muted { "A paused source's deliveries are still verified, recorded and acknowledged; its events wait to be posted until it is resumed, then drain." }
            table id="sources" {
                tr { th { "Source" } th { "State" } th { "Since" } th { "By" } th { "Why" } th {} }
                @for name in state.sources.0.iter() {
                    @let pause = history.iter().find(|p| &p.source == name && p.resumed_at.is_none());
                    tr id=(format!("source-{name}")) {
                        td { (name) }
                        @if let Some(p) = pause {
                            td.paused { strong { "paused" } } td { (p.paused_at.format("%Y-%m-%d %H:%M:%S")) }
                            td { (p.paused_by) } td { (p.pause_reason) }
                        } @else {
                            td { "running" } td {} td {} td {}
                        }
                        td {
                            @if session.caller.role.may_act() {
                                @let action = if pause.is_some() { "resume" } else { "pause" };
                                form.action method="post" action=(format!("/dashboard/sources/{name}/{action}")) {
                                    input type="hidden" name="csrf" value=(session.csrf);
                                    label { "Reason " input name="reason" id=(format!("{action}-{name}-reason")) required; }
                                    " " button type="submit" id=(format!("{action}-{name}")) { (action) }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Every pause" }
            table id="pauses" {
                tr { th { "Source" } th { "Paused" } th { "By" } th { "Why" } th { "Resumed" } th { "By" } th { "Why" } }
                @for p in &history {
                    tr { td { (p.source) } td { (p.paused_at.format("%Y-%m-%d %H:%M:%S")) } td { (p.paused_by) } td { (p.pause_reason) }
                         td { (p.resumed_at.map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_default()) }
                         td { (p.resumed_by.clone().unwrap_or_default()) } td { (p.resume_reason.clone().unwrap_or_default()) } }
                }
            }
        },
    ))
}

pub(super) async fn pause_or_resume(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Path((name, action)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, true) {
        return refused;
    }
    if !state.sources.0.iter().any(|s| s == &name) {
        return PageError(StatusCode::NOT_FOUND, format!("No source {name}.")).into_response();
    }
    let decision = Decision {
        actor: session.caller.name.clone(),
        reason: form.reason,
    };
    let result = match action.as_str() {
        "pause" => state.store.pause_source(&name, &decision).await,
        "resume" => state.store.resume_source(&name, &decision).await,
        _ => return PageError(StatusCode::NOT_FOUND, "No such action.".into()).into_response(),
    };
    match result {
        Ok(_) => Redirect::to("/dashboard/sources").into_response(),
        Err(error) => (
            StatusCode::BAD_REQUEST,
            layout("Not done", Some(&session), html! { p.error { (error) } }),
        )
            .into_response(),
    }
}
