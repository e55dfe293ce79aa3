//! What finance reads: the journal, balances as of a date, payouts and their reconciliation.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::NaiveDate;
use ledger::finance::{BalanceQuery, JournalCursor, JournalFilter};
use maud::html;
use serde::Deserialize;

use super::session::Viewer;
use super::{DashboardState, Page, PageError, layout, non_empty};

#[derive(Debug, Default, Deserialize)]
pub(super) struct JournalQuery {
    from: Option<String>,
    to: Option<String>,
    account: Option<String>,
    currency: Option<String>,
    source: Option<String>,
    reference: Option<String>,
    cursor: Option<String>,
}

fn date(text: &Option<String>) -> Option<NaiveDate> {
    text.as_deref()
        .and_then(|t| NaiveDate::parse_from_str(t, "%Y-%m-%d").ok())
}

pub(super) async fn journal(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Query(query): Query<JournalQuery>,
) -> Page {
    let filter = JournalFilter {
        from: date(&query.from),
        to: date(&query.to),
        account: non_empty(&query.account),
        currency: non_empty(&query.currency),
        source: non_empty(&query.source),
        reference: non_empty(&query.reference),
        newest_first: true,
        ..JournalFilter::default()
    };
    let after = query.cursor.as_deref().and_then(JournalCursor::parse);
    let page = state.store.journal(&filter, after, 50).await?;
    Ok(layout(
        "Journal",
        Some(&session),
        html! {
            form method="get" {
                "From " input type="date" name="from" value=(query.from.clone().unwrap_or_default());
                " To " input type="date" name="to" value=(query.to.clone().unwrap_or_default());
                " Account " input name="account" value=(query.account.clone().unwrap_or_default());
                " Currency " input name="currency" size="4" value=(query.currency.clone().unwrap_or_default());
                " Source " input name="source" size="8" value=(query.source.clone().unwrap_or_default());
                " Reference " input name="reference" size="12" value=(query.reference.clone().unwrap_or_default());
                " " button type="submit" { "Filter" }
                span.muted { " Newest first." }
            }
            table id="journal" {
                tr { th { "Entry" } th { "Date" } th { "Description" } th { "Account" } th.num { "Debit" } th.num { "Credit" } th { "Cur" } }
                @for entry in &page.items {
                    @for line in &entry.lines {
                        tr {
                            td { @if line.line_no == 1 { a href=(format!("/dashboard/journal/{}", entry.id)) { (entry.id) } } }
                            td { @if line.line_no == 1 { (entry.effective_date) } }
                            td { @if line.line_no == 1 { (entry.description)
                                @if let Some(reversed) = entry.reverses_entry_id { span.muted { " (reverses " (reversed) ")" } } } }
                            td { (line.account) }
                            td.num { @if !line.amount.starts_with('-') { (line.amount) } }
                            td.num { @if let Some(credit) = line.amount.strip_prefix('-') { (credit) } }
                            td { (line.currency) }
                        }
                    }
                }
            }
            @if let Some(cursor) = page.next_cursor {
                a href=(super::query_string(&[
                    ("from", query.from.as_deref()),
                    ("to", query.to.as_deref()),
                    ("account", query.account.as_deref()),
                    ("currency", query.currency.as_deref()),
                    ("source", query.source.as_deref()),
                    ("reference", query.reference.as_deref()),
                    ("cursor", Some(cursor.as_str())),
                ])) { "Older →" }
            }
        },
    ))
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct BalanceQueryForm {
    as_of: Option<String>,
}

pub(super) async fn balances(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Query(query): Query<BalanceQueryForm>,
) -> Page {
    let as_of = date(&query.as_of);
    let rows = state
        .store
        .balances(BalanceQuery {
            as_of,
            recorded_at: None,
        })
        .await?;
    Ok(layout(
        "Balances",
        Some(&session),
        html! {
            form method="get" { "As of " input type="date" name="as_of" value=(query.as_of.clone().unwrap_or_default()); " " button type="submit" { "Show" } }
            table id="balances" {
                tr { th { "Account" } th { "Currency" } th.num { "Balance" } }
                @for row in &rows { tr { td { (row.account) } td { (row.currency) } td.num { (row.balance) } } }
            }
        },
    ))
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct PayoutQuery {
    /// The last payout id of the previous page.
    after: Option<String>,
}

/// Payouts in id order, 50 to a page.
pub(super) async fn payouts(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Query(query): Query<PayoutQuery>,
) -> Page {
    const PAGE: usize = 50;
    let mut items = state
        .store
        .payouts(query.after.as_deref(), PAGE as u32 + 1)
        .await?;
    let more = items.len() > PAGE;
    items.truncate(PAGE);
    let next = more
        .then(|| items.last().map(|p| p.payout_id.clone()))
        .flatten();
    Ok(layout(
        "Payouts",
        Some(&session),
        html! {
            table {
                tr { th { "Payout" } th { "Status" } th.num { "Amount" } th.num { "Items net" } th.num { "Difference" } th { "Cur" } }
                @for p in &items {
                    tr { td { a href=(format!("/dashboard/payouts/{}", p.payout_id)) { (p.payout_id) } } td { (format!("{:?}", p.status)) }
                         td.num { (p.payout_amount.clone().unwrap_or_default()) } td.num { (p.items_net) } td.num { (p.difference) }
                         td { (p.currency.clone().unwrap_or_default()) } }
                }
            }
            @if let Some(after) = next {
                a href=(super::query_string(&[("after", Some(after.as_str()))])) { "Next →" }
            }
        },
    ))
}

pub(super) async fn payout(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Path(id): Path<String>,
) -> Page {
    let Some(r) = state.store.reconciliation(&id).await? else {
        return Err(PageError(StatusCode::NOT_FOUND, format!("No payout {id}.")));
    };
    Ok(layout(
        &format!("Payout {id}"),
        Some(&session),
        html! {
            p { "Status: " strong id="payout-status" { (format!("{:?}", r.status)) } }
            table id="payout-currencies" {
                tr { th { "Currency" } th { "Status" } th.num { "Payout" } th.num { "Items net" } th.num { "Difference" } th.num { "Carried forward" } }
                @for c in &r.by_currency {
                    tr { td { (c.currency) } td { (format!("{:?}", c.status)) } td.num { (c.payout_amount.clone().unwrap_or_else(|| "-".into())) }
                         td.num { (c.items_net) } td.num { (c.difference) } td.num { (c.carried_forward.clone().unwrap_or_else(|| "-".into())) } }
                }
            }
            table {
                tr { th { "Entry" } th { "Date" } th { "Kind" } th { "Movement" } th.num { "Net" } }
                @for i in &r.items { tr { td { (i.entry_id) } td { (i.effective_date) } td { (i.kind) } td { (i.movement_id) } td.num { (i.net) } } }
            }
        },
    ))
}
