//! Events: the search form (every filter of `GET /api/events/search`) and its results, newest
//! first (paging keeps every filter); one event's page, linking its attempts, dead letters,
//! conflicting deliveries, entries and audit trail, with its payload as received (or who erased
//! it, when and why) and, for ops, the erasure of that payload on request.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use ledger::review::{Decision, EventFilter, EventView, PageRequest};
use ledger::store::PayloadErasure;
use ledger::{EventId, EventStatus};
use maud::{Markup, html};
use serde::Deserialize;

use super::session::Viewer;
use super::{
    ActionForm, DashboardState, Id, Page, PageError, check_action, layout, non_empty, query_string,
};

/// The form's fields, as typed (empty fields are no filter).
#[derive(Debug, Default, Deserialize)]
pub(super) struct SearchForm {
    source: Option<String>,
    external_id: Option<String>,
    external_id_prefix: Option<String>,
    kind: Option<String>,
    status: Option<String>,
    movement_id: Option<String>,
    reference: Option<String>,
    payout_id: Option<String>,
    error_code: Option<String>,
    cursor: Option<i64>,
}

impl SearchForm {
    fn fields(&self) -> [(&'static str, &'static str, &Option<String>); 9] {
        [
            ("source", "Source", &self.source),
            ("external_id", "External id", &self.external_id),
            (
                "external_id_prefix",
                "External id starts with",
                &self.external_id_prefix,
            ),
            ("kind", "Kind", &self.kind),
            ("status", "Status", &self.status),
            ("movement_id", "Movement", &self.movement_id),
            ("reference", "Reference", &self.reference),
            ("payout_id", "Payout", &self.payout_id),
            ("error_code", "Dead-letter code", &self.error_code),
        ]
    }

    fn filter(&self) -> EventFilter {
        EventFilter {
            source: non_empty(&self.source),
            external_id: non_empty(&self.external_id),
            external_id_prefix: non_empty(&self.external_id_prefix),
            kind: non_empty(&self.kind),
            status: non_empty(&self.status),
            movement_id: non_empty(&self.movement_id),
            reference: non_empty(&self.reference),
            payout_id: non_empty(&self.payout_id),
            error_code: non_empty(&self.error_code),
            ..EventFilter::default()
        }
    }
}

pub(super) async fn events(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Query(form): Query<SearchForm>,
) -> Page {
    let filter = form.filter();
    filter
        .check()
        .map_err(|why| PageError(StatusCode::BAD_REQUEST, why))?;
    let page = state
        .store
        .search_events(&filter, PageRequest::new(form.cursor, Some(50)))
        .await?;
    let older = page.next_cursor.map(|cursor| {
        let cursor = cursor.to_string();
        let fields = form.fields();
        let mut pairs: Vec<(&str, Option<&str>)> = fields
            .iter()
            .map(|(name, _, value)| (*name, value.as_deref()))
            .collect();
        pairs.push(("cursor", Some(cursor.as_str())));
        query_string(&pairs)
    });
    Ok(layout(
        "Events",
        Some(&session),
        html! {
            form method="get" id="event-search" {
                @for (name, label, value) in form.fields() {
                    label { (label) " " input name=(name) size="14" value=(value.clone().unwrap_or_default()); }
                    " "
                }
                button type="submit" { "Search" }
            }
            table id="events" {
                tr { th { "ID" } th { "Received" } th { "Source" } th { "External id" } th { "Kind" } th { "Status" } th { "Movement" } th { "Dead letter" } }
                @for e in &page.items {
                    tr {
                        td { a href=(format!("/dashboard/events/{}", e.id)) { (e.id) } } td { (e.received_at.format("%Y-%m-%d %H:%M:%S")) } td { (e.source) } td { (e.external_id) }
                        td { (e.kind.clone().unwrap_or_default()) } td { (e.status) } td { (e.movement_id.clone().unwrap_or_default()) }
                        td { @if let (Some(id), Some(code)) = (e.dead_letter_id, &e.error_code) {
                            a href=(format!("/dashboard/dead-letters/{id}")) { (code) } } }
                    }
                }
            }
            @if page.items.is_empty() { p.muted { "No event matches." } }
            @if let Some(older) = older { a href=(older) { "Older →" } }
        },
    ))
}

