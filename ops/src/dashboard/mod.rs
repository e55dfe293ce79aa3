//! The dashboard: server-rendered HTML (maud) for the overview, dead letters, conflicts, the
//! journal, balances and payouts. The same tokens and roles as the API: a token typed into the
//! login form opens a session (cookie); `finance` sees no action; every action form carries the
//! session's CSRF token and is refused without it. Each area is a module: `auth` (login, logout,
//! the checks on actions), `dead_letters`, `conflicts`, `finance` (journal, balances, payouts).

mod auth;
mod chart;
mod conflicts;
mod dead_letters;
mod entries;
mod events;
mod finance;
mod session;
mod sources;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ledger::Store;
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::abuse::AuthGuard;
use crate::auth::Tokens;
use auth::{check_action, login, login_page, logout, logout_everywhere};
use conflicts::{conflict, conflicts, resolve_conflict};
use dead_letters::{dead_letter, dead_letters, decide_dead_letter};
use finance::{balances, journal, payout, payouts};
use session::{Session, Sessions, Viewer};

#[derive(Clone, Debug)]
pub struct DashboardState {
    store: Store,
    tokens: Arc<Tokens>,
    sessions: Sessions,
    guard: Arc<AuthGuard>,
    cookie_secure: bool,
    sources: crate::api::SourceNames,
    /// The sources' providers: their feeds and their own ledgers (the sources page).
    resolvers: workers::Resolvers,
    rules: ledger::PostingRules,
    /// What each source's provider says about how it books (source, note).
    notes: Arc<Vec<(String, String)>>,
}

/// The `[dashboard]` settings.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DashboardSettings {
    /// The session cookie is `Secure` (sent back only over HTTPS, or to a loopback address):
    /// right behind a TLS-terminating proxy. `false` only for plain HTTP on a trusted network.
    pub cookie_secure: bool,
    /// How long a session lasts after its login (8 hours).
    pub session_lifetime_secs: u64,
}

