//! Dashboard sessions, kept in the database so that every operator process (`serve`, `console`)
//! shares them and they survive a restart. A token typed into the login form becomes a random
//! session id in a `Secure; HttpOnly; SameSite=Strict` cookie; the database keeps only the id's
//! SHA-256, who logged in with which role, the session's CSRF token (which every action form
//! carries) and when it expires. The token itself is never stored or sent back. A session ends
//! at its expiry, at logout, when its token leaves the configuration (or is replaced, even under
//! the same name, or changes role), or when its holder logs out everywhere.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::header::COOKIE;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use ledger::Store;
use ledger::store::sessions::NewSession;
use sha2::{Digest, Sha256};

use super::{DashboardState, PageError};
use crate::auth::{Caller, Tokens};

pub(super) const COOKIE_NAME: &str = "settle_session";

#[derive(Clone, Debug)]
pub(super) struct Session {
    pub caller: Caller,
    pub csrf: String,
}

/// The sessions of the store, each living `lifetime`.
#[derive(Clone, Debug)]
pub(super) struct Sessions {
    store: Store,
    lifetime: Duration,
}

fn random_hex() -> String {
    let bytes: Vec<u8> = [ulid::Ulid::generate(), ulid::Ulid::generate()]
        .iter()
        .flat_map(|u| u.to_bytes())
        .collect();
    hex::encode(bytes)
}

/// What the store keys a session by: the SHA-256 of its id.
fn key(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

impl Sessions {
    pub(super) fn new(store: Store, lifetime: Duration) -> Self {
        Self { store, lifetime }
    }

    pub(super) fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// A new session for `caller`; returns its id (for the cookie only).
    pub(super) async fn open(&self, caller: &Caller) -> Result<String, PageError> {
        let id = random_hex();
        let now = chrono::Utc::now();
        let lifetime = chrono::Duration::from_std(self.lifetime).unwrap_or(chrono::Duration::MAX);
        self.store
            .open_session(&NewSession {
                id_sha256: &key(&id),
                actor: &caller.name,
                role: caller.role.as_str(),
                token_tag: &caller.token_tag,
                csrf: &random_hex(),
                now,
                expires_at: now + lifetime,
            })
            .await?;
        Ok(id)
    }

    /// The open session under `id`, while the very token it was opened with is still
    /// configured, under the same name and with the role it had.
    async fn get(&self, id: &str, tokens: &Tokens) -> Result<Option<Session>, PageError> {
        let Some(stored) = self.store.session(&key(id), chrono::Utc::now()).await? else {
            return Ok(None);
        };
        Ok(tokens
            .tagged(&stored.token_tag)
            .filter(|caller| caller.name == stored.actor && caller.role.as_str() == stored.role)
            .map(|caller| Session {
                caller,
                csrf: stored.csrf,
            }))
    }

    pub(super) async fn close(&self, id: &str) -> Result<(), PageError> {
        self.store.close_session(&key(id)).await?;
        Ok(())
    }

    /// Ends every session of `actor`, in every process; answers how many.
    pub(super) async fn close_all_of(&self, actor: &str) -> Result<u64, PageError> {
        Ok(self.store.close_sessions_of(actor).await?)
    }
}

/// The cookie that opens a session (`Secure` unless configured otherwise).
pub(super) fn cookie(id: &str, secure: bool, lifetime: Duration) -> String {
    format!(
        "{COOKIE_NAME}={id}; Path=/dashboard; HttpOnly;{} SameSite=Strict; Max-Age={}",
        if secure { " Secure;" } else { "" },
        lifetime.as_secs()
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
        .filter(|id| !id.is_empty())
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
        let Some(id) = session_id(parts) else {
            return Err(Redirect::to("/dashboard/login").into_response());
        };
        match state.sessions.get(&id, &state.tokens).await {
            Ok(Some(session)) => Ok(Viewer(session)),
            Ok(None) => Err(Redirect::to("/dashboard/login").into_response()),
            Err(error) => Err(error.into_response()),
        }
    }
}
