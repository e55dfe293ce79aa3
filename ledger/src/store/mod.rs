//! The only place with SQL. One [`Store`] over the backends: PostgreSQL for fleets, SQLite for
//! the embedded default. Callers (ingress, workers, ops) never see which one they talk to.

mod corrections;
mod decide;
mod driver;
mod failures;
mod finance_reads;
mod movements;
mod pauses;
mod post;
mod postgres;
mod prepare;
mod retention;
mod review_reads;
mod rows;
mod search;
pub mod sessions;
mod sqlite;
mod start;
mod transactions;
mod verify;

use chrono::NaiveDate;
use std::time::Duration;

pub use crate::error::StoreError;
pub use corrections::{Corrected, CorrectionRequest, check_lines};
pub use movements::ResolvedPost;
pub use pauses::{
    PROVIDER_AUTH_ACTOR, PROVIDER_AUTH_REASON, PauseChange, SourcePause, provider_auth_pause,
};
pub use postgres::roles::RUNTIME_ROLES;
pub use retention::{ExpiryRule, PayloadErasure, PruneLine, RetentionPolicy};

use crate::finance::{
    BalanceQuery, BalanceRow, JournalCursor, JournalFilter, JournalPage, OpenReceivable,
    PayoutSummary, Reconciliation,
};
use crate::ids::{EventId, SourceName};
use crate::job::{AttemptStart, FailureDecision, JobRef, Posted, Work};
use crate::post_error::PostError;
use crate::posting::PostingRules;
use crate::record::{Content, NewEvent, Recorded};
use crate::review::{
    ConflictDetail, ConflictView, DeadLetterDetail, DeadLetterFilter, DeadLetterSummary, Decided,
    Decision, DecisionError, EventView, Page, PageRequest,
};
use driver::{
    Connection, EventSearch, FeedRows, FinanceReads, FinanceRows, Fleet, Health, Pauses, Queue,
    Recording, Retention, ReviewReads, Sessions,
};
use start::StartRows;

/// Where a store's schema stands against this build's migrations (`ours`), from the versions its
/// `_sqlx_migrations` lists as applied (`queue`: the queue library's migrations, where they share
/// that table). A version neither knows was made by superseded migrations; with `pending_ok`
/// (about to migrate) unapplied ones are fine.
fn schema_state(
    applied: &[i64],
    ours: &sqlx::migrate::Migrator,
    queue: Option<&sqlx::migrate::Migrator>,
    pending_ok: bool,
) -> Result<(), StoreError> {
    let known = |version: &i64| {
        ours.iter()
            .chain(queue.into_iter().flat_map(|q| q.iter()))
            .any(|m| m.version == *version)
    };
    let unknown: Vec<String> = applied
        .iter()
        .filter(|v| !known(v))
        .map(i64::to_string)
        .collect();
    if !unknown.is_empty() {
        return Err(StoreError::SchemaSuperseded(unknown.join(", ")));
    }
    let pending: Vec<String> = ours
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| format!("{}_{}", m.version, m.description))
        .collect();
    if pending.is_empty() || pending_ok {
        Ok(())
    } else {
        Err(StoreError::MigrationsPending(pending.join(", ")))
    }
}

/// What the store says about the system's backlog, read when metrics are scraped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Jobs not finished yet (waiting, running, or waiting for a retry).
    pub queue_depth: i64,
    /// How long the oldest job that is due has waited to be picked up.
    pub oldest_pending_age_secs: i64,
    pub open_conflicts: i64,
    /// Open dead letters by error class.
    pub open_dead_letters: Vec<(String, i64)>,
    /// Open dead letters whose provider's API refused the configured key (`provider_auth`), by
    /// source: a configuration problem to fix once, then requeue.
    pub provider_auth: Vec<(String, i64)>,
    /// Entries booked to a suspense account (a provider's category settle does not know), by
    /// account: each a review item for a person to classify.
    pub suspense: Vec<(String, i64)>,
}

/// The most bytes of parameters one statement should carry; statements that carry a group are
/// split under it. sqlx (0.9) writes a message larger than one TLS record (16 KiB) in several
/// writes, on a socket without TCP_NODELAY, and Nagle's algorithm then holds the last write
/// until the server's delayed ACK, about 40 ms later. Measured here with TLS on: the ingress at
/// 32 senders p95 47 ms instead of 5 ms; a drain in groups of 64 postings 1,314 postings/s
/// instead of 3,277 without TLS. Not lower: a group of 32 postings (about 14 KiB) split in two
/// statements drained about 20 % slower than in one.
pub const STATEMENT_BYTES_MAX: usize = 15 * 1024;

