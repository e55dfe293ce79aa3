//! Providers: each checks its own signature scheme, then adapts its payload into canonical
//! settlement events. Nothing here writes anything.

mod adyen;
#[doc(hidden)]
pub mod fuzzing;
pub mod signature;
mod standard;
mod stripe;

use axum::http::HeaderMap;
use ledger::NewEvent;

use crate::source::{Provider, Source};
use signature::SignatureError;

/// What an authentic delivery turned out to be.
#[derive(Debug)]
pub enum Adapted {
    /// Authentic, but nothing to book: acknowledged, nothing recorded.
    Ignored(Ignore),
    /// One event (or one per Adyen item), each valid or kept with its validation error.
    Events(Vec<NewEvent>),
}

/// Why an authentic delivery is acknowledged without being recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignore {
    /// Not a settlement-relevant type.
    NotSettlement,
    /// About a connected account (Stripe Connect) of a source that does not post them.
    ConnectedAccount,
    /// Of the other mode (a test-mode event at a live source, or the reverse).
    OtherMode,
    /// An update that names no money movement the event's object did not name before.
    NoMovement,
}

impl Ignore {
    pub fn as_str(self) -> &'static str {
        match self {
            Ignore::NotSettlement => "not_settlement",
            Ignore::ConnectedAccount => "connected_account",
            Ignore::OtherMode => "other_mode",
            Ignore::NoMovement => "no_movement",
        }
    }
}

/// An authentic delivery whose event key cannot be read: 400, nothing written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unparseable(pub &'static str);

/// Why a delivery was turned away before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error(transparent)]
    Unparseable(#[from] Unparseable),
}

/// Verifies the delivery on its raw bytes, then (only if authentic) reads it.
pub(crate) fn authenticate(
    source: &Source,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<Adapted, Rejection> {
    match source.provider {
        Provider::Standard => {
            let message_id = standard::verify(source, headers, body, now)?;
            Ok(standard::adapt(source, message_id, body)?)
        }
        Provider::Stripe => {
            stripe::verify(source, headers, body, now)?;
            Ok(stripe::adapt(source, body)?)
        }
        Provider::Adyen => {
            let notification = adyen::verify(source, body)?;
            Ok(adyen::adapt(source, &notification)?)
        }
    }
}

/// What can be checked of a delivery before its body is read: the signature header is present
/// and readable and, where the scheme signs a timestamp, it is within tolerance. (The
/// signature itself needs the body.)
pub(crate) fn precheck(source: &Source, headers: &HeaderMap, now: i64) -> Result<(), Rejection> {
    match source.provider {
        Provider::Standard => standard::precheck(source, headers, now)?,
        Provider::Stripe => stripe::precheck(source, headers, now)?,
        // Adyen signs each item inside the body.
        Provider::Adyen => {}
    }
    Ok(())
}

/// A header's value as text; absent or not visible ASCII counts as missing.
fn header<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, SignatureError> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .ok_or(SignatureError::Missing(name))
}
