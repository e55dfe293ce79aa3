//! Why posting failed, classified where it was born: transient (a later attempt may succeed) or
//! permanent (a person decides). A provider's API failures are typed here too, so that every
//! provider classifies them the same way.

use crate::error::StoreError;

/// A call to a provider's API that failed, classified where it was born.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// 5xx, a network error, or no answer in time.
    #[error("the provider's API is unavailable: {detail}")]
    Unavailable {
        detail: String,
        retry_after_ms: Option<u64>,
    },
    /// 429: over the provider's rate limit.
    #[error("the provider's API is rate limiting requests")]
    RateLimited { retry_after_ms: Option<u64> },
    /// 401 or 403: the configured API key is missing, wrong or lacks a permission. A
    /// configuration problem: every event of the source fails the same way until it is fixed.
    #[error(
        "the provider's API refused the key (HTTP {status}): check the source's api_key_env and the key's read permissions"
    )]
    Auth { status: u16 },
    /// 404: the object does not exist (in this account and mode).
    #[error("the provider has no {what}")]
    NotFound { what: String },
    /// An answer that does not parse as the object asked for.
    #[error("the provider's answer cannot be read: {0}")]
    Response(String),
    /// The provider's facts do not add up (fee parts, net, currency, a transaction of another
    /// object).
    #[error("the provider's facts are inconsistent: {0}")]
    Facts(String),
    /// This worker has no API configuration for the event's source.
    #[error("no API configuration for source {0} in this worker")]
    NotConfigured(String),
}

impl ProviderError {
    /// A worker without the source's configuration may be one of a fleet whose others have
    /// it: that is worth another attempt (elsewhere, or after a restart with the setting).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ProviderError::Unavailable { .. }
                | ProviderError::RateLimited { .. }
                | ProviderError::NotConfigured(_)
        )
    }

    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::Unavailable { .. } => "provider_unavailable",
            ProviderError::RateLimited { .. } => "provider_rate_limited",
            ProviderError::Auth { .. } => "provider_auth",
            ProviderError::NotFound { .. } => "provider_not_found",
            ProviderError::Response(_) => "provider_response",
            ProviderError::Facts(_) => "provider_facts",
            ProviderError::NotConfigured(_) => "provider_not_configured",
        }
    }

    /// How long the provider asked to wait (`Retry-After`).
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            ProviderError::Unavailable { retry_after_ms, .. }
            | ProviderError::RateLimited { retry_after_ms } => *retry_after_ms,
            _ => None,
        }
    }
}

/// Why posting failed, classified where it was born: [`PostError::is_transient`] decides
/// whether the job may retry.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("invalid facts: {0}")]
    InvalidFacts(String),
    #[error("source key {source_key} is already posted with different facts")]
    SourceReplayConflict { source_key: String },
    #[error("payout {payout_id} has no posted payout_paid entry to reverse yet")]
    DependencyNotReady { payout_id: String },
    #[error("reversal of payout {payout_id} does not match its paid entry: {detail}")]
    ReversalMismatch { payout_id: String, detail: String },
    #[error("entry does not balance: {0}")]
    Unbalanced(String),
    #[error("{source_key} is already paid out by payout {tied}, not {payout}")]
    PayoutMismatch {
        source_key: String,
        payout: String,
        tied: String,
    },
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("job payload is unreadable: {0}")]
    UndecodableJob(String),
    #[error("stored event is unreadable: {0}")]
    CorruptEvent(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PostError {
    /// Whether a later attempt may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            PostError::DependencyNotReady { .. } => true,
            PostError::Provider(error) => error.is_transient(),
            PostError::Store(error) => error.is_transient(),
            _ => false,
        }
    }

    /// How long the cause asked to wait before trying again, if it said.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            PostError::Provider(error) => error.retry_after_ms(),
            _ => None,
        }
    }

    /// A stable code for the dead letter and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            PostError::InvalidFacts(_) => "invalid_facts",
            PostError::SourceReplayConflict { .. } => "source_replay_conflict",
            PostError::DependencyNotReady { .. } => "dependency_not_ready",
            PostError::ReversalMismatch { .. } => "reversal_mismatch",
            PostError::Unbalanced(_) => "unbalanced",
            PostError::PayoutMismatch { .. } => "payout_mismatch",
            PostError::Provider(error) => error.code(),
            PostError::UndecodableJob(_) => "undecodable_job",
            PostError::CorruptEvent(_) => "corrupt_event",
            PostError::Store(error) if error.is_transient() => "database_unavailable",
            PostError::Store(_) => "database_error",
        }
    }
}
