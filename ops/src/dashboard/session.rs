//! Dashboard sessions: a token typed into the login form becomes a random session id in a
//! `Secure; HttpOnly; SameSite=Strict` cookie. The token itself is never stored or sent back.
//! Each session has its own CSRF token, which every action form carries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::header::COOKIE;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};

use super::DashboardState;
use crate::auth::Caller;

pub(super) const COOKIE_NAME: &str = "settle_session";
const LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most (oldest dropped first).
const SESSIONS_MAX: usize = 10_000;

#[derive(Clone, Debug)]
pub(super) struct Session {
    pub caller: Caller,
    pub csrf: String,
    expires: Instant,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Sessions {
    by_id: Arc<Mutex<HashMap<String, Session>>>,
}

fn random_hex() -> String {
    let bytes: Vec<u8> = [ulid::Ulid::generate(), ulid::Ulid::generate()]
        .iter()
        .flat_map(|u| u.to_bytes())
        .collect();
    hex::encode(bytes)
}

impl Sessions {
    /// A new session for `caller`; returns its id.
    pub(super) fn open(&self, caller: Caller) -> String {
        let id = random_hex();
        let session = Session {
            caller,
            csrf: random_hex(),
            expires: Instant::now() + LIFETIME,
        };
        if let Ok(mut sessions) = self.by_id.lock() {
            let now = Instant::now();
            sessions.retain(|_, s| s.expires > now);
            if sessions.len() >= SESSIONS_MAX
                && let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.expires)
                    .map(|(id, _)| id.clone())
            {
                sessions.remove(&oldest);
            }
            sessions.insert(id.clone(), session);
        }
        id
    }

    fn get(&self, id: &str) -> Option<Session> {
        let sessions = self.by_id.lock().ok()?;
        sessions
            .get(id)
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }

    pub(super) fn close(&self, id: &str) {
        if let Ok(mut sessions) = self.by_id.lock() {
            sessions.remove(id);
        }
    }
}

/// The cookie that opens a session (`Secure` unless configured otherwise).
pub(super) fn cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE_NAME}={id}; Path=/dashboard; HttpOnly;{} SameSite=Strict; Max-Age={}",
        if secure { " Secure;" } else { "" },
        LIFETIME.as_secs()
    )
}

pub(super) fn cleared_cookie(secure: bool) -> String {
    format!(
        "{COOKIE_NAME}=; Path=/dashboard; HttpOnly;{} SameSite=Strict; Max-Age=0",
        if secure { " Secure;" } else { "" }
    )
}

pub(super) fn session_id(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, id)| id.to_owned())
}

/// A logged-in viewer; anyone else is sent to the login page.
#[derive(Debug)]
pub(super) struct Viewer(pub Session);

impl FromRequestParts<DashboardState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &DashboardState,
    ) -> Result<Self, Self::Rejection> {
        session_id(parts)
            .and_then(|id| state.sessions.get(&id))
            .map(Viewer)
            .ok_or_else(|| Redirect::to("/dashboard/login").into_response())
    }
}
