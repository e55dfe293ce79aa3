//! Sources: each configured source, whether it is paused (since when, by whom, why), pausing and
//! resuming it (ops, with a reason), and every pause there has been.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use ledger::review::Decision;
use maud::html;

use axum::extract::Query;
use chrono::{NaiveDate, TimeDelta};
use ledger::SourceName;
use ledger::feed::Opening;
use maud::Markup;
use serde::Deserialize;

use super::session::Viewer;
use super::{ActionForm, DashboardState, Page, PageError, check_action, layout};
use crate::feeds::{self, FeedState};

/// A source's feed in its row: how far it has read, its backfill, and its books page.
fn feed_cell(name: &str, feed: &FeedState) -> Markup {
    html! {
        @match (feed.cut, feed.lag_seconds) {
            (Some(cut), Some(lag)) => { "read to " (cut.format("%Y-%m-%d %H:%M:%S")) " (" (lag) " s behind)" }
            _ => { "no window posted yet" }
        }
        @if let Some(backfill) = &feed.backfill {
            br;
            span.backfill {
                "backfill from " (backfill.since) ": " (backfill.progress.posted) " of " (backfill.progress.windows)
                " windows posted, opening " (if backfill.progress.opening_posted { "posted" } else { "pending" })
                @if backfill.progress.abandoned > 0 { strong.error { ", " (backfill.progress.abandoned) " in the dead letter" } }
            }
        }
        br;
        a href=(format!("/dashboard/sources/{name}/books")) id=(format!("books-{name}")) { "books against the provider" }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct CoverageForm {
    from: Option<String>,
    to: Option<String>,
}

/// A source's books against its provider's: the balance check, and the coverage of the days
/// asked for (listing them spends the source's request budget, so only on request).
pub(super) async fn books(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Path(name): Path<String>,
    Query(form): Query<CoverageForm>,
) -> Page {
    let source = SourceName::parse(&name)
        .ok()
        .filter(|_| state.sources.0.iter().any(|s| s == &name))
        .ok_or_else(|| PageError(StatusCode::NOT_FOUND, format!("No source {name}.")))?;
    let (ledger, sequence) = (
        state.resolvers.ledger_of(&source),
        state.resolvers.sequence_of(&source),
    );
    if ledger.is_none() && sequence.is_none() {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            format!("Source {name}'s provider keeps no ledger or numbered documents settle reads."),
        ));
    }
    let provider = |error: anyhow::Error| {
        PageError(
            StatusCode::BAD_GATEWAY,
            format!("Asking the provider failed: {error:#}"),
        )
    };
    let accounts = state.rules.accounts(&source);
    let check = match ledger {
        Some(ledger) => Some(
            feeds::check_balance(&state.store, &source, ledger, &accounts)
                .await
                .map_err(provider)?,
        ),
        None => None,
    };
    let day = |text: &Option<String>| {
        text.as_deref()
            .and_then(|t| NaiveDate::parse_from_str(t, "%Y-%m-%d").ok())
    };
    let coverage = match (ledger, day(&form.from), day(&form.to)) {
        (Some(ledger), Some(from), Some(to)) if from <= to => Some(
            feeds::coverage(
                &state.store,
                &source,
                ledger,
                &accounts,
                Opening::of_day(from).since,
                Opening::of_day(to).since + TimeDelta::days(1),
            )
            .await
            .map_err(provider)?,
        ),
        _ => None,
    };
    let batches = match sequence {
        Some(sequence) => Some(
            feeds::sequence_coverage(&state.store, &source, sequence)
                .await
                .map_err(|e| PageError(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))?,
        ),
        None => None,
    };
    Ok(layout(
        &format!("{name}: the books against the provider"),
        Some(&session),
        html! {
            @if let Some(check) = &check {
            h2 { "Balance" }
            p.muted { "The provider's balance now against the books' " code { (check.account) } ", per currency. What the provider listed after the feed's cut ("
                (check.cut.map_or_else(|| "nothing read yet".to_owned(), |c| c.format("%Y-%m-%d %H:%M:%S").to_string()))
                ") and the books do not hold yet explains a difference; what is left is not explained." }
            table id="balance" {
                tr { th { "Currency" } th.num { "Provider" } th.num { "Books" } th.num { "Listed after the cut" } th.num { "Unexplained" } }
                @for c in &check.currencies {
                    tr { td { (c.currency) } td.num { (c.provider) } td.num { (c.books) }
                         td.num { (c.after_cut) " (" (c.after_cut_count) ")" }
                         td.num.error[c.difference != "0"] { (c.difference) } }
                }
            }
            p id="balance-verdict" { @if check.equal() { "The books equal the provider's balance." } @else { strong.error { "The books differ from the provider's balance." } } }
            h2 { "Coverage" }
            form method="get" { "From " input type="date" name="from" value=(form.from.clone().unwrap_or_default()); " to " input type="date" name="to" value=(form.to.clone().unwrap_or_default()); " " button type="submit" id="coverage-show" { "List and compare" } }
            @if let Some(coverage) = &coverage {
                table id="coverage" {
                    tr { th { "Currency" } th { "Category" } th.num { "Provider count" } th.num { "Provider net" } th.num { "Books count" } th.num { "Books net" } }
                    @for row in &coverage.rows {
                        tr { td { (row.currency) } td { (row.category) } td.num { (row.provider_count) } td.num { (row.provider_net) } td.num { (row.books_count) } td.num { (row.books_net) } }
                    }
                }
                p id="coverage-verdict" {
                    @if coverage.complete() { "Every movement the provider lists is in the books, for the same net." }
                    @else { strong.error { (coverage.missing_in_books.len()) " missing from the books, " (coverage.differing.len()) " for another net, "
                                           (coverage.not_listed.len()) " in the books and not listed: " }
                            (coverage.missing_in_books.iter().chain(&coverage.differing).chain(&coverage.not_listed).take(50).cloned().collect::<Vec<_>>().join(", ")) }
                }
            }
            }
            @if let Some(batches) = &batches {
                h2 { "Numbered documents" }
                p.muted { "Per series (a merchant account's settlement batches), the numbers recorded: booked, being fetched, in the dead letter or closed by a person, and those missing between the first and the last, which settle keeps asking the provider for." }
                table id="sequence" {
                    tr { th { "Series" } th { "Recorded" } th.num { "Booked" } th { "Fetching" } th { "Dead letter" } th { "Missing" } th { "Missing since" } }
                    @for s in &batches.series {
                        tr { td { (s.series) }
                             td { (s.first.map(|f| f.to_string()).unwrap_or_default()) "–" (s.last.map(|l| l.to_string()).unwrap_or_default()) }
                             td.num { (s.booked) }
                             td { (numbers(&s.fetching)) } td.error[!s.dead_letter.is_empty()] { (numbers(&s.dead_letter)) }
                             td.error[!s.missing.is_empty()] { (numbers(&s.missing)) }
                             td { (s.gap_since.map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_default()) } }
                    }
                }
                p id="sequence-verdict" { @if batches.complete() { "No number is missing and none is in the dead letter." } @else { strong.error { "Numbers are missing or in the dead letter." } } }
            }
        },
    ))
}