/// Splits items of the given sizes, in order, into runs of at most `bytes_max` bytes each (an
/// item larger than that alone).
pub fn split_by_bytes(sizes: &[usize], bytes_max: usize) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, size) in sizes.iter().enumerate() {
        if i > start && bytes + size > bytes_max {
            runs.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        runs.push(start..sizes.len());
    }
    runs
}

/// What a load run left in the store ([`Store::load_run_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadRunCounts {
    pub events: i64,
    /// Events of the run with at least one conflicting delivery kept in `event_conflicts`.
    pub conflicted_events: i64,
}

/// One invariant checked by [`Store::verify`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct Check {
    pub name: &'static str,
    pub description: &'static str,
    pub violations: u64,
    /// Up to ten violating rows, named.
    pub samples: Vec<String>,
    /// How long its query took: each check reads what it checks whole (the journal's checks
    /// read every line), so a check's time grows with the store.
    pub took_ms: u64,
}

/// The concrete pool under a store, for the job queue's backend.
#[derive(Clone, Debug)]
pub enum QueuePool {
    Postgres(sqlx::PgPool),
    /// SQLite, with the signal its store raises after committing new jobs.
    Sqlite {
        pool: sqlx::SqlitePool,
        jobs_inserted: std::sync::Arc<tokio::sync::Notify>,
    },
}

/// How a store connects. Every limit has its unit in its name.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub connections_max: u32,
    pub acquire_timeout_ms: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            connections_max: 16,
            acquire_timeout_ms: 3_000,
        }
    }
}

impl StoreOptions {
    fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.acquire_timeout_ms)
    }
}

/// Which database a URL names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BackendKind {
    Postgres,
    Sqlite,
}

impl BackendKind {
    pub fn of_url(url: &str) -> Option<BackendKind> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(BackendKind::Postgres)
        } else if url.starts_with("sqlite:") {
            Some(BackendKind::Sqlite)
        } else {
            None
        }
    }
}

/// settle's storage: events, conflicts, jobs (through the queue's tables), the journal and the
/// sums kept beside it.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Backend,
}

#[derive(Clone, Debug)]
enum Backend {
    Postgres(postgres::PgStore),
    Sqlite(sqlite::SqliteStore),
}

/// Runs the same call on whichever backend the store has.
macro_rules! on_backend {
    ($self:ident, $store:ident => $call:expr) => {
        match &$self.backend {
            Backend::Postgres($store) => $call,
            Backend::Sqlite($store) => $call,
        }
    };
}

mod api;

