//! settle's worker fleet: apalis workers that turn recorded events into journal entries.
//!
//! apalis provides the queue (fetching with `SKIP LOCKED`, heartbeats, orphan rescue, NOTIFY).
//! Where it falls short of settle's guarantees, this crate adds the smallest thing on top:
//! attempts are counted in settle's own `job_attempts` (a rescue counts; a job that kills its
//! worker every time is dead-lettered), retries are scheduled with backoff by moving the job's
//! `run_at`, the dead letter is settle's own table, payloads that do not decode are
//! dead-lettered instead of stopping the worker, failed workers restart with backoff, and a
//! sweep re-enqueues anything left without a live job.

pub mod chaos;
pub mod feed;
mod fleet;
mod group;
mod resolvers;
pub mod retry;
mod runner;
pub mod sequence;
mod settings;
mod wake;

pub use fleet::{WorkerHealth, Workers, WorkersError};
pub use resolvers::Resolvers;
pub use settings::WorkerSettings;
