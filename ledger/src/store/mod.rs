//! The only place with SQL. One [`Store`] over the backends: PostgreSQL for fleets, SQLite for
//! the embedded default. Callers (ingress, workers, ops) never see which one they talk to.

mod backend;
mod corrections;
mod decide;
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

/// settle's storage: events, conflicts, jobs (through the queue's tables), and later the journal.
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

impl Store {
    /// Connects lazily-checked: the pool is built and one connection is opened to prove the URL.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        match BackendKind::of_url(url) {
            Some(BackendKind::Postgres) => Ok(Store {
                backend: Backend::Postgres(postgres::PgStore::connect(url, options).await?),
            }),
            Some(BackendKind::Sqlite) => Ok(Store {
                backend: Backend::Sqlite(sqlite::SqliteStore::connect(url, options).await?),
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
        match &self.backend {
            Backend::Postgres(store) => store.grant_roles(true).await,
            Backend::Sqlite(_) => Err(StoreError::Unsupported(
                "an SQLite database has one user (its file's owner): roles are PostgreSQL's",
            )),
        }
    }

    /// Reachable, and every migration this build knows is applied.
    pub async fn ready(&self) -> Result<(), StoreError> {
        on_backend!(self, store => store.ready().await)
    }

    /// Records the events of one delivery atomically: each new event is inserted by its natural
    /// key together with its `PostSettlement` job in the same transaction; a replay writes
    /// nothing; a conflict keeps the delivery in `event_conflicts`. Returns only after COMMIT.
    pub async fn record(&self, events: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        on_backend!(self, store => store.record(events).await)
    }

    /// Inserts each of `events` whose natural key is free, with its job, all with one commit
    /// (group commit for deliveries of one event each): the new event's id for each inserted,
    /// `None` for each whose key was taken (by an event already stored, or by an earlier one of
    /// the same call); [`Store::record`] then tells a replay from a conflict. All or nothing;
    /// returns only after COMMIT. On PostgreSQL a key that another transaction holds is waited
    /// for at most `lock_timeout_ms`, after which nothing is kept and the error says
    /// [`StoreError::is_lock_wait`] (SQLite's one writer waits its busy timeout instead).
    pub async fn record_new(
        &self,
        events: &[&NewEvent],
        lock_timeout_ms: u64,
    ) -> Result<Vec<Option<EventId>>, StoreError> {
        on_backend!(self, store => store.record_new(events, lock_timeout_ms).await)
    }

    /// The pool the job queue's own backend runs on (apalis needs the concrete pool).
    pub fn queue_pool(&self) -> QueuePool {
        match &self.backend {
            Backend::Postgres(store) => QueuePool::Postgres(store.pool().clone()),
            Backend::Sqlite(store) => QueuePool::Sqlite {
                pool: store.pool().clone(),
                jobs_inserted: store.jobs_inserted(),
            },
        }
    }

    /// Starts an attempt of `job`: commits the attempt's start before any work is done, so a
    /// worker that dies mid-job is seen by the next one. Closes attempts whose worker died,
    /// and dead-letters the event instead once `attempts_max` attempts have started.
    pub async fn start_attempt(
        &self,
        job: &JobRef,
        worker: &str,
        attempts_max: u32,
        lock_timeout_ms: u64,
    ) -> Result<AttemptStart, StoreError> {
        on_backend!(self, store => store.start_one(job, worker, attempts_max, lock_timeout_ms, false).await)
    }

    /// [`Store::start_attempt`] for a job it answered [`AttemptStart::Suspect`]: starts the
    /// attempt all the same (never answers `Suspect`). The caller has made sure nothing else
    /// is in flight in its process.
    pub async fn start_attempt_alone(
        &self,
        job: &JobRef,
        worker: &str,
        attempts_max: u32,
        lock_timeout_ms: u64,
    ) -> Result<AttemptStart, StoreError> {
        on_backend!(self, store => store.start_one(job, worker, attempts_max, lock_timeout_ms, true).await)
    }

    /// The posting transaction: locks the event, returns early if it is settled, builds the
    /// entry from the posting rules, inserts it by source key (a replay with the same facts
    /// writes nothing, with different facts is `SourceReplayConflict`), marks the event posted
    /// and the attempt finished. All or nothing.
    pub async fn post(
        &self,
        job: &JobRef,
        attempt: u32,
        rules: &PostingRules,
        lock_timeout_ms: u64,
    ) -> Result<Posted, PostError> {
        on_backend!(self, store => post::post(store, job, attempt, rules, lock_timeout_ms).await)
    }

    /// [`Store::start_attempt`] for several jobs at once, each answered as if started alone:
    /// one commit for all (on PostgreSQL one statement; on SQLite one write transaction), falling
    /// back to one by one if that fails.
    pub async fn start_attempts(
        &self,
        starts: &[(JobRef, String)],
        attempts_max: u32,
        lock_timeout_ms: u64,
    ) -> Vec<Result<AttemptStart, StoreError>> {
        on_backend!(self, store => start::start_attempts(store, starts, attempts_max, lock_timeout_ms).await)
    }

    /// [`Store::post`] for several jobs at once, each answered as if posted alone (group
    /// commit): they share one transaction, where one job refused for its own reason writes
    /// nothing and does not stop the others, and a database failure anywhere makes each be
    /// posted on its own instead.
    pub async fn post_many(
        &self,
        posts: &[(JobRef, u32)],
        rules: &PostingRules,
        lock_timeout_ms: u64,
    ) -> Vec<Result<Posted, PostError>> {
        on_backend!(self, store => post::post_many(store, posts, rules, lock_timeout_ms).await)
    }

    /// What each event's job must do, read from its stored facts: post what it carries, or
    /// resolve what its webhook names through the provider's API first. An event that does not
    /// exist is `Post` (its posting reports it); one whose trigger cannot be read is
    /// `Unreadable`, for its own job alone.
    pub async fn work(&self, events: &[EventId]) -> Result<Vec<Work>, StoreError> {
        let facts = on_backend!(self, store => store.facts_of(events).await)?;
        Ok(events
            .iter()
            .map(|id| match facts.get(&id.get()) {
                Some((source, Some(facts))) => match crate::trigger::Trigger::from_stored(facts) {
                    Some(Ok(trigger)) => match crate::ids::SourceName::parse(source) {
                        Ok(source) => Work::Resolve { source, trigger },
                        Err(error) => Work::Unreadable(error.to_string()),
                    },
                    Some(Err(error)) => Work::Unreadable(error),
                    None => Work::Post,
                },
                _ => Work::Post,
            })
            .collect())
    }

    /// Posts what a job resolved its event to, in one transaction: each movement's entry by its
    /// source key (already posted with the same facts: nothing written; with other facts:
    /// `SourceReplayConflict`), the entries of a payout's listing tied to it (an entry paid
    /// out by another payout: `PayoutMismatch`), the event marked posted, the attempt finished.
    /// All or nothing.
    pub async fn post_resolved(
        &self,
        post: &ResolvedPost<'_>,
        lock_timeout_ms: u64,
    ) -> Result<Posted, PostError> {
        on_backend!(self, store => post::post_resolved(store, post, lock_timeout_ms).await)
    }

    /// [`Store::post_resolved`] for several jobs at once (group commit), each answered as if
    /// posted alone.
    pub async fn post_resolved_many(
        &self,
        posts: &[ResolvedPost<'_>],
        lock_timeout_ms: u64,
    ) -> Vec<Result<Posted, PostError>> {
        on_backend!(self, store => post::post_resolved_many(store, posts, lock_timeout_ms).await)
    }

    /// Records a failed attempt and carries out the decision: schedule the retry, or open a
    /// dead letter and move the event to `abandoned`, in one transaction.
    pub async fn fail_attempt(
        &self,
        job: &JobRef,
        worker: &str,
        attempt: u32,
        error: &PostError,
        decision: FailureDecision,
    ) -> Result<(), StoreError> {
        on_backend!(self, store => failures::fail_attempt(store, job, worker, attempt, error, decision).await)
    }

    /// Gives the job back to the queue, due in `delay_ms`, if `worker` still holds it (a job
    /// rescued from a worker whose heartbeat lapsed belongs to whoever fetched it next).
    pub async fn retry_later(
        &self,
        job_id: &str,
        worker: &str,
        delay_ms: u64,
    ) -> Result<(), StoreError> {
        on_backend!(self, store => store.retry_later(job_id, worker, delay_ms).await)
    }

    /// Dead-letters the event whose current job has an unreadable payload. `None` when no
    /// recorded event has that job (a stray row).
    pub async fn dead_letter_unreadable_job(
        &self,
        job_id: &str,
        detail: &str,
    ) -> Result<Option<EventId>, StoreError> {
        on_backend!(self, store => failures::dead_letter_unreadable_job(store, job_id, detail).await)
    }

    /// Gives events left `recorded` without a live job (older than `grace_secs`) a fresh job.
    /// Safe to run from every process at once. Returns how many were re-enqueued.
    pub async fn sweep(&self, grace_secs: u64, batch_max: u32) -> Result<u64, StoreError> {
        on_backend!(self, store => store.sweep(grace_secs, batch_max).await)
    }

    /// The provider's id of an event (for logs and fault injection).
    pub async fn external_id(&self, event_id: EventId) -> Result<Option<String>, StoreError> {
        on_backend!(self, store => store.external_id(event_id).await)
    }

    /// The newest window of `source`'s own feed (its `seq`), if it has opened one (see
    /// [`crate::feed`]).
    pub async fn feed_cursor(&self, source: &SourceName) -> Result<Option<i64>, StoreError> {
        self.feed_cursor_of(source, None).await
    }

    /// The newest window of the feed of `source`'s `account` at its provider (`None`: the
    /// source's own feed).
    pub async fn feed_cursor_of(
        &self,
        source: &SourceName,
        account: Option<&str>,
    ) -> Result<Option<i64>, StoreError> {
        let account = account.unwrap_or_default();
        on_backend!(self, store => store.feed_cursor(source.as_str(), account).await)
    }

    /// Moves the cursor of `source`'s `account`'s feed (`None`: the source's own) from `from`
    /// (`None`: it has none yet) to `to`, if it is still at `from`: whether it moved.
    pub async fn advance_feed_cursor(
        &self,
        source: &SourceName,
        account: Option<&str>,
        from: Option<i64>,
        to: i64,
    ) -> Result<bool, StoreError> {
        let account = account.unwrap_or_default();
        on_backend!(self, store => store.advance_feed_cursor(source.as_str(), account, from, to).await)
    }

    /// `source`'s first feed window (`feed:1`) and where it stands: where a backfill of the
    /// source ends.
    pub async fn first_feed_window(
        &self,
        source: &SourceName,
    ) -> Result<Option<(crate::feed::Window, crate::EventStatus)>, StoreError> {
        let Some(event) = self
            .event_by_key(source.as_str(), &crate::feed::Window::external_id(1))
            .await?
        else {
            return Ok(None);
        };
        let window = event
            .facts
            .as_ref()
            .and_then(crate::feed::Window::from_facts)
            .transpose()
            .map_err(StoreError::Corrupt)?
            .ok_or_else(|| StoreError::Corrupt(format!("{source}: feed:1 holds no window")))?;
        Ok(Some((window, event.status)))
    }

    /// The end of `source`'s newest posted feed window: what the books have read its
    /// provider's list up to (the newest window, or the one before it while the newest is
    /// still being read).
    pub async fn feed_cut(
        &self,
        source: &SourceName,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        let Some(seq) = self.feed_cursor(source).await? else {
            return Ok(None);
        };
        for seq in [seq, seq - 1] {
            if seq < 1 {
                break;
            }
            let Some(event) = self
                .event_by_key(source.as_str(), &crate::feed::Window::external_id(seq))
                .await?
            else {
                continue;
            };
            if event.status == crate::EventStatus::Posted
                && let Some(Ok(window)) = event
                    .facts
                    .as_ref()
                    .and_then(crate::feed::Window::from_facts)
            {
                return Ok(Some(window.to));
            }
        }
        Ok(None)
    }

    /// Asks for `source`'s opening balance from `since` (its feed must have a cursor): the
    /// day asked for, which is an earlier request's when there was one (a source has one
    /// opening); `None` when the source has no feed cursor.
    pub async fn request_opening(
        &self,
        source: &SourceName,
        since: NaiveDate,
    ) -> Result<Option<NaiveDate>, StoreError> {
        on_backend!(self, store => store.request_opening(source.as_str(), since).await)
    }

    /// The day `source`'s opening balance was asked for from, if it was.
    pub async fn opening_requested(
        &self,
        source: &SourceName,
    ) -> Result<Option<NaiveDate>, StoreError> {
        on_backend!(self, store => store.opening_requested(source.as_str()).await)
    }

    /// Which of the entries keyed `keys` are booked (recorded by `recorded_by`, when given), each
    /// with what it booked to `account` (its lines there summed, as text): for reconciling with
    /// a provider's own list.
    pub async fn booked(
        &self,
        keys: &[String],
        account: &str,
        recorded_by: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut all = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(1_000) {
            let found =
                on_backend!(self, store => store.booked(chunk, account, recorded_by).await)?;
            all.extend(found);
        }
        Ok(all)
    }

    /// The entries of movements `source`'s provider reported (they keep its details) dated from
    /// `from` to `to` (both included) that book to `account`: each key with its movement id.
    pub async fn booked_between(
        &self,
        source: &SourceName,
        account: &str,
        (from, to): (NaiveDate, NaiveDate),
    ) -> Result<Vec<(String, String)>, StoreError> {
        on_backend!(self, store => store.booked_between(source.as_str(), account, from, to).await)
    }

    /// When `source`'s newest delivery recorded after event `after` was received: its newest
    /// event that is not one of its feed's own (a window, the opening). Bounded by `after` so
    /// a source whose feed has opened many windows since its last webhook is not read back to
    /// it.
    pub async fn newest_delivery(
        &self,
        source: &SourceName,
        after: EventId,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        on_backend!(self, store => store.newest_delivery(source.as_str(), after).await)
    }

    /// Marks the queue's worker `name` (this process' current one) as seen now, beside the
    /// queue's own heartbeat, which a busy worker writes seconds late. SQLite has one process
    /// and nothing to tell.
    pub async fn keep_worker_alive(&self, name: &str) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Postgres(store) => store.keep_worker_alive(name).await,
            Backend::Sqlite(_) => Ok(()),
        }
    }

