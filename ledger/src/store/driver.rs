//! What a backend owes the store (ARCHITECTURE.md, Two backends): [`Driver`] names every part,
//! and each part is a trait of its own, implemented by each backend in the module of its concern
//! (`postgres::finance` implements `FinanceRows`, ...). The parts whose SQL both dialects run
//! are implemented by the expansions of `review_reads!`, `finance_reads!`, `session_rows!`,
//! `retention_rows!`, `pause_rows!` and `event_search!`; the flows written once over row
//! primitives have theirs (`StartRows`, `PostingRows`, `FailureRows`, `DecisionRows`,
//! `CorrectionRows`, over `Transactions`). A backend that lacks a method does not compile: see
//! `skeleton`, a backend of `unimplemented!()`s the compiler holds to the contract, and `suite`,
//! the checks each backend passes.

use std::collections::HashMap;
use std::time::Duration;

use chrono::NaiveDate;

use crate::finance::{
    BalanceQuery, BalanceRow, EntryView, JournalCursor, JournalFilter, JournalPage, OpenReceivable,
    PayoutSummary, Reconciliation,
};
use crate::ids::EventId;
use crate::record::{NewEvent, Recorded};
use crate::review::{
    ConflictDetail, ConflictView, DeadLetterDetail, DeadLetterFilter, DeadLetterSummary, EventView,
    Page, PageRequest,
};
use crate::store::corrections::CorrectionRows;
use crate::store::decide::DecisionRows;
use crate::store::failures::FailureRows;
use crate::store::post::PostingRows;
use crate::store::start::StartRows;
use crate::store::transactions::Transactions;
use crate::store::{Check, Gauges, LoadRunCounts, StoreError, StoreOptions};

/// Counts per UTC day (`YYYY-MM-DD`, count).
pub(super) type DayCounts = Vec<(String, i64)>;

/// Everything a backend provides: implemented by every type that implements each part.
pub(super) trait Driver:
    Connection
    + Recording
    + Queue
    + Transactions
    + StartRows
    + PostingRows
    + FailureRows
    + DecisionRows
    + CorrectionRows
    + FeedRows
    + FinanceRows
    + FinanceReads
    + ReviewReads
    + Sessions
    + Retention
    + Pauses
    + EventSearch
    + Health
    + Fleet
{
}

impl<T> Driver for T where
    T: Connection
        + Recording
        + Queue
        + Transactions
        + StartRows
        + PostingRows
        + FailureRows
        + DecisionRows
        + CorrectionRows
        + FeedRows
        + FinanceRows
        + FinanceReads
        + ReviewReads
        + Sessions
        + Retention
        + Pauses
        + EventSearch
        + Health
        + Fleet
{
}

#[cfg(test)]
mod skeleton;
#[cfg(test)]
mod suite;

/// Opens a backend at `url`: the one place a backend type is named as a driver, so one that
/// lacks a part of the contract does not compile.
pub(super) async fn open<D: Driver>(url: &str, options: &StoreOptions) -> Result<D, StoreError> {
    D::connect(url, options).await
}

/// Opening, closing and migrating a store, and whether it can serve.
pub(super) trait Connection: Sized {
    /// Connects lazily-checked: the pool is built and one connection is opened to prove the URL.
    async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError>;

    /// Closes the pool: waits for the connections in use to be given back.
    async fn close(&self);

    /// Applies the queue's migrations and ours (`migrations/<backend>`), once, even when several
    /// processes start together.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// Reachable, and every migration this build knows is applied.
    async fn ready(&self) -> Result<(), StoreError>;

    /// Proves the connection keeps the session state the backend relies on (PostgreSQL: a
    /// LISTEN on one connection hears a NOTIFY from another within `timeout`; it fails behind a
    /// transaction-mode pooler).
    async fn check_session_mode(&self, timeout: Duration) -> Result<(), StoreError>;
}

/// Recording deliveries: each event once by its natural key, with its job.
pub(super) trait Recording {
    /// What a load run left in the store: its events (those of `source` whose external id
    /// starts with `prefix`, as load runs name theirs) and how many of them have a conflict kept.
    async fn load_run_counts(
        &self,
        source: &str,
        prefix: &str,
    ) -> Result<LoadRunCounts, StoreError>;

    /// The provider's id of an event (for logs and fault injection).
    async fn external_id(&self, event_id: EventId) -> Result<Option<String>, StoreError>;

