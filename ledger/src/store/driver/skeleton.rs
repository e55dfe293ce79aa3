//! A backend of `unimplemented!()`s: where a new backend starts. It compiles only while it
//! implements every part of the contract ([`Driver`]), each method left to write.

use super::*;
use crate::job::{AttemptOutcome, AttemptStart, ErrorClass, JobRef};
use crate::post_error::PostError;
use crate::posting::Line;
use crate::resolved::MovementEntry;
use crate::review::{ConflictState, DeadLetterState, Decision};
use crate::state::{EventStatus, Transition};
use crate::store::corrections::CorrectionEntry;
use crate::store::movements::Existing;
use crate::store::post::{Mark, Posting, Tie};
use crate::store::prepare::EventRow;

#[derive(Clone, Debug)]
pub(super) struct Skeleton;

impl Transactions for Skeleton {
    type Tx = ();

    async fn begin_write(&self) -> Result<Self::Tx, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn commit(&self, _tx: Self::Tx) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl StartRows for Skeleton {
    async fn start_one(
        &self,
        _job: &JobRef,
        _worker: &str,
        _attempts_max: u32,
        _lock_timeout_ms: u64,
        _alone: bool,
    ) -> Result<AttemptStart, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn start_group(
        &self,
        _starts: &[(JobRef, String)],
        _attempts_max: u32,
        _lock_timeout_ms: u64,
    ) -> Result<Vec<Result<AttemptStart, StoreError>>, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl PostingRows for Skeleton {
    async fn begin_posting(&self, _lock_timeout_ms: u64) -> Result<Self::Tx, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn lock_events(_tx: &mut Self::Tx, _ids: &[i64]) -> Result<Vec<EventRow>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn share_events(_tx: &mut Self::Tx, _ids: &[i64]) -> Result<Vec<EventRow>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn entry_by_key(
        _tx: &mut Self::Tx,
        _key: &str,
    ) -> Result<Option<(i64, String)>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn reversing_key(
        _tx: &mut Self::Tx,
        _entry_id: i64,
    ) -> Result<Option<String>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn entry_lines(_tx: &mut Self::Tx, _entry_id: i64) -> Result<Vec<Line>, PostError> {
        unimplemented!("a skeleton backend")
    }
    async fn insert_postings(
        _tx: &mut Self::Tx,
        _postings: &[Posting<'_>],
        _posted: Transition<EventStatus>,
    ) -> Result<HashMap<i64, i64>, PostError> {
        unimplemented!("a skeleton backend")
    }
    async fn mark_posted(
        _tx: &mut Self::Tx,
        _marks: &[Mark<'_>],
        _posted: Transition<EventStatus>,
    ) -> Result<u64, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn complete_job(_tx: &mut Self::Tx, _job_id: &str) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn existing_entries(
        _tx: &mut Self::Tx,
        _keys: &[&str],
    ) -> Result<HashMap<String, Existing>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn insert_movement_entries(
        _tx: &mut Self::Tx,
        _to_write: &[(i64, &MovementEntry)],
    ) -> Result<HashMap<String, i64>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn tie_entries(_tx: &mut Self::Tx, _ties: &[Tie<'_>]) -> Result<u64, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl FailureRows for Skeleton {
    async fn finish_attempt(
        _tx: &mut Self::Tx,
        _job: &JobRef,
        _attempt: u32,
        _outcome: AttemptOutcome,
        _error: Option<&PostError>,
    ) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn retry_later(
        _tx: &mut Self::Tx,
        _job_id: &str,
        _worker: &str,
        _delay_ms: u64,
    ) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn event_state(
        _tx: &mut Self::Tx,
        _event_id: EventId,
    ) -> Result<Option<(EventStatus, String)>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn recorded_event_of_job(
        _tx: &mut Self::Tx,
        _job_id: &str,
    ) -> Result<Option<EventId>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn abandon(
        _tx: &mut Self::Tx,
        _job: &JobRef,
        _class: ErrorClass,
        _error: &PostError,
        _attempts: u32,
    ) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn kill_job(_tx: &mut Self::Tx, _job_id: &str) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl DecisionRows for Skeleton {
    async fn lock_dead_letter(
        _tx: &mut Self::Tx,
        _id: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn open_dead_letter_of(
        _tx: &mut Self::Tx,
        _event_id: i64,
    ) -> Result<Option<i64>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn set_event_status(
        _tx: &mut Self::Tx,
        _event_id: i64,
        _transition: Transition<EventStatus>,
    ) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn give_fresh_job(_tx: &mut Self::Tx, _event_id: i64) -> Result<String, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn write_dead_letter(
        _tx: &mut Self::Tx,
        _id: i64,
        _transition: Transition<DeadLetterState>,
        _decision: &Decision,
        _requeued_job_id: Option<&str>,
    ) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn lock_conflict(
        _tx: &mut Self::Tx,
        _id: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn write_conflict(
        _tx: &mut Self::Tx,
        _id: i64,
        _transition: Transition<ConflictState>,
        _decision: &Decision,
    ) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn audit(
        _tx: &mut Self::Tx,
        _decision: &Decision,
        _action: &str,
        _subject: (&str, i64),
        _event_id: i64,
        _states: (&str, &str),
    ) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl CorrectionRows for Skeleton {
    async fn write_entry(
        _tx: &mut Self::Tx,
        _entry: &CorrectionEntry<'_>,
    ) -> Result<Option<i64>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn record_correction(
        _tx: &mut Self::Tx,
        _entry_id: i64,
        _reversal: i64,
        _correction: Option<i64>,
        _decision: &Decision,
    ) -> Result<i64, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Connection for Skeleton {
    async fn connect(_url: &str, _options: &StoreOptions) -> Result<Self, StoreError> {
        Err(StoreError::Unsupported(
            "a skeleton backend connects nowhere",
        ))
    }
    async fn close(&self) {
        unimplemented!("a skeleton backend")
    }
    async fn migrate(&self) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn ready(&self) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn check_session_mode(&self, _timeout: Duration) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Recording for Skeleton {
    async fn load_run_counts(
        &self,
        _source: &str,
        _prefix: &str,
    ) -> Result<LoadRunCounts, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn external_id(&self, _event_id: EventId) -> Result<Option<String>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn record(&self, _events: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn record_new(
        &self,
        _events: &[&NewEvent],
        _lock_timeout_ms: u64,
    ) -> Result<Vec<Option<EventId>>, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl FeedRows for Skeleton {
    async fn feed_cursor(&self, _source: &str, _account: &str) -> Result<Option<i64>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn advance_feed_cursor(
        &self,
        _source: &str,
        _account: &str,
        _from: Option<i64>,
        _to: i64,
    ) -> Result<bool, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn request_opening(
        &self,
        _source: &str,
        _since: NaiveDate,
    ) -> Result<Option<NaiveDate>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn opening_requested(&self, _source: &str) -> Result<Option<NaiveDate>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn booked(
        &self,
        _keys: &[String],
        _account: &str,
        _recorded_by: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn booked_between(
        &self,
        _source: &str,
        _account: &str,
        _from: NaiveDate,
        _to: NaiveDate,
    ) -> Result<Vec<(String, String)>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn newest_delivery(
        &self,
        _source: &str,
        _after: EventId,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn facts_of(
        &self,
        _events: &[crate::ids::EventId],
    ) -> Result<HashMap<i64, (String, Option<serde_json::Value>)>, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Queue for Skeleton {
    async fn sweep(&self, _grace_secs: u64, _batch_max: u32) -> Result<u64, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Health for Skeleton {
    async fn verify(&self) -> Result<Vec<Check>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn gauges(&self) -> Result<Gauges, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn activity(
        &self,
        _since: chrono::NaiveDate,
    ) -> Result<(DayCounts, DayCounts), StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl FinanceRows for Skeleton {
    async fn attach_lines(&self, _entries: &mut [EntryView]) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn balances(&self, _query: BalanceQuery) -> Result<Vec<BalanceRow>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn compact_balances(&self) -> Result<u64, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn open_receivables(
        &self,
        _accounts: &[String],
        _since_on_or_before: NaiveDate,
        _limit: u32,
    ) -> Result<Vec<OpenReceivable>, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Fleet for Skeleton {
    async fn grant_roles(&self) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn keep_worker_alive(&self, _name: &str) -> Result<(), StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn live_workers(
        &self,
        _window: std::time::Duration,
        _own_prefix: &str,
    ) -> Result<u32, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl ReviewReads for Skeleton {
    async fn event(&self, _id: EventId) -> Result<Option<EventView>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn event_by_key(
        &self,
        _source: &str,
        _external_id: &str,
    ) -> Result<Option<EventView>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn dead_letters(
        &self,
        _filter: &DeadLetterFilter,
        _page: PageRequest,
    ) -> Result<Page<DeadLetterSummary>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn dead_letter(&self, _id: i64) -> Result<Option<DeadLetterDetail>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn conflicts(
        &self,
        _state: Option<&str>,
        _page: PageRequest,
    ) -> Result<Page<ConflictView>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn conflict(&self, _id: i64) -> Result<Option<ConflictDetail>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn event_detail(
        &self,
        _id: EventId,
    ) -> Result<Option<crate::review::EventDetail>, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl FinanceReads for Skeleton {
    async fn journal(
        &self,
        _filter: &JournalFilter,
        _after: Option<JournalCursor>,
        _limit: u32,
    ) -> Result<JournalPage, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn entry(&self, _id: i64) -> Result<Option<EntryView>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn correction_of_entry(
        &self,
        _entry_id: i64,
    ) -> Result<Option<crate::store::corrections::PastCorrection>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn reconciliation(&self, _payout_id: &str) -> Result<Option<Reconciliation>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn payouts(
        &self,
        _after: Option<&str>,
        _limit: u32,
    ) -> Result<Vec<PayoutSummary>, StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn payout_summaries_differing(&self) -> Result<Vec<String>, StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Sessions for Skeleton {
    async fn open_session(
        &self,
        _session: &crate::store::sessions::NewSession<'_>,
    ) -> Result<(), crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn session(
        &self,
        _id_sha256: &str,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<crate::store::sessions::StoredSession>, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn close_session(&self, _id_sha256: &str) -> Result<bool, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn close_sessions_of(&self, _actor: &str) -> Result<u64, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Retention for Skeleton {
    async fn prune_rule(
        &self,
        _rule: &crate::store::retention::ExpiryRule,
        _actor: &str,
        _dry_run: bool,
    ) -> Result<crate::store::retention::PruneLine, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn erase_payload(
        &self,
        _event_id: i64,
        _decision: &crate::review::Decision,
    ) -> Result<crate::review::Decided, crate::review::DecisionError> {
        unimplemented!("a skeleton backend")
    }
    async fn payload_erasure(
        &self,
        _id: i64,
    ) -> Result<Option<crate::store::retention::PayloadErasure>, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl Pauses for Skeleton {
    async fn pause_source(
        &self,
        _source: &str,
        _decision: &crate::review::Decision,
    ) -> Result<crate::store::pauses::PauseChange, crate::review::DecisionError> {
        unimplemented!("a skeleton backend")
    }
    async fn resume_source(
        &self,
        _source: &str,
        _decision: &crate::review::Decision,
    ) -> Result<crate::store::pauses::PauseChange, crate::review::DecisionError> {
        unimplemented!("a skeleton backend")
    }
    async fn source_pauses(
        &self,
        _in_force_only: bool,
        _limit: u32,
    ) -> Result<Vec<crate::store::pauses::SourcePause>, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
}

impl EventSearch for Skeleton {
    async fn search_events(
        &self,
        _filter: &crate::review::EventFilter,
        _page: crate::review::PageRequest,
    ) -> Result<crate::review::Page<crate::review::EventSummary>, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
    async fn search_plan(
        &self,
        _filter: &crate::review::EventFilter,
    ) -> Result<String, crate::store::StoreError> {
        unimplemented!("a skeleton backend")
    }
}