    /// How many worker processes of the queue are alive: the caller, whose workers' names
    /// begin with `own_prefix` (counted once, registered yet or not), and every other worker
    /// seen within `window`. SQLite has one process.
    pub async fn live_workers(
        &self,
        window: Duration,
        own_prefix: &str,
    ) -> Result<u32, StoreError> {
        match &self.backend {
            Backend::Postgres(store) => store.live_workers(window, own_prefix).await,
            Backend::Sqlite(_) => Ok(1),
        }
    }

    /// Proves the connection keeps session state: a LISTEN on one connection hears a NOTIFY
    /// from another within `timeout`. Fails behind a transaction-mode pooler.
    pub async fn check_session_mode(&self, timeout: Duration) -> Result<(), StoreError> {
        on_backend!(self, store => store.check_session_mode(timeout).await)
    }

    pub async fn event(&self, id: EventId) -> Result<Option<EventView>, StoreError> {
        on_backend!(self, store => store.event(id).await)
    }

    /// The event with its erasure, attempts, dead letters, conflicts, entries and audit trail.
    pub async fn event_detail(
        &self,
        id: EventId,
    ) -> Result<Option<crate::review::EventDetail>, StoreError> {
        on_backend!(self, store => store.event_detail(id).await)
    }

    pub async fn event_by_key(
        &self,
        source: &str,
        external_id: &str,
    ) -> Result<Option<EventView>, StoreError> {
        on_backend!(self, store => store.event_by_key(source, external_id).await)
    }

