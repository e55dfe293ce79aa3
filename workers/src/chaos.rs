//! A fault-injection hook for the chaos suite, compiled only with the `fault-injection` feature,
//! which only the test crate enables (a release build of `settle` does not contain it; `.ci/run`
//! checks). With it, when the environment names `CHAOS_SETTLE_ABORT_EXTERNAL_ID_PREFIX`, a
//! worker aborts its whole process (as an OOM kill or a segfault would) just before posting an
//! event whose external id starts with that prefix. Without it, the hook does nothing.

use ledger::{EventId, Store};

#[cfg(feature = "fault-injection")]
pub const ABORT_PREFIX_ENV: &str = "CHAOS_SETTLE_ABORT_EXTERNAL_ID_PREFIX";

#[derive(Clone, Debug, Default)]
pub struct Chaos {
    #[cfg(feature = "fault-injection")]
    abort_prefix: Option<String>,
}

#[cfg(feature = "fault-injection")]
impl Chaos {
    pub fn from_env() -> Self {
        Self {
            abort_prefix: std::env::var(ABORT_PREFIX_ENV)
                .ok()
                .filter(|p| !p.is_empty()),
        }
    }

    pub(crate) async fn before_posting(&self, store: &Store, event_id: EventId) {
        let Some(prefix) = &self.abort_prefix else {
            return;
        };
        if let Ok(Some(external_id)) = store.external_id(event_id).await
            && external_id.starts_with(prefix.as_str())
        {
            tracing::error!(%event_id, "chaos: aborting the worker process before posting");
            std::process::abort();
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
impl Chaos {
    pub fn from_env() -> Self {
        Self::default()
    }

    pub(crate) async fn before_posting(&self, _store: &Store, _event_id: EventId) {}
}
