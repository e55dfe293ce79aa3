//! The dashboard: server-rendered HTML (maud) for the overview, dead letters, conflicts, the
//! journal, balances and payouts. The same tokens and roles as the API: a token typed into the
//! login form opens a session (cookie); `finance` sees no action; every action form carries the
//! session's CSRF token and is refused without it.

mod chart;
mod session;

use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::header::{ORIGIN, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use chrono::NaiveDate;
use jobs::Store;
use jobs::finance::{BalanceQuery, JournalCursor, JournalFilter};
use jobs::review::{DeadLetterFilter, DeadLetterState, Decision, PageRequest};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use crate::abuse::{AuthGuard, Throttled};
use crate::auth::Tokens;
use crate::server::ClientAddress;
use session::{Session, Sessions, Viewer};
use tower_http::set_header::SetResponseHeaderLayer;

#[derive(Clone, Debug)]
pub struct DashboardState {
    store: Store,
    tokens: Arc<Tokens>,
    sessions: Sessions,
    guard: Arc<AuthGuard>,
    cookie_secure: bool,
}

/// The `[dashboard]` settings.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DashboardSettings {
    /// The session cookie is `Secure` (sent back only over HTTPS, or to a loopback address):
    /// right behind a TLS-terminating proxy. `false` only for plain HTTP on a trusted network.
    pub cookie_secure: bool,
}

impl Default for DashboardSettings {
    fn default() -> Self {
        Self {
            cookie_secure: true,
        }
    }
}

/// Headers on every dashboard response: never cached, never framed, no referrer leaves it, no
/// script runs (its pages have none; only their inline style is allowed).
const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("cache-control", "no-store"),
    (
        "content-security-policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("referrer-policy", "same-origin"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
];