    /// Expires the payloads `policy` no longer allows at `now`, each rule under one erasure by
    /// `actor` (or, with `dry_run`, only counts them). See ARCHITECTURE.md, Retention.
    pub async fn prune_payloads(
        &self,
        policy: &RetentionPolicy,
        now: chrono::DateTime<chrono::Utc>,
        actor: &str,
        dry_run: bool,
    ) -> Result<Vec<PruneLine>, StoreError> {
        let mut lines = Vec::new();
        for rule in policy.rules(now) {
            lines.push(on_backend!(self, store => store.prune_rule(&rule, actor, dry_run).await)?);
        }
        Ok(lines)
    }

    /// Erases one event's payload (and its resolved conflicting deliveries') on a person's
    /// request, audited; refused while the event is in flight, dead-lettered or in conflict.
    pub async fn erase_payload(
        &self,
        event_id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => store.erase_payload(event_id, decision).await)
    }

    pub async fn payload_erasure(&self, id: i64) -> Result<Option<PayloadErasure>, StoreError> {
        on_backend!(self, store => store.payload_erasure(id).await)
    }

    /// Reverses journal entry `id` and, with lines, posts its correction, on the request's
    /// effective date, with who and why (see ARCHITECTURE.md, Corrections).
    pub async fn correct_entry(
        &self,
        id: i64,
        request: &CorrectionRequest,
        decision: &Decision,
    ) -> Result<Corrected, DecisionError> {
        on_backend!(self, store => corrections::correct(store, id, request, decision).await)
    }

    /// One journal entry with its lines.
    pub async fn entry(&self, id: i64) -> Result<Option<crate::finance::EntryView>, StoreError> {
        on_backend!(self, store => store.entry(id).await)
    }

    /// Pauses a source: its deliveries are still recorded and acknowledged, none of its events
    /// starts an attempt until it is resumed. Already paused: nothing written.
    pub async fn pause_source(
        &self,
        source: &str,
        decision: &Decision,
    ) -> Result<PauseChange, DecisionError> {
        on_backend!(self, store => store.pause_source(source, decision).await)
    }

    /// Resumes a paused source and makes its waiting jobs due at once. Not paused: nothing
    /// written.
    pub async fn resume_source(
        &self,
        source: &str,
        decision: &Decision,
    ) -> Result<PauseChange, DecisionError> {
        on_backend!(self, store => store.resume_source(source, decision).await)
    }

    /// Pauses newest first: those in force only, or every one (at most `limit`).
    pub async fn source_pauses(
        &self,
        in_force_only: bool,
        limit: u32,
    ) -> Result<Vec<SourcePause>, StoreError> {
        on_backend!(self, store => store.source_pauses(in_force_only, limit).await)
    }

    /// Dead letters matching `filter` (`state: None` = any state), newest first.
    pub async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        page: PageRequest,
    ) -> Result<Page<DeadLetterSummary>, StoreError> {
        on_backend!(self, store => store.dead_letters(filter, page).await)
    }

    pub async fn dead_letter(&self, id: i64) -> Result<Option<DeadLetterDetail>, StoreError> {
        on_backend!(self, store => store.dead_letter(id).await)
    }

    /// Gives the dead letter's event a fresh job with fresh attempts, in one transaction with its
    /// audit row. Requeueing an item already requeued (and not failed since) changes nothing.
    pub async fn requeue_dead_letter(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => decide::requeue_dead_letter(store, id, decision).await)
    }

    /// Closes the dead letter for good (the event never posts), with its audit row.
    /// Discarding a discarded item changes nothing; a reason is required.
    pub async fn discard_dead_letter(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => decide::discard_dead_letter(store, id, decision).await)
    }

    /// Conflicts (`state`: `open`, `resolved` or any), newest first.
    pub async fn conflicts(
        &self,
        state: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<ConflictView>, StoreError> {
        on_backend!(self, store => store.conflicts(state, page).await)
    }

    pub async fn conflict(&self, id: i64) -> Result<Option<ConflictDetail>, StoreError> {
        on_backend!(self, store => store.conflict(id).await)
    }

    /// Requeues (`goal` requeued) or discards each dead letter of a bulk action, each exactly as
    /// alone and audited on its own, a hundred to a transaction; one answer per id, in order.
    pub async fn decide_dead_letters(
        &self,
        ids: &[i64],
        goal: crate::review::DeadLetterState,
        decision: &Decision,
    ) -> Vec<Result<Decided, DecisionError>> {
        on_backend!(self, store => decide::decide_dead_letters(store, ids, goal, decision).await)
    }

    /// Acknowledges a conflict (the original stays authoritative), with its audit row.
    pub async fn resolve_conflict(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => decide::resolve_conflict(store, id, decision).await)
    }

    /// The journal in (effective date, id) order after `after`, at most `limit` entries, each
    /// with its lines.
    pub async fn journal(
        &self,
        filter: &JournalFilter,
        after: Option<JournalCursor>,
        limit: u32,
    ) -> Result<JournalPage, StoreError> {
        on_backend!(self, store => store.journal(filter, after, limit).await)
    }

    /// Non-zero balances per account and currency.
    pub async fn balances(&self, query: BalanceQuery) -> Result<Vec<BalanceRow>, StoreError> {
        on_backend!(self, store => store.balances(query).await)
    }

    /// Folds the balances kept by day (what each posting added) into a row per account,
    /// currency and day, keeping every sum; answers how many rows it folded. Safe beside
    /// postings and from every worker process at once.
    pub async fn compact_balances(&self) -> Result<u64, StoreError> {
        on_backend!(self, store => store.compact_balances().await)
    }

    /// Events matching `filter`, newest first, a page after `page.cursor` (an id).
    pub async fn search_events(
        &self,
        filter: &crate::review::EventFilter,
        page: PageRequest,
    ) -> Result<Page<crate::review::EventSummary>, StoreError> {
        on_backend!(self, store => store.search_events(filter, page).await)
    }

    /// The database's plan for a search (to hold searches to index plans).
    pub async fn search_plan(
        &self,
        filter: &crate::review::EventFilter,
    ) -> Result<String, StoreError> {
        on_backend!(self, store => store.search_plan(filter).await)
    }

    /// Opens a dashboard session (and forgets the expired ones).
    pub async fn open_session(&self, session: &sessions::NewSession<'_>) -> Result<(), StoreError> {
        on_backend!(self, store => store.open_session(session).await)
    }

    /// The dashboard session under `id_sha256`, unless it expired by `now` or was closed.
    pub async fn session(
        &self,
        id_sha256: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<sessions::StoredSession>, StoreError> {
        on_backend!(self, store => store.session(id_sha256, now).await)
    }

    /// Ends one dashboard session; answers whether it was open.
    pub async fn close_session(&self, id_sha256: &str) -> Result<bool, StoreError> {
        on_backend!(self, store => store.close_session(id_sha256).await)
    }

    /// Ends every dashboard session of `actor`, in every process; answers how many.
    pub async fn close_sessions_of(&self, actor: &str) -> Result<u64, StoreError> {
        on_backend!(self, store => store.close_sessions_of(actor).await)
    }

    /// Receivables on `accounts` not cleared, per capture and currency, whose first entry is
    /// effective on or before `since_on_or_before`, oldest first, at most `limit`.
    pub async fn open_receivables(
        &self,
        accounts: &[String],
        since_on_or_before: chrono::NaiveDate,
        limit: u32,
    ) -> Result<Vec<OpenReceivable>, StoreError> {
        on_backend!(self, store => store.open_receivables(accounts, since_on_or_before, limit).await)
    }

    /// The payout beside the items carrying its id; `None` when settle knows neither.
    pub async fn reconciliation(
        &self,
        payout_id: &str,
    ) -> Result<Option<Reconciliation>, StoreError> {
        on_backend!(self, store => store.reconciliation(payout_id).await)
    }

    /// Every payout id in the journal after `after` (in id order), with its reconciliation status.
    pub async fn payouts(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PayoutSummary>, StoreError> {
        on_backend!(self, store => store.payouts(after, limit).await)
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
        on_backend!(self, store => store.verify().await)
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