/// The payload as received, or who erased it, when and why.
pub(super) fn payload_section(event: &EventView, erasure: Option<&PayloadErasure>) -> Markup {
    html! {
        h3 { "Received payload" }
        @match (&event.payload, erasure) {
            (Some(payload), _) => pre id="payload" { (payload) },
            (None, Some(erasure)) => p.muted id="payload-erased" {
                "Erased " (erasure.at.format("%Y-%m-%d %H:%M:%S")) " by " (erasure.actor) ": " (erasure.reason)
                " (erasure " (erasure.id) ", " (erasure.scope) "). Key, fingerprint, facts, entries and audit are kept."
            },
            (None, None) => p.muted id="payload-erased" { "Erased." },
        }
    }
}

pub(super) async fn event(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Id(id): Id,
) -> Page {
    let Some(detail) = state.store.event_detail(EventId::new(id)).await? else {
        return Err(PageError(StatusCode::NOT_FOUND, format!("No event {id}.")));
    };
    let e = &detail.event;
    let in_use = !matches!(e.status, EventStatus::Posted | EventStatus::Discarded)
        || detail.conflicts.iter().any(|c| c.resolved_at.is_none());
    Ok(layout(
        &format!("Event {id}"),
        Some(&session),
        html! {
            p { (e.source) " / " (e.external_id) " · status " strong id="event-status" { (e.status) }
                " · received " (e.received_at.format("%Y-%m-%d %H:%M:%S")) }
            p { "Kind " (e.kind.clone().unwrap_or_default()) " · movement " (e.movement_id.clone().unwrap_or_default())
                " · fingerprint " code { (e.fingerprint) } }
            @if let Some(facts) = &e.facts { pre id="facts" { (serde_json::to_string_pretty(facts).unwrap_or_default()) } }
            @if let Some(error) = &e.validation_error { p.error { "Invalid facts: " (error) } }
            (payload_section(e, detail.erasure.as_ref()))
            @if e.payload.is_some() && session.caller.role.may_act() {
                @if in_use {
                    p.muted { "The payload stays while the event is in flight, in an open dead letter or in an open conflict." }
                } @else {
                    form.action method="post" action=(format!("/dashboard/events/{id}/erase-payload")) {
                        input type="hidden" name="csrf" value=(session.csrf);
                        label { "Reason " input name="reason" id="erase-reason" required; }
                        " " button type="submit" id="erase-payload" { "Erase this payload" }
                    }
                }
            }
            h2 { "Entries" }
            table id="entries" {
                tr { th { "Entry" } th { "Source key" } th { "Kind" } th { "Reference" } th { "Written by" } }
                @for entry in &detail.entries {
                    tr { td { (entry.id) } td { (entry.source_key) } td { (entry.kind) }
                         td { @if let Some(reference) = &entry.reference {
                             a href=(format!("/dashboard/journal{}", query_string(&[("reference", Some(reference.as_str()))]))) { (reference) } } }
                         td { @if entry.own { "this event" } @else { "an earlier event of the movement" } } }
                }
            }
            h2 { "Dead letters" }
            table id="event-dead-letters" {
                tr { th { "Dead letter" } th { "State" } th { "Code" } th { "Attempts" } }
                @for d in &detail.dead_letters {
                    tr { td { a href=(format!("/dashboard/dead-letters/{}", d.id)) { (d.id) } } td { (d.state) }
                         td { (d.error_code) } td.num { (d.attempts) } }
                }
            }
            h2 { "Conflicting deliveries" }
            table id="event-conflicts" {
                tr { th { "Conflict" } th { "State" } th { "Deliveries" } th { "Last seen" } }
                @for c in &detail.conflicts {
                    tr { td { a href=(format!("/dashboard/conflicts/{}", c.id)) { (c.id) } } td { (c.state) }
                         td.num { (c.deliveries) } td { (c.last_seen_at.format("%Y-%m-%d %H:%M:%S")) } }
                }
            }
            h2 { "Attempts" }
            table id="attempts" {
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

/// Erases the event's payload on request (ops, with a reason), audited as an erasure.
pub(super) async fn erase_payload(
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
    match state.store.erase_payload(id, &decision).await {
        Ok(_) => Redirect::to(&format!("/dashboard/events/{id}")).into_response(),
        Err(error) => (
            StatusCode::CONFLICT,
            layout("Not done", Some(&session), html! { p.error { (error) } }),
        )
            .into_response(),
    }
}