pub fn router(
    store: Store,
    tokens: Arc<Tokens>,
    guard: Arc<AuthGuard>,
    settings: &DashboardSettings,
) -> Router {
    let state = DashboardState {
        store,
        tokens,
        sessions: Sessions::default(),
        guard,
        cookie_secure: settings.cookie_secure,
    };
    let headers = SECURITY_HEADERS.map(|(name, value)| {
        SetResponseHeaderLayer::overriding(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    });
    let [a, b, c, d, e] = headers;
    Router::new()
        .route("/dashboard", get(overview))
        .route("/dashboard/login", get(login_page).post(login))
        .route("/dashboard/logout", post(logout))
        .route("/dashboard/dead-letters", get(dead_letters))
        .route("/dashboard/dead-letters/{id}", get(dead_letter))
        .route(
            "/dashboard/dead-letters/{id}/{action}",
            post(decide_dead_letter),
        )
        .route("/dashboard/conflicts", get(conflicts))
        .route("/dashboard/conflicts/{id}", get(conflict))
        .route("/dashboard/conflicts/{id}/resolve", post(resolve_conflict))
        .route("/dashboard/journal", get(journal))
        .route("/dashboard/balances", get(balances))
        .route("/dashboard/payouts", get(payouts))
        .route("/dashboard/payouts/{id}", get(payout))
        .with_state(state)
        .layer(a)
        .layer(b)
        .layer(c)
        .layer(d)
        .layer(e)
}

/// A page that could not be shown.
#[derive(Debug)]
struct PageError(StatusCode, String);

impl<E: std::fmt::Display> From<E> for PageError {
    fn from(error: E) -> Self {
        tracing::warn!(%error, "dashboard");
        PageError(
            StatusCode::SERVICE_UNAVAILABLE,
            "The database is unavailable; try again.".into(),
        )
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        (
            self.0,
            layout("Error", None, html! { p.error { (self.1) } }),
        )
            .into_response()
    }
}

type Page = Result<Markup, PageError>;

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:0;color:#222}nav{background:#1d3557;padding:8px 16px}\
nav a,nav button{color:#fff;margin-right:14px;text-decoration:none;background:none;border:0;font:inherit;cursor:pointer}\
main{padding:16px}table{border-collapse:collapse;margin:8px 0}td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#f1f3f5}.num{text-align:right;font-variant-numeric:tabular-nums}.error{color:#b00020}.muted{color:#777}\
.alert{background:#fdecea;border:1px solid #e0a0a0;border-radius:6px;padding:8px 14px}.cards{display:flex;gap:12px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px}.card b{font-size:22px;display:block}\
form.action{display:inline-block;margin-right:16px;border:1px solid #ddd;padding:8px}.chart rect.a,.chart .a{fill:#457b9d;color:#457b9d}\
.chart rect.b,.chart .b{fill:#e76f51;color:#e76f51}pre{white-space:pre-wrap;max-width:70ch;background:#f8f9fa;padding:6px}\
.side{display:flex;gap:24px}";

fn layout(title: &str, session: Option<&Session>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { (title) " · settle" } style { (STYLE) } }
            body {
                nav {
                    a href="/dashboard" { "settle" }
                    a href="/dashboard/dead-letters" { "Dead letters" }
                    a href="/dashboard/conflicts" { "Conflicts" }
                    a href="/dashboard/journal" { "Journal" }
                    a href="/dashboard/balances" { "Balances" }
                    a href="/dashboard/payouts" { "Payouts" }
                    @if let Some(session) = session {
                        form method="post" action="/dashboard/logout" style="display:inline" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            button type="submit" { "Log out " (session.caller.name) " (" (session.caller.role.as_str()) ")" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

async fn login_page(State(state): State<DashboardState>, headers: HeaderMap) -> Markup {
    login_form(None, cookie_dropped(&state, &headers))
}

/// Why the browser will drop a `Secure` session cookie on this request, if it will: the page was
/// reached over plain HTTP (no proxy said `X-Forwarded-Proto: https`) at an address that is not
/// loopback, where browsers send `Secure` cookies back only over HTTPS.
fn cookie_dropped(state: &DashboardState, headers: &HeaderMap) -> Option<String> {
    if !state.cookie_secure {
        return None;
    }
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"));
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let name = host
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name);
    let loopback = name == "localhost"
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!https && !loopback).then(|| {
        format!(
            "This page came over plain HTTP to {host}: your browser will not send the session cookie back (it is Secure), so logging in will lead back here. Reach the dashboard over HTTPS (a TLS-terminating proxy that sets X-Forwarded-Proto: https), or at a loopback address, or set dashboard.cookie_secure = false on a trusted network."
        )
    })
}

fn login_form(error: Option<&str>, warning: Option<String>) -> Markup {
    layout(
        "Log in",
        None,
        html! {
            @if let Some(warning) = warning { p.alert id="cookie-warning" { (warning) } }
            @if let Some(error) = error { p.error { (error) } }
            form method="post" action="/dashboard/login" {
                label { "Token " input type="password" name="token" autocomplete="off" autofocus; }
                " " button type="submit" id="login" { "Log in" }
            }
            p.muted { "The same bearer tokens as the API; ops may act, finance reads." }
        },
    )
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(
    State(state): State<DashboardState>,
    Extension(ClientAddress(client)): Extension<ClientAddress>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let warning = cookie_dropped(&state, &headers);
    if let Err(throttled) = state.guard.admit(client, "dashboard") {
        return throttled_page(throttled, warning);
    }
    match state.tokens.caller(form.token.trim()) {
        Some(caller) => {
            tracing::info!(actor = %caller.name, role = caller.role.as_str(), client = %client, "dashboard login");
            let id = state.sessions.open(caller);
            let cookie = session::cookie(&id, state.cookie_secure);
            match warning {
                // Redirecting would only come back to the form without the cookie.
                Some(warning) => (
                    [(SET_COOKIE, cookie)],
                    login_form(
                        Some("Logged in, but this browser will not keep the session."),
                        Some(warning),
                    ),
                )
                    .into_response(),
                None => ([(SET_COOKIE, cookie)], Redirect::to("/dashboard")).into_response(),
            }
        }
        None => match state.guard.failed(client, "dashboard") {
            Ok(()) => (
                StatusCode::UNAUTHORIZED,
                login_form(Some("That token is not valid."), warning),
            )
                .into_response(),
            Err(throttled) => throttled_page(throttled, warning),
        },
    }
}

/// 429 with `Retry-After`: too many failed logins from this address.
fn throttled_page(throttled: Throttled, warning: Option<String>) -> Response {
    let secs = throttled.retry_after_secs();
    let message = format!("Too many failed attempts from this address; try again in {secs} s.");
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(RETRY_AFTER, secs.to_string())],
        login_form(Some(&message), warning),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn logout(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    headers: HeaderMap,
    parts: SessionCookie,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, false) {
        return refused;
    }
    state.sessions.close(&parts.0);
    (
        [(SET_COOKIE, session::cleared_cookie(state.cookie_secure))],
        Redirect::to("/dashboard/login"),
    )
        .into_response()
}

/// The raw session id (for logging out).
#[derive(Debug)]
struct SessionCookie(String);

impl FromRequestParts<DashboardState> for SessionCookie {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &DashboardState,
    ) -> Result<Self, Self::Rejection> {
        session::session_id(parts)
            .map(SessionCookie)
            .ok_or_else(|| Redirect::to("/dashboard/login").into_response())
    }
}

/// The refusal of an action, if it is refused. An action needs the session's CSRF token, a same-origin request, and (unless `any_role`) a
/// role that may act.
fn check_action(
    session: &Session,
    headers: &HeaderMap,
    csrf: &str,
    needs_ops: bool,
) -> Option<Response> {
    let forbidden = |why: &str| {
        (
            StatusCode::FORBIDDEN,
            layout("Forbidden", Some(session), html! { p.error { (why) } }),
        )
            .into_response()
    };
    if needs_ops && !session.caller.role.may_act() {
        return Some(forbidden("This role may read but not act."));
    }
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let same_origin = headers
        .get(ORIGIN)
        .and_then(|o| o.to_str().ok())
        .is_none_or(|origin| same_origin(origin, host));
    if !same_origin || csrf.len() != session.csrf.len() || csrf != session.csrf {
        return Some(forbidden(
            "The form is stale or did not come from this dashboard; reload the page.",
        ));
    }
    None
}

/// Whether `Origin` names exactly this host: `http://` or `https://`, then the `Host` header's
/// value and nothing else (no path, no other port, no suffix trick like `evil.example/x.host`).
fn same_origin(origin: &str, host: &str) -> bool {
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    !host.is_empty() && authority.is_some_and(|authority| authority.eq_ignore_ascii_case(host))
}

async fn overview(State(state): State<DashboardState>, Viewer(session): Viewer) -> Page {
    let gauges = state.store.gauges().await?;
    let activity = state.store.activity(14).await?;
    let days: Vec<(String, i64, i64)> = activity
        .iter()
        .map(|(d, a, b)| (d.to_string(), *a, *b))
        .collect();
    let open: i64 = gauges.open_dead_letters.iter().map(|(_, n)| n).sum();
    Ok(layout(
        "Overview",
        Some(&session),
        html! {
            @for (source, open) in &gauges.provider_auth {
                p.alert id="provider-auth" {
                    "The API of source " b { (source) } " refuses its key: " (open)
                    " event(s) wait in the dead letter with code provider_auth. Fix the source's "
                    code { "api_key_env" } " (a restricted key that can read balance transactions, charges, refunds, disputes and payouts), then requeue them: "
                    code { "settle dead-letters requeue --source " (source) " --error-code provider_auth --reason \"key fixed\"" }
                }
            }
            div.cards {
                div.card { b id="queue-depth" { (gauges.queue_depth) } "jobs in the queue" }
                div.card { b { (gauges.oldest_pending_age_secs) " s" } "oldest due job waiting" }
                div.card { b id="open-dead-letters" { a href="/dashboard/dead-letters" { (open) } } "open dead letters" }
                div.card { b id="open-conflicts" { a href="/dashboard/conflicts" { (gauges.open_conflicts) } } "open conflicts" }
            }
            (chart::bars("Last 14 days (UTC)", ("deliveries recorded", "entries posted"), &days))
        },
    ))
}

#[derive(Debug, Default, Deserialize)]
struct DeadLetterQuery {
    state: Option<String>,
    source: Option<String>,
    error_code: Option<String>,
    cursor: Option<i64>,
}

fn non_empty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}

async fn dead_letters(
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
            @if let Some(cursor) = page.next_cursor {
                a href=(format!("?state={wanted}&cursor={cursor}")) { "Older →" }
            }
        },
    ))
}

async fn dead_letter(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Path(id): Path<i64>,
) -> Page {
    let Some(detail) = state.store.dead_letter(id).await? else {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            format!("No dead letter {id}."),
        ));
    };
    let (d, e) = (&detail.dead_letter, &detail.event);
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
            @if d.state == "open" && session.caller.role.may_act() {
                h2 { "Decide" }
                form.action method="post" action=(format!("/dashboard/dead-letters/{id}/requeue")) {
                    input type="hidden" name="csrf" value=(session.csrf);
                    label { "Reason " input name="reason" id="requeue-reason"; }
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
                         td { (a.outcome.clone().unwrap_or_else(|| "running".into())) } td { (a.error.clone().unwrap_or_default()) } }
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

#[derive(Debug, Deserialize)]
struct ActionForm {
    csrf: String,
    #[serde(default)]
    reason: String,
}

async fn decide_dead_letter(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Path((id, action)): Path<(i64, String)>,
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

async fn conflicts(State(state): State<DashboardState>, Viewer(session): Viewer) -> Page {
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

async fn conflict(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Path(id): Path<i64>,
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
            @if detail.conflict.state == "open" && session.caller.role.may_act() {
                form.action method="post" action=(format!("/dashboard/conflicts/{id}/resolve")) {
                    input type="hidden" name="csrf" value=(session.csrf);
                    label { "Reason " input name="reason" required; }
                    " " button type="submit" { "Resolve" }
                }
            }
        },
    ))
}

async fn resolve_conflict(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    Path(id): Path<i64>,
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

#[derive(Debug, Default, Deserialize)]
struct JournalQuery {
    from: Option<String>,
    to: Option<String>,
    account: Option<String>,
    currency: Option<String>,
    source: Option<String>,
    cursor: Option<String>,
}

fn date(text: &Option<String>) -> Option<NaiveDate> {
    text.as_deref()
        .and_then(|t| NaiveDate::parse_from_str(t, "%Y-%m-%d").ok())
}

async fn journal(
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
        ..JournalFilter::default()
    };
    let after = query.cursor.as_deref().and_then(JournalCursor::parse);
    let page = state.store.journal(&filter, after, 50).await?;
    let keep = |name: &str, value: &Option<String>| {
        value
            .as_ref()
            .map(|v| format!("&{name}={v}"))
            .unwrap_or_default()
    };
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
                " " button type="submit" { "Filter" }
            }
            table id="journal" {
                tr { th { "Entry" } th { "Date" } th { "Description" } th { "Account" } th.num { "Debit" } th.num { "Credit" } th { "Cur" } }
                @for entry in &page.items {
                    @for line in &entry.lines {
                        tr {
                            td { @if line.line_no == 1 { (entry.id) } }
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
                a href=(format!("?cursor={cursor}{}{}{}{}{}", keep("from", &query.from), keep("to", &query.to),
                    keep("account", &query.account), keep("currency", &query.currency), keep("source", &query.source))) { "Next →" }
            }
        },
    ))
}

