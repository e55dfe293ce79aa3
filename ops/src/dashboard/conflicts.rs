//! Conflicts: the open ones, one beside its original event, and resolving it.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use ledger::review::{Decision, PageRequest};
use maud::html;

use super::session::Viewer;
use super::{ActionForm, DashboardState, Id, Page, PageError, check_action, layout};

#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct ConflictQuery {
    /// open (the default), resolved or all.
    state: Option<String>,
    cursor: Option<i64>,
}

pub(super) async fn conflicts(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Query(query): Query<ConflictQuery>,
) -> Page {
    let wanted = query.state.clone().unwrap_or_else(|| "open".into());
    let filter = match wanted.as_str() {
        "open" | "resolved" => Some(wanted.as_str()),
        "all" => None,
        other => {
            return Err(PageError(
                StatusCode::BAD_REQUEST,
                format!("No conflict state {other:?}: open, resolved or all."),
            ));
        }
    };
    let page = state
        .store
        .conflicts(filter, PageRequest::new(query.cursor, Some(50)))
        .await?;
    Ok(layout(
        if wanted == "open" {
            "Open conflicts"
        } else {
            "Conflicts"
        },
        Some(&session),
        html! {
            form method="get" {
                "State " select name="state" {
                    @for option in ["open", "resolved", "all"] {
                        option selected[option == wanted] { (option) }
                    }
                }
                " " button type="submit" { "Show" }
            }
            table id="conflicts" {
                tr { th { "ID" } th { "Event" } th { "Source" } th { "External id" } th { "Deliveries" } th { "Last seen" } }
                @for c in &page.items {
                    tr { td { a href=(format!("/dashboard/conflicts/{}", c.id)) { (c.id) } } td { (c.event_id) } td { (c.source) }
                         td { (c.external_id) } td.num { (c.deliveries) } td { (c.last_seen_at.format("%Y-%m-%d %H:%M:%S")) } }
                }
            }
            @if let Some(cursor) = page.next_cursor {
                a href=(super::query_string(&[
                    ("state", Some(wanted.as_str())),
                    ("cursor", Some(cursor.to_string().as_str())),
                ])) { "Older →" }
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
            @let differing = differing_fields(&detail.original.facts, &detail.conflict.facts);
            @if !differing.is_empty() {
                table id="differences" {
                    tr { th { "Field" } th { "Original" } th { "Conflicting" } }
                    @for (field, original, conflicting) in &differing {
                        tr.differs { td { strong { (field) } } td { code { (original) } } td { code { (conflicting) } } }
                    }
                }
            }
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

/// The fields whose values differ between two sets of facts (nested fields by their dotted
/// path), with each side's value (`-` where a side has none).
fn differing_fields(
    original: &Option<serde_json::Value>,
    conflicting: &Option<serde_json::Value>,
) -> Vec<(String, String, String)> {
    fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match value {
            serde_json::Value::Object(fields) => {
                for (key, value) in fields {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    flatten(&path, value, out);
                }
            }
            other => out.push((prefix.to_owned(), other.to_string())),
        }
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    if let Some(original) = original {
        flatten("", original, &mut a);
    }
    if let Some(conflicting) = conflicting {
        flatten("", conflicting, &mut b);
    }
    let mut fields: Vec<&String> = a.iter().chain(&b).map(|(k, _)| k).collect();
    fields.sort();
    fields.dedup();
    let value = |side: &[(String, String)], field: &str| {
        side.iter()
            .find(|(k, _)| k == field)
            .map_or_else(|| "-".to_owned(), |(_, v)| v.clone())
    };
    fields
        .into_iter()
        .map(|field| (field.clone(), value(&a, field), value(&b, field)))
        .filter(|(_, x, y)| x != y)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn only_the_fields_that_differ_are_listed() {
        let original = Some(
            json!({"amounts": {"gross": "100.00", "net": "96.80"}, "currency": "USD", "movement_id": "ch_1"}),
        );
        let conflicting = Some(
            json!({"amounts": {"gross": "100.50", "net": "96.80"}, "currency": "USD", "reference": "x"}),
        );
        assert_eq!(
            super::differing_fields(&original, &conflicting),
            [
                (
                    "amounts.gross".to_owned(),
                    "\"100.00\"".to_owned(),
                    "\"100.50\"".to_owned()
                ),
                (
                    "movement_id".to_owned(),
                    "\"ch_1\"".to_owned(),
                    "-".to_owned()
                ),
                ("reference".to_owned(), "-".to_owned(), "\"x\"".to_owned()),
            ]
        );
    }
}