impl Store {
    /// Connects lazily-checked: the pool is built and one connection is opened to prove the URL.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        match BackendKind::of_url(url) {
            Some(BackendKind::Postgres) => Ok(Store {
                backend: Backend::Postgres(driver::open(url, options).await?),
            }),
            Some(BackendKind::Sqlite) => Ok(Store {
                backend: Backend::Sqlite(driver::open(url, options).await?),
            }),
            None => Err(StoreError::Unsupported(
                "database URL must start with postgres://, postgresql:// or sqlite:",
            )),
        }
    }

    pub fn kind(&self) -> BackendKind {
        match &self.backend {
            Backend::Postgres(_) => BackendKind::Postgres,
            Backend::Sqlite(_) => BackendKind::Sqlite,
        }
    }

    /// Applies the queue's migrations and ours (`migrations/<backend>`), once, even when several
    /// processes start together.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        on_backend!(self, store => store.migrate().await)
    }

    /// Creates the runtime roles of a fleet (those missing) and grants each what it may do
    /// (`store::postgres::roles`). PostgreSQL only: an SQLite file has one user, its owner.
    pub async fn grant_roles(&self) -> Result<(), StoreError> {
        on_backend!(self, store => store.grant_roles().await)
    }

    /// Reachable, and every migration this build knows is applied.
    pub async fn ready(&self) -> Result<(), StoreError> {
        on_backend!(self, store => store.ready().await)
    }

    /// Marks the queue's worker `name` (this process' current one) as seen now, beside the
    /// queue's own heartbeat, which a busy worker writes seconds late. SQLite has one process
    /// and nothing to tell.
    pub async fn keep_worker_alive(&self, name: &str) -> Result<(), StoreError> {
        on_backend!(self, store => store.keep_worker_alive(name).await)
    }

    /// How many worker processes of the queue are alive: the caller, whose workers' names
    /// begin with `own_prefix` (counted once, registered yet or not), and every other worker
    /// seen within `window`. SQLite has one process.
    pub async fn live_workers(
        &self,
        window: Duration,
        own_prefix: &str,
    ) -> Result<u32, StoreError> {
        on_backend!(self, store => store.live_workers(window, own_prefix).await)
    }

    /// Proves the connection keeps session state: a LISTEN on one connection hears a NOTIFY
    /// from another within `timeout`. Fails behind a transaction-mode pooler.
    pub async fn check_session_mode(&self, timeout: Duration) -> Result<(), StoreError> {
        on_backend!(self, store => store.check_session_mode(timeout).await)
    }

    /// The backlog gauges (queue depth, oldest due job, open dead letters and conflicts).
    pub async fn gauges(&self) -> Result<Gauges, StoreError> {
        on_backend!(self, store => store.gauges().await)
    }

    /// Per UTC day over the last `days` days: `(date, events received, entries written)`.
    pub async fn activity(
        &self,
        days: u32,
    ) -> Result<Vec<(chrono::NaiveDate, i64, i64)>, StoreError> {
        let since =
            chrono::Utc::now().date_naive() - chrono::Days::new(u64::from(days.saturating_sub(1)));
        let (events, entries) = on_backend!(self, store => store.activity(since).await)?;
        let count = |rows: &[(String, i64)], day: chrono::NaiveDate| {
            rows.iter()
                .find(|(d, _)| *d == day.to_string())
                .map_or(0, |(_, n)| *n)
        };
        Ok(since
            .iter_days()
            .take(days as usize)
            .map(|day| (day, count(&events, day), count(&entries, day)))
            .collect())
    }

    /// What a load run left in the store: its events (those of `source` whose external id
    /// starts with `prefix`, as load runs name theirs) and how many of them have a conflict kept.
    pub async fn load_run_counts(
        &self,
        source: &str,
        prefix: &str,
    ) -> Result<LoadRunCounts, StoreError> {
        on_backend!(self, store => store.load_run_counts(source, prefix).await)
    }

    /// Checks the invariants (ARCHITECTURE.md, Invariants) against what is stored.
    pub async fn verify(&self) -> Result<Vec<Check>, StoreError> {
        let mut checks = on_backend!(self, store => store.verify().await)?;
        let started = std::time::Instant::now();
        let differing = on_backend!(self, store => store.payout_summaries_differing().await)?;
        checks.push(Check {
            name: "payout_summaries_equal_their_reconciliation",
            description: "every payout summary the payouts listing keeps and would show equals its payout's reconciliation computed now",
            violations: differing.len() as u64,
            samples: differing.into_iter().take(10).collect(),
            took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
        Ok(checks)
    }

    pub async fn close(&self) {
        on_backend!(self, store => store.close().await)
    }
}

/// `(kind, movement_id, facts, validation_error)` of an event as stored.
fn content_columns(
    content: &Content,
) -> (
    Option<&str>,
    Option<&str>,
    Option<serde_json::Value>,
    Option<String>,
) {
    match content {
        Content::Valid(event) => (
            Some(event.kind().as_str()),
            Some(event.movement_id().as_str()),
            Some(event.to_canonical()),
            None,
        ),
        Content::Invalid(invalid) => (
            invalid.kind.as_deref(),
            None,
            None,
            Some(invalid.error.to_string()),
        ),
        Content::Named(named) => (
            Some(named.kind.as_str()),
            Some(named.object.as_str()),
            Some(named.trigger.to_stored()),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::split_by_bytes;

    #[test]
    fn items_are_split_into_runs_of_bounded_size_in_order() {
        let check = |sizes: &[usize], expected: &[(usize, usize)]| {
            let runs: Vec<(usize, usize)> = split_by_bytes(sizes, 10)
                .into_iter()
                .map(|run| (run.start, run.end))
                .collect();
            assert_eq!(runs, expected, "{sizes:?}");
        };
        check(&[], &[]);
        check(&[3], &[(0, 1)]);
        check(&[3, 3, 3], &[(0, 3)]);
        check(&[3, 3, 3, 3], &[(0, 3), (3, 4)]);
        check(&[10, 1], &[(0, 1), (1, 2)]);
        check(&[25, 1, 25], &[(0, 1), (1, 2), (2, 3)]);
        check(&[1, 25, 1, 1], &[(0, 1), (1, 2), (2, 4)]);
    }
}
