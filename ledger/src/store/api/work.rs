//! The store's calls for the ingress and the workers: recording deliveries, starting, posting
//! and failing attempts, the sweep.

use super::*;

impl Store {
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
        on_backend!(self, store => failures::retry_later(store, job_id, worker, delay_ms).await)
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
}