/// Numbers as a short list (the first 50).
fn numbers(numbers: &[u64]) -> String {
    let mut text: Vec<String> = numbers.iter().take(50).map(u64::to_string).collect();
    if numbers.len() > 50 {
        text.push(format!("… ({} in all)", numbers.len()));
    }
    text.join(", ")
}

pub(super) async fn sources(State(state): State<DashboardState>, Viewer(session): Viewer) -> Page {
    let history = state.store.source_pauses(false, 200).await?;
    let mut feeds = std::collections::HashMap::new();
    for name in state.sources.0.iter() {
        let Ok(source) = SourceName::parse(name) else {
            continue;
        };
        if state.resolvers.feed_of(&source).is_some() {
            feeds.insert(
                name.clone(),
                crate::feeds::feed_state(&state.store, &source).await?,
            );
        }
    }
    Ok(layout(
        "Sources",
        Some(&session),
        html! {
            p.muted { "A paused source's deliveries are still verified, recorded and acknowledged; its events wait to be posted until it is resumed, then drain." }
            @for (i, (name, note)) in state.notes.iter().enumerate() {
                p.alert id=(format!("note-{name}-{i}")) { strong { (name) } ": " (note) }
            }
            table id="sources" {
                tr { th { "Source" } th { "State" } th { "Since" } th { "By" } th { "Why" } th {} th { "Feed" } }
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
                        td id=(format!("feed-{name}")) {
                            @if let Some(feed) = feeds.get(name) { (feed_cell(name, feed)) }
                            @else if SourceName::parse(name).is_ok_and(|s| state.resolvers.sequence_of(&s).is_some()) {
                                a href=(format!("/dashboard/sources/{name}/books")) id=(format!("books-{name}")) { "batches" }
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