#[derive(Debug, Default, Deserialize)]
struct BalanceQueryForm {
    as_of: Option<String>,
}

async fn balances(
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

async fn payouts(State(state): State<DashboardState>, Viewer(session): Viewer) -> Page {
    let items = state.store.payouts(None, 100).await?;
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
        },
    ))
}

async fn payout(
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
            p { "Status: " strong { (format!("{:?}", r.status)) } " · payout " (r.payout_amount.clone().unwrap_or_else(|| "-".into()))
                " · items " (r.items_net) " · difference " (r.difference) " " (r.currency.clone().unwrap_or_default()) }
            table {
                tr { th { "Entry" } th { "Date" } th { "Kind" } th { "Movement" } th.num { "Net" } }
                @for i in &r.items { tr { td { (i.entry_id) } td { (i.effective_date) } td { (i.kind) } td { (i.movement_id) } td.num { (i.net) } } }
            }
        },
    ))
}

#[cfg(test)]
mod origin_tests {
    use super::same_origin;

    #[test]
    fn only_this_exact_host_is_the_same_origin() {
        let host = "settle.example.com:8443";
        assert!(same_origin("https://settle.example.com:8443", host));
        assert!(same_origin("http://SETTLE.example.com:8443", host));
        for other in [
            "https://evil.example/settle.example.com:8443",
            "https://evil.settle.example.com:8443",
            "https://settle.example.com:8443.evil.example",
            "https://settle.example.com",
            "null",
            "settle.example.com:8443",
            "https://settle.example.com:8443/",
        ] {
            assert!(!same_origin(other, host), "{other}");
        }
        assert!(!same_origin("http://", ""));
    }
}
