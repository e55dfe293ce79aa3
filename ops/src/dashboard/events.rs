//! Finding events: the search form (every filter of `GET /api/events/search`) and its results,
//! newest first, each linked to its dead letter when it has an open one. Paging keeps every
//! filter.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use ledger::review::{EventFilter, PageRequest};
use maud::html;
use serde::Deserialize;

use super::session::Viewer;
use super::{DashboardState, Page, PageError, layout, non_empty, query_string};

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
                        td { (e.id) } td { (e.received_at.format("%Y-%m-%d %H:%M:%S")) } td { (e.source) } td { (e.external_id) }
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