impl Default for DashboardSettings {
    fn default() -> Self {
        Self {
            cookie_secure: true,
            session_lifetime_secs: 8 * 3600,
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
    sources: crate::api::SourceNames,
    providers: (
        workers::Resolvers,
        ledger::PostingRules,
        Vec<(String, String)>,
    ),
) -> Router {
    let (resolvers, rules, notes) = providers;
    let state = DashboardState {
        store: store.clone(),
        tokens,
        sessions: Sessions::new(
            store.clone(),
            std::time::Duration::from_secs(settings.session_lifetime_secs),
        ),
        guard,
        cookie_secure: settings.cookie_secure,
        sources,
        resolvers,
        rules,
        notes: Arc::new(notes),
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
        .route("/dashboard/logout-everywhere", post(logout_everywhere))
        .route("/dashboard/dead-letters", get(dead_letters))
        .route("/dashboard/dead-letters/bulk", post(dead_letters::bulk))
        .route("/dashboard/dead-letters/{id}", get(dead_letter))
        .route(
            "/dashboard/dead-letters/{id}/{action}",
            post(decide_dead_letter),
        )
        .route("/dashboard/events", get(events::events))
        .route("/dashboard/events/{id}", get(events::event))
        .route(
            "/dashboard/events/{id}/erase-payload",
            post(events::erase_payload),
        )
        .route("/dashboard/sources", get(sources::sources))
        .route("/dashboard/sources/{name}/books", get(sources::books))
        .route(
            "/dashboard/sources/{name}/{action}",
            post(sources::pause_or_resume),
        )
        .route("/dashboard/conflicts", get(conflicts))
        .route("/dashboard/conflicts/{id}", get(conflict))
        .route("/dashboard/conflicts/{id}/resolve", post(resolve_conflict))
        .route("/dashboard/journal", get(journal))
        .route("/dashboard/journal/{id}", get(entries::entry))
        .route("/dashboard/journal/{id}/correct", post(entries::correct))
        .route("/dashboard/balances", get(balances))
        .route("/dashboard/payouts", get(payouts))
        .route("/dashboard/payouts/{id}", get(payout))
        .route("/dashboard/{*rest}", get(not_found).post(not_found))
        .with_state(state)
        .layer(a)
        .layer(b)
        .layer(c)
        .layer(d)
        .layer(e)
}

/// `?name=value&...` of the pairs that have a value, each encoded: a link that pages a list
/// keeps every filter it was shown with.
fn query_string(pairs: &[(&str, Option<&str>)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            query.append_pair(name, value);
        }
    }
    format!("?{}", query.finish())
}

/// A numeric id from the URL; anything else is a 400 page saying so (not the framework's
/// plain-text parse error).
#[derive(Debug, Clone, Copy)]
struct Id(i64);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Id {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(segments) =
            axum::extract::Path::<Vec<String>>::from_request_parts(parts, state)
                .await
                .map_err(|_| {
                    PageError(
                        StatusCode::BAD_REQUEST,
                        "This address is not one the dashboard knows.".into(),
                    )
                })?;
        let text = segments.first().map(String::as_str).unwrap_or_default();
        text.parse().map(Id).map_err(|_| {
            PageError(
                StatusCode::BAD_REQUEST,
                format!("{text:?} is not an id: ids are whole numbers, as the lists show them."),
            )
        })
    }
}

/// Any dashboard address that names no page.
async fn not_found() -> PageError {
    PageError(
        StatusCode::NOT_FOUND,
        "There is no such page. The menu above lists every one.".into(),
    )
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
                    a href="/dashboard/events" { "Events" }
                    a href="/dashboard/dead-letters" { "Dead letters" }
                    a href="/dashboard/conflicts" { "Conflicts" }
                    a href="/dashboard/journal" { "Journal" }
                    a href="/dashboard/balances" { "Balances" }
                    a href="/dashboard/payouts" { "Payouts" }
                    a href="/dashboard/sources" { "Sources" }
                    @if let Some(session) = session {
                        form method="post" action="/dashboard/logout" style="display:inline" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            button type="submit" id="logout" { "Log out " (session.caller.name) " (" (session.caller.role.as_str()) ")" }
                        }
                        form method="post" action="/dashboard/logout-everywhere" style="display:inline" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            button type="submit" id="logout-everywhere" { "Log out everywhere" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

async fn overview(State(state): State<DashboardState>, Viewer(session): Viewer) -> Page {
    let gauges = state.store.gauges().await?;
    let activity = state.store.activity(14).await?;
    let days: Vec<(String, i64, i64)> = activity
        .iter()
        .map(|(d, a, b)| (d.to_string(), *a, *b))
        .collect();
    let open: i64 = gauges.open_dead_letters.iter().map(|(_, n)| n).sum();
    let paused = state.store.source_pauses(true, 1_000).await?;
    Ok(layout(
        "Overview",
        Some(&session),
        html! {
            @for p in &paused {
                p.alert id=(format!("paused-{}", p.source)) {
                    "Source " b { (p.source) } " is paused since " (p.paused_at.format("%Y-%m-%d %H:%M:%S"))
                    " by " (p.paused_by) " (" (p.pause_reason) "): its deliveries are recorded, nothing of it posts. "
                    a href="/dashboard/sources" { "Resume it" }
                }
            }
            @for (source, open) in &gauges.provider_auth {
                p.alert id="provider-auth" {
                    "The API of source " b { (source) } " refuses its key: " (open)
                    " event(s) wait in the dead letter with code provider_auth. Fix the source's "
                    code { "api_key_env" } " (a restricted key that can read balance transactions, charges, refunds, disputes and payouts), then requeue them: "
                    code { "settle dead-letters requeue --source " (source) " --error-code provider_auth --reason \"key fixed\"" }
                }
            }
            @for (account, entries) in &gauges.suspense {
                p.alert id=(format!("suspense-{account}")) {
                    (entries) " entr" (if *entries == 1 { "y is" } else { "ies are" }) " booked to "
                    a href=(format!("/dashboard/journal?account={account}")) { (account) }
                    ": the provider named a category settle has no account for. Classify each with a correction, and name the category's account in the source's "
                    code { "[sources.accounts.chart]" } "."
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

#[derive(Debug, Deserialize)]
struct ActionForm {
    csrf: String,
    #[serde(default)]
    reason: String,
}

fn non_empty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}
