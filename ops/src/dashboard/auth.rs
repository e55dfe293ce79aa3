//! Logging in and out, the session cookie, and the checks every action passes (CSRF token and
//! exact `Origin`).

use axum::extract::{FromRequestParts, State};
use axum::http::header::{ORIGIN, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{Markup, html};
use serde::Deserialize;

use super::session::{Session, Viewer};
use super::{DashboardState, layout, session};
use crate::abuse::Throttled;
use crate::server::ClientAddress;

pub(super) async fn login_page(State(state): State<DashboardState>, headers: HeaderMap) -> Markup {
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
pub(super) struct LoginForm {
    token: String,
}

pub(super) async fn login(
    State(state): State<DashboardState>,
    Extension(ClientAddress(client)): Extension<ClientAddress>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let warning = cookie_dropped(&state, &headers);
    let token = form.token.trim();
    // An empty form is not a failed credential; a valid token passes whatever others at the
    // same address have tried.
    if token.is_empty() {
        return (
            StatusCode::UNAUTHORIZED,
            login_form(Some("Enter a token."), warning),
        )
            .into_response();
    }
    let caller = state.tokens.caller(token);
    if caller.is_none()
        && let Err(throttled) = state.guard.admit(client, "dashboard")
    {
        return throttled_page(throttled, warning);
    }
    match caller {
        Some(caller) => {
            tracing::info!(actor = %caller.name, role = caller.role.as_str(), client = %client, "dashboard login");
            let id = match state.sessions.open(&caller).await {
                Ok(id) => id,
                Err(error) => return error.into_response(),
            };
            let cookie = session::cookie(&id, state.cookie_secure, state.sessions.lifetime());
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
pub(super) struct CsrfForm {
    csrf: String,
}

pub(super) async fn logout(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    headers: HeaderMap,
    parts: SessionCookie,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, false) {
        return refused;
    }
    if let Err(error) = state.sessions.close(&parts.0).await {
        return error.into_response();
    }
    (
        [(SET_COOKIE, session::cleared_cookie(state.cookie_secure))],
        Redirect::to("/dashboard/login"),
    )
        .into_response()
}

/// Ends every session of the caller's token, in every operator process (a laptop left logged
/// in, a session id that may have leaked).
pub(super) async fn logout_everywhere(
    State(state): State<DashboardState>,
    Viewer(session): Viewer,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = check_action(&session, &headers, &form.csrf, false) {
        return refused;
    }
    match state.sessions.close_all_of(&session.caller.name).await {
        Ok(closed) => {
            tracing::info!(actor = %session.caller.name, sessions = closed, "dashboard logout everywhere");
            (
                [(SET_COOKIE, session::cleared_cookie(state.cookie_secure))],
                Redirect::to("/dashboard/login"),
            )
                .into_response()
        }
        Err(error) => error.into_response(),
    }
}

/// The raw session id (for logging out).
#[derive(Debug)]
pub(super) struct SessionCookie(String);

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
pub(super) fn check_action(
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