    /// Records the events of one delivery atomically: each new event is inserted by its natural
    /// key together with its `PostSettlement` job in the same transaction; a replay writes
    /// nothing; a conflict keeps the delivery in `event_conflicts`. Returns only after COMMIT.
    async fn record(&self, events: &[NewEvent]) -> Result<Vec<Recorded>, StoreError>;

    /// Inserts each of `events` whose natural key is free, with its job, all with one commit
    /// (group commit for deliveries of one event each): the new event's id for each inserted,
    /// `None` for each whose key was taken (by an event already stored, or by an earlier one of
    /// the same call); [`Store::record`] then tells a replay from a conflict. All or nothing;
    /// returns only after COMMIT. On PostgreSQL a key that another transaction holds is waited
    /// for at most `lock_timeout_ms`, after which nothing is kept and the error says
    /// [`StoreError::is_lock_wait`] (SQLite's one writer waits its busy timeout instead).
    async fn record_new(
        &self,
        events: &[&NewEvent],
        lock_timeout_ms: u64,
    ) -> Result<Vec<Option<EventId>>, StoreError>;
}

/// What the feeds keep and read: each source's (and account's) cursor, its opening balance
/// request, what the books hold of a provider's list.
pub(super) trait FeedRows {
    /// The newest window of `source`'s own feed (its `seq`), if it has opened one (see
    /// [`crate::feed`]).
    async fn feed_cursor(&self, source: &str, account: &str) -> Result<Option<i64>, StoreError>;

    /// Moves the cursor of `source`'s `account`'s feed (`None`: the source's own) from `from`
    /// (`None`: it has none yet) to `to`, if it is still at `from`: whether it moved.
    async fn advance_feed_cursor(
        &self,
        source: &str,
        account: &str,
        from: Option<i64>,
        to: i64,
    ) -> Result<bool, StoreError>;

    /// Asks for `source`'s opening balance from `since` (its feed must have a cursor): the
    /// day asked for, which is an earlier request's when there was one (a source has one
    /// opening); `None` when the source has no feed cursor.
    async fn request_opening(
        &self,
        source: &str,
        since: NaiveDate,
    ) -> Result<Option<NaiveDate>, StoreError>;

    /// The day `source`'s opening balance was asked for from, if it was.
    async fn opening_requested(&self, source: &str) -> Result<Option<NaiveDate>, StoreError>;

