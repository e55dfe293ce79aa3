//! Starting jobs' attempts, one or a group, written once for both backends over [`StartRows`].
//! The start rule itself is `job::start_gate` and `job::start_step`; PostgreSQL runs it in
//! PL/pgSQL (one round trip per start or per group) and is tested against the Rust rule on every
//! case of its table, SQLite runs the Rust rule in its write transaction.

use tracing::debug;

use crate::job::{AttemptStart, JobRef};
use crate::store::StoreError;
use crate::store::post::{distinct_events, group_or_alone};

/// A backend's attempt starts, each committed before the attempt does any work.
pub(super) trait StartRows {
    /// Starts one job's attempt in its own transaction (`alone`: the caller has made sure
    /// nothing else is in flight in its process, so a suspect start runs all the same).
    async fn start_one(
        &self,
        job: &JobRef,
        worker: &str,
        attempts_max: u32,
        lock_timeout_ms: u64,
        alone: bool,
    ) -> Result<AttemptStart, StoreError>;

    /// Starts each job's attempt as [`StartRows::start_one`] would, in one transaction (its
    /// events locked in id order). `Err`: nothing of it is kept, except for `Corrupt`, which
    /// says it committed and its answer cannot be read.
    async fn start_group(
        &self,
        starts: &[(JobRef, String)],
        attempts_max: u32,
        lock_timeout_ms: u64,
    ) -> Result<Vec<Result<AttemptStart, StoreError>>, StoreError>;
}

/// Starts several jobs' attempts in one transaction (one commit for all), each exactly as
/// alone; if the group fails (a lock timeout, a deadlock, a lost connection) each job is started
/// on its own, so one job's trouble is only its own.
pub(super) async fn start_attempts<B: StartRows>(
    backend: &B,
    starts: &[(JobRef, String)],
    attempts_max: u32,
    lock_timeout_ms: u64,
) -> Vec<Result<AttemptStart, StoreError>> {
    let group = async {
        match backend
            .start_group(starts, attempts_max, lock_timeout_ms)
            .await
        {
            // Starting again would take the group's own open attempts for died ones: each job
            // is handed back instead.
            Err(StoreError::Corrupt(detail)) => Ok(starts
                .iter()
                .map(|_| Err(StoreError::Corrupt(detail.clone())))
                .collect()),
            answered => answered,
        }
    };
    group_or_alone!(
        starts,
        starts.iter().map(|(job, _)| job),
        "start",
        group,
        |start| backend.start_one(&start.0, &start.1, attempts_max, lock_timeout_ms, false)
    )
}