    /// Which of the entries keyed `keys` are booked (recorded by `recorded_by`, when given), each
    /// with what it booked to `account` (its lines there summed, as text): for reconciling with
    /// a provider's own list.
    async fn booked(
        &self,
        keys: &[String],
        account: &str,
        recorded_by: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Vec<(String, String)>, StoreError>;

    /// The entries of movements `source`'s provider reported (they keep its details) dated from
    /// `from` to `to` (both included) that book to `account`: each key with its movement id.
    async fn booked_between(
        &self,
        source: &str,
        account: &str,
        from: NaiveDate,
        to: NaiveDate,
    ) -> Result<Vec<(String, String)>, StoreError>;

    /// When `source`'s newest delivery recorded after event `after` was received: its newest
    /// event that is not one of its feed's own (a window, the opening). Bounded by `after` so
    /// a source whose feed has opened many windows since its last webhook is not read back to
    /// it.
    async fn newest_delivery(
        &self,
        source: &str,
        after: EventId,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError>;

    /// The source and stored facts of each event (`None` for an event recorded invalid).
    async fn facts_of(
        &self,
        events: &[crate::ids::EventId],
    ) -> Result<HashMap<i64, (String, Option<serde_json::Value>)>, StoreError>;
}

/// The job queue's upkeep.
pub(super) trait Queue {
    /// Gives events left `recorded` without a live job (older than `grace_secs`) a fresh job.
    /// Safe to run from every process at once. Returns how many were re-enqueued.
    async fn sweep(&self, grace_secs: u64, batch_max: u32) -> Result<u64, StoreError>;
}

/// The invariants checked against what is stored, and the gauges.
pub(super) trait Health {
    /// Checks the invariants (ARCHITECTURE.md, Invariants) against what is stored.
    async fn verify(&self) -> Result<Vec<Check>, StoreError>;

    /// The backlog gauges (queue depth, oldest due job, open dead letters and conflicts).
    async fn gauges(&self) -> Result<Gauges, StoreError>;

    /// Events received and entries written per UTC day since `since`.
    async fn activity(
        &self,
        since: chrono::NaiveDate,
    ) -> Result<(DayCounts, DayCounts), StoreError>;
}

/// The finance reads each backend sums its own way (PostgreSQL's `NUMERIC`, SQLite's minor
/// units), and folding the sums kept.
pub(super) trait FinanceRows {
    /// Fills each entry's lines, in line order (one read for all of them).
    async fn attach_lines(&self, entries: &mut [EntryView]) -> Result<(), StoreError>;

    /// Non-zero balances per account and currency.
    async fn balances(&self, query: BalanceQuery) -> Result<Vec<BalanceRow>, StoreError>;

    /// Folds the balances kept by day into a row per account, currency and day, those kept by
    /// recorded hour into a row per account, currency, day and hour (the last day's hours), and
    /// the open receivables kept into a row per movement (none once cleared); answers how many
    /// rows it folded.
    async fn compact_balances(&self) -> Result<u64, StoreError>;

    /// Receivables on `accounts` not cleared, per capture and currency, open since (the
    /// effective date of the movement's first receivable line kept: after it was last dropped as
    /// cleared) on or before `since_on_or_before`, oldest first, at most `limit`. Read from the
    /// receivables kept as the journal is written, which keep every account named
    /// [`crate::posting::RECEIVABLES_PREFIX`]`…` (configuration allows no other).
    async fn open_receivables(
        &self,
        accounts: &[String],
        since_on_or_before: NaiveDate,
        limit: u32,
    ) -> Result<Vec<OpenReceivable>, StoreError>;
}

/// What a fleet of processes needs of its database (a backend of one process and one user
/// answers for itself).
pub(super) trait Fleet {
    /// Creates the runtime roles of a fleet (those missing) and grants each what it may do; a
    /// backend with one user (SQLite: its file's owner) answers `Unsupported`.
    async fn grant_roles(&self) -> Result<(), StoreError>;

    /// Marks the queue's worker `name` (this process' current one) as seen now, beside the
    /// queue's own heartbeat, which a busy worker writes seconds late (a backend of one process
    /// has nothing to tell).
    async fn keep_worker_alive(&self, name: &str) -> Result<(), StoreError>;

    /// How many worker processes of the queue are alive: the caller, whose workers' names
    /// begin with `own_prefix` (counted once, registered yet or not), and every other worker
    /// seen within `window` (a backend of one process: one).
    async fn live_workers(
        &self,
        window: std::time::Duration,
        own_prefix: &str,
    ) -> Result<u32, StoreError>;
}

/// The reads of events, dead letters and conflicts (`review_reads!`).
pub(super) trait ReviewReads {
    /// One event.
    async fn event(&self, id: EventId) -> Result<Option<EventView>, StoreError>;

    /// The event recorded under its natural key.
    async fn event_by_key(
        &self,
        source: &str,
        external_id: &str,
    ) -> Result<Option<EventView>, StoreError>;

    /// Dead letters matching `filter` (`state: None` = any state), newest first.
    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        page: PageRequest,
    ) -> Result<Page<DeadLetterSummary>, StoreError>;

    /// One dead letter with its event, attempts and audit trail.
    async fn dead_letter(&self, id: i64) -> Result<Option<DeadLetterDetail>, StoreError>;

    /// Conflicts (`state`: `open`, `resolved` or any), newest first.
    async fn conflicts(
        &self,
        state: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<ConflictView>, StoreError>;

    /// One conflict with both deliveries' facts and its audit trail.
    async fn conflict(&self, id: i64) -> Result<Option<ConflictDetail>, StoreError>;

    /// The event with its erasure, attempts, dead letters, conflicts, entries and audit trail.
    async fn event_detail(
        &self,
        id: EventId,
    ) -> Result<Option<crate::review::EventDetail>, StoreError>;
}

/// The journal, an entry, payout reconciliation and the payouts listing (`finance_reads!`).
pub(super) trait FinanceReads {
    /// The journal in (effective date, id) order after `after`, at most `limit` entries, each
    /// with its lines.
    async fn journal(
        &self,
        filter: &JournalFilter,
        after: Option<JournalCursor>,
        limit: u32,
    ) -> Result<JournalPage, StoreError>;

    /// One entry with its lines.
    async fn entry(&self, id: i64) -> Result<Option<EntryView>, StoreError>;

    /// The correction made of `entry_id`, if any.
    async fn correction_of_entry(
        &self,
        entry_id: i64,
    ) -> Result<Option<crate::store::corrections::PastCorrection>, StoreError>;

    /// The payout beside the items carrying its id; `None` when settle knows neither.
    async fn reconciliation(&self, payout_id: &str) -> Result<Option<Reconciliation>, StoreError>;

    /// Every payout id in the journal after `after` (in id order), with its reconciliation status.
    async fn payouts(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PayoutSummary>, StoreError>;

    /// Each kept payout summary the listing would use (its counts are the journal's
    /// now, its version this one's) that differs from its payout's reconciliation, named:
    /// `settle verify`'s `payout_summaries_equal_their_reconciliation`.
    async fn payout_summaries_differing(&self) -> Result<Vec<String>, StoreError>;
}

/// Dashboard sessions (`session_rows!`).
pub(super) trait Sessions {
    /// Inserts the session, and removes the ones expired by `now`.
    async fn open_session(
        &self,
        session: &crate::store::sessions::NewSession<'_>,
    ) -> Result<(), crate::store::StoreError>;

    /// The session under `id_sha256` if it has not expired by `now`.
    async fn session(
        &self,
        id_sha256: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<crate::store::sessions::StoredSession>, crate::store::StoreError>;

    /// Ends one session. Answers whether it was open.
    async fn close_session(&self, id_sha256: &str) -> Result<bool, crate::store::StoreError>;

    /// Ends every session of `actor`, wherever it was opened. Answers how many.
    async fn close_sessions_of(&self, actor: &str) -> Result<u64, crate::store::StoreError>;
}

/// Payload expiry and erasure (`retention_rows!`).
pub(super) trait Retention {
    /// Counts what the rule would expire, or (not a dry run) expires it under one
    /// erasure by `actor`, in batches.
    async fn prune_rule(
        &self,
        rule: &crate::store::retention::ExpiryRule,
        actor: &str,
        dry_run: bool,
    ) -> Result<crate::store::retention::PruneLine, crate::store::StoreError>;

    /// Erases one event's payload, and its resolved conflicting deliveries', on a
    /// person's request. Already erased: success, nothing written.
    async fn erase_payload(
        &self,
        event_id: i64,
        decision: &crate::review::Decision,
    ) -> Result<crate::review::Decided, crate::review::DecisionError>;

    /// The erasure recorded under `id`.
    async fn payload_erasure(
        &self,
        id: i64,
    ) -> Result<Option<crate::store::retention::PayloadErasure>, crate::store::StoreError>;
}

/// Pausing and resuming a source (`pause_rows!`).
pub(super) trait Pauses {
    /// Pauses `source` (already paused: nothing written).
    async fn pause_source(
        &self,
        source: &str,
        decision: &crate::review::Decision,
    ) -> Result<crate::store::pauses::PauseChange, crate::review::DecisionError>;

    /// Resumes `source` (not paused: nothing written) and makes its waiting jobs due.
    async fn resume_source(
        &self,
        source: &str,
        decision: &crate::review::Decision,
    ) -> Result<crate::store::pauses::PauseChange, crate::review::DecisionError>;

    /// Pauses newest first: those in force only, or every one (at most `limit`).
    async fn source_pauses(
        &self,
        in_force_only: bool,
        limit: u32,
    ) -> Result<Vec<crate::store::pauses::SourcePause>, crate::store::StoreError>;
}

/// Event search (`event_search!`).
pub(super) trait EventSearch {
    /// Events matching `filter`, newest first, a page after `page.cursor` (an id).
    async fn search_events(
        &self,
        filter: &crate::review::EventFilter,
        page: crate::review::PageRequest,
    ) -> Result<crate::review::Page<crate::review::EventSummary>, crate::store::StoreError>;

    /// The plan the database makes for a search (its EXPLAIN, one line per row).
    async fn search_plan(
        &self,
        filter: &crate::review::EventFilter,
    ) -> Result<String, crate::store::StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The skeleton implements every part, so it opens as a driver (to its own refusal).
    #[tokio::test]
    async fn a_backend_that_implements_every_part_opens_as_a_driver() {
        let opened = open::<skeleton::Skeleton>("skeleton:", &StoreOptions::default()).await;
        assert!(
            matches!(opened, Err(StoreError::Unsupported(_))),
            "{opened:?}"
        );
    }
}
