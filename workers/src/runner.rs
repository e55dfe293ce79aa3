//! What a worker does with one `PostSettlement` job: start an attempt (committed before any
//! work), post, and on failure let the retry policy decide between a scheduled retry and the
//! dead letter. How the job ended is written by the store in the transaction that decided it
//! (its queue row deleted, killed, or due again later); apalis persists nothing of it.

use std::time::Duration;

use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;

use apalis_core::error::{AbortError, BoxDynError};
use ledger::job::{
    AttemptStart, FailureDecision, JobPayload, JobRef, Posted, Work, out_of_attempts,
};
use ledger::{PostError, PostingRules, Store, StoreError};
use tracing::{debug, error, info, warn};

use crate::chaos::Chaos;
use crate::group::WorkerGroupers;
use crate::resolvers::{Resolvers, post_chunks};
use crate::retry::RetryPolicy;
use crate::settings::WorkerSettings;
use ledger::feed::Opening;
use ledger::trigger::Trigger;
use ledger::{ProviderError, SourceName};
use providers::Resolution;

/// After a store failure, the job is given back to the queue due this much later (so a flapping
/// database is not hammered by immediate refetches); giving it back is tried again with this
/// pause, doubling up to [`STORE_FAILURE_PAUSE_MAX`], until it works or the worker stops.
const STORE_FAILURE_PAUSE: Duration = Duration::from_millis(500);
/// How long a job of a paused source waits before its start is tried again. Resuming the source
/// makes its jobs due at once, so this is only the backstop; long, so that a paused backlog is
/// not fetched over and over.
const PAUSED_RECHECK_MS: u64 = 10 * 60 * 1000;
const STORE_FAILURE_PAUSE_MAX: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct Runner {
    store: Store,
    /// Attempt starts and postings go through here, grouped with other jobs' (one commit each).
    group: WorkerGroupers,
    /// Every attempt holds this shared from before it starts until it is closed; a suspect's
    /// attempt (see [`AttemptStart::Suspect`]) holds it exclusively.
    alone: RwLock<()>,
    lock_timeout_ms: u64,
    policy: RetryPolicy,
    chaos: Chaos,
    /// The resolvers of the sources whose webhooks only name the money; empty when none is
    /// configured (then no job reads its event before posting).
    resolvers: Resolvers,
    rules: PostingRules,
}

/// How one run of a job ended (the store has written it already, except after a store
/// failure).
#[derive(Debug)]
enum Finish {
    /// Posted, or nothing left to do: the job's row is gone.
    Done,
    /// Dead-lettered or stray: the job is killed; nothing runs it again by itself.
    Kill(&'static str),
    /// Not finished: the job is due again later, and any worker may fetch it then.
    HandBack(Handback),
}

/// Why a job was handed back to apalis unfinished.
#[derive(Debug, thiserror::Error)]
enum Handback {
    #[error("retry scheduled: {0}")]
    Retry(PostError),
    #[error("rescued after its worker died; backing off for {0} ms")]
    Rescued(u64),
    #[error("its source is paused; looking again in {0} ms unless it is resumed first")]
    Paused(u64),
    #[error("its source's budget serves the jobs running first; due again in {0} ms")]
    PutOff(u64),
    #[error("store unavailable: {0}")]
    Store(#[from] StoreError),
}

impl From<StoreError> for Finish {
    fn from(error: StoreError) -> Self {
        Finish::HandBack(Handback::Store(error))
    }
}

impl Runner {
    pub(crate) fn new(
        store: Store,
        rules: PostingRules,
        resolvers: Resolvers,
        settings: &WorkerSettings,
        chaos: Chaos,
    ) -> Self {
        let group = WorkerGroupers::spawn(
            store.clone(),
            rules.clone(),
            settings.attempts_max,
            settings.lock_timeout_ms,
            settings.group_size_max,
            settings.groups_max,
        );
        Self {
            store,
            group,
            alone: RwLock::new(()),
            lock_timeout_ms: settings.lock_timeout_ms,
            policy: RetryPolicy {
                attempts_max: settings.attempts_max,
                base_ms: settings.backoff_base_ms,
                max_ms: settings.backoff_max_ms,
            },
            chaos,
            resolvers,
            rules,
        }
    }

    /// Runs one job. The answer is for apalis' logs only (`Ok` = done, `AbortError` = killed,
    /// any other error = due again later): the store has written the job's end already. After
    /// a store failure the job is given back here, retried until it works or `shutdown`; a job
    /// left behind at shutdown is rescued by the other workers once this one's heartbeat stops.
    pub(crate) async fn run(
        &self,
        payload: JobPayload,
        job_id: String,
        worker: &str,
        shutdown: &CancellationToken,
    ) -> Result<(), BoxDynError> {
        let started = std::time::Instant::now();
        let finish = match payload {
            JobPayload::Post(post) => {
                let job = JobRef {
                    job_id: job_id.clone(),
                    event_id: post.event_id,
                };
                self.attempt(&job, worker).await
            }
            JobPayload::Unreadable(value) => self.unreadable(&job_id, &value).await,
        };
        metrics::histogram!("settle_job_duration_seconds").record(started.elapsed().as_secs_f64());
        match finish {
            Finish::Done => Ok(()),
            Finish::Kill(reason) => Err(AbortError::new(reason).into()),
            Finish::HandBack(Handback::Store(error)) => {
                warn!(%error, "store failed; giving the job back to the queue");
                self.give_back(&job_id, worker, shutdown).await;
                Err(Handback::Store(error).into())
            }
            Finish::HandBack(handback) => Err(handback.into()),
        }
    }

    async fn attempt(&self, job: &JobRef, worker: &str) -> Finish {
        let work = match self.resolvers.is_empty() {
            true => Work::Post,
            false => match self.group.work(job).await {
                Ok(work) => work,
                Err(error) => return error.into(),
            },
        };
        let source = match &work {
            Work::Resolve { source, .. } => Some(source.clone()),
            Work::Post | Work::Unreadable(_) => None,
        };
        // A job that calls its source's provider runs only on a turn of the source's budget;
        // without one it goes back to the queue, nothing started, due when its turn comes.
        let budget = source
            .as_ref()
            .and_then(|source| self.resolvers.get(source))
            .and_then(|resolver| resolver.budget());
        let _turn = match budget.map(providers::Budget::job_turn) {
            Some(Err(put_off)) => return self.put_off(job, worker, put_off).await,
            Some(Ok(turn)) => Some(turn),
            None => None,
        };
        // Held from before the attempt opens until it is closed: while a suspect runs alone,
        // no other attempt of this process is open.
        let mut shared = Some(self.alone.read().await);
        let mut start = match self.group.start_attempt(job, worker).await {
            Ok(start) => start,
            Err(error) => return error.into(),
        };
        let mut _alone = None;
        if start == AttemptStart::Suspect {
            drop(shared.take());
            _alone = Some(self.alone.write().await);
            info!(job_id = %job.job_id, event_id = %job.event_id, "its last attempt died with its worker; running it alone");
            metrics::counter!("settle_job_attempts_alone_total").increment(1);
            start = match self
                .store
                .start_attempt_alone(job, worker, self.policy.attempts_max, self.lock_timeout_ms)
                .await
            {
                Ok(start) => start,
                Err(error) => return error.into(),
            };
        }
        let attempt = match self.started(start, job, worker).await {
            Ok(attempt) => attempt,
            Err(finish) => return finish,
        };
        let posting = self.work(job, attempt, work).await;
        self.finish(job, worker, attempt, source.as_ref(), posting)
            .await
    }

    /// Gives a job whose source's budget has no turn for it now back to the queue, due in
    /// `put_off`; nothing of it is started or counted.
    async fn put_off(&self, job: &JobRef, worker: &str, put_off: Duration) -> Finish {
        let delay_ms = u64::try_from(put_off.as_millis()).unwrap_or(u64::MAX);
        if let Err(error) = self.store.retry_later(&job.job_id, worker, delay_ms).await {
            return error.into();
        }
        debug!(job_id = %job.job_id, event_id = %job.event_id, delay_ms, "no turn of its source's budget; put off");
        count("put_off");
        Finish::HandBack(Handback::PutOff(delay_ms))
    }

    /// The attempt number when the start says to run; otherwise how this run ends (what the
    /// start decided is written already, but for handing a job back).
    async fn started(
        &self,
        start: AttemptStart,
        job: &JobRef,
        worker: &str,
    ) -> Result<u32, Finish> {
        match start {
            AttemptStart::Run { attempt } => {
                metrics::counter!("settle_job_attempts_started_total").increment(1);
                Ok(attempt)
            }
            AttemptStart::NothingToDo => {
                debug!(job_id = %job.job_id, event_id = %job.event_id, "event already settled");
                count("nothing_to_do");
                Err(Finish::Done)
            }
            AttemptStart::Suspect => Err(Finish::from(StoreError::Corrupt(
                "a start made alone answered suspect".into(),
            ))),
            AttemptStart::Stray => {
                error!(job_id = %job.job_id, event_id = %job.event_id, "job names no event; killed");
                count("stray");
                Err(Finish::Kill("job names no event"))
            }
            AttemptStart::Exhausted => {
                warn!(job_id = %job.job_id, event_id = %job.event_id, "attempts exhausted; dead-lettered");
                count("exhausted");
                Err(Finish::Kill("attempts exhausted"))
            }
            AttemptStart::Paused => {
                debug!(job_id = %job.job_id, event_id = %job.event_id, "source paused; handed back");
                if let Err(error) = self
                    .store
                    .retry_later(&job.job_id, worker, PAUSED_RECHECK_MS)
                    .await
                {
                    return Err(error.into());
                }
                count("paused");
                Err(Finish::HandBack(Handback::Paused(PAUSED_RECHECK_MS)))
            }
            AttemptStart::Rescued { attempts } => {
                let delay_ms = self.policy.delay_ms(attempts);
                warn!(job_id = %job.job_id, event_id = %job.event_id, attempts, delay_ms, "rescued after a worker died");
                if let Err(error) = self.store.retry_later(&job.job_id, worker, delay_ms).await {
                    return Err(error.into());
                }
                count("rescued");
                metrics::counter!("settle_job_rescues_total").increment(1);
                Err(Finish::HandBack(Handback::Rescued(delay_ms)))
            }
        }
    }

    /// Posts the job's event: its own facts, or what its trigger resolves to through its
    /// source's provider.
    async fn work(&self, job: &JobRef, attempt: u32, work: Work) -> Result<Posted, PostError> {
        let (source, trigger) = match work {
            Work::Post => {
                self.chaos.before_posting(&self.store, job.event_id).await;
                return self.group.post(job, attempt).await;
            }
            Work::Unreadable(detail) => return Err(PostError::CorruptEvent(detail)),
            Work::Resolve { source, trigger } => (source, trigger),
        };
        match self.resolve(&source, &trigger).await? {
            Resolution::Whole(resolved) => {
                self.chaos.before_posting(&self.store, job.event_id).await;
                self.group.post_resolved(job, attempt, resolved).await
            }
            Resolution::Chunked(chunks) => {
                self.chaos.before_posting(&self.store, job.event_id).await;
                post_chunks(&self.store, chunks, job, attempt, self.lock_timeout_ms).await
            }
        }
    }

    /// What `trigger` names, fetched by its source's provider and drafted to the source's
    /// accounts; an opening balance is computed from the provider's balance and the books.
    async fn resolve(
        &self,
        source: &SourceName,
        trigger: &Trigger,
    ) -> Result<Resolution, PostError> {
        let resolver = self
            .resolvers
            .get(source)
            .ok_or_else(|| ProviderError::NotConfigured(source.to_string()))?;
        let accounts = self.rules.accounts(source);
        if let Some(opening) = Opening::from_trigger(trigger) {
            let opening = opening.map_err(PostError::CorruptEvent)?;
            let provider = resolver.ledger().ok_or_else(|| {
                PostError::CorruptEvent(format!("source {source} keeps no provider ledger"))
            })?;
            let resolved =
                crate::feed::opening(&self.store, source, provider, &accounts, opening).await?;
            return Ok(Resolution::Whole(resolved));
        }
        resolver.resolve(trigger, &accounts).await
    }

    /// Counts a posting, or has the retry policy decide what a failure means and records it.
    /// A key the provider refused pauses the source instead (see [`Runner::pause_refused`]).
    async fn finish(
        &self,
        job: &JobRef,
        worker: &str,
        attempt: u32,
        source: Option<&SourceName>,
        posting: Result<Posted, PostError>,
    ) -> Finish {
        let error = match posting {
            Ok(posted) => {
                let outcome = match posted {
                    Posted::New { .. } => "posted",
                    Posted::Replayed { .. } => "replayed",
                    Posted::AlreadySettled => "already_settled",
                    Posted::Movements { written: 0, .. } => "movements_existing",
                    Posted::Movements { .. } => "movements_posted",
                };
                info!(job_id = %job.job_id, event_id = %job.event_id, attempt, outcome, "job done");
                count(outcome);
                if let Posted::New { received_at, .. }
                | Posted::Replayed { received_at, .. }
                | Posted::Movements { received_at, .. } = posted
                {
                    let lag = (chrono::Utc::now() - received_at)
                        .to_std()
                        .unwrap_or_default();
                    metrics::histogram!("settle_posting_lag_seconds").record(lag.as_secs_f64());
                }
                return Finish::Done;
            }
            Err(error) => error,
        };
        let mut decision = self.policy.decide(attempt, &error);
        if let (Some(source), PostError::Provider(refused @ ProviderError::Auth { .. })) =
            (source, &error)
            && !out_of_attempts(attempt, self.policy.attempts_max)
            && self.pause_refused(source, refused).await
        {
            decision = FailureDecision::RetryAfterMs(PAUSED_RECHECK_MS);
        }
        if let Err(store_error) = self
            .store
            .fail_attempt(job, worker, attempt, &error, decision)
            .await
        {
            // The attempt stays open; the next run records it as died and backs off.
            return store_error.into();
        }
        match decision {
            FailureDecision::RetryAfterMs(delay_ms) => {
                info!(job_id = %job.job_id, event_id = %job.event_id, attempt, delay_ms, code = error.code(), "attempt failed; retry scheduled");
                count("retry");
                Finish::HandBack(Handback::Retry(error))
            }
            FailureDecision::DeadLetter(class) => {
                warn!(job_id = %job.job_id, event_id = %job.event_id, attempt, class = class.as_str(), code = error.code(), "dead-lettered");
                count("dead_lettered");
                Finish::Kill("dead-lettered")
            }
        }
    }

    /// Pauses `source`, whose provider refused its API key: every event of the source would fail
    /// the same way until the key is fixed, so they wait (the one that met the refusal too, its
    /// attempt recorded) instead of each going to the dead letter. Whether the source is paused
    /// now (by this call or an earlier one); if the pause cannot be written, the policy decides
    /// as for any permanent error.
    async fn pause_refused(&self, source: &SourceName, refused: &ProviderError) -> bool {
        match self
            .store
            .pause_source(
                source.as_str(),
                &ledger::store::provider_auth_pause(&refused.to_string()),
            )
            .await
        {
            Ok(change) => {
                if change.changed {
                    error!(%source, error = %refused, "the provider refused the source's API key; source paused until resumed");
                }
                true
            }
            Err(error) => {
                warn!(%source, %error, "could not pause the source whose key was refused");
                false
            }
        }
    }

    /// Makes the job due again after [`STORE_FAILURE_PAUSE`], trying until the store answers or
    /// the worker stops.
    async fn give_back(&self, job_id: &str, worker: &str, shutdown: &CancellationToken) {
        let mut pause = STORE_FAILURE_PAUSE;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => return,
            }
            let delay_ms = u64::try_from(STORE_FAILURE_PAUSE.as_millis()).unwrap_or(u64::MAX);
            match self.store.retry_later(job_id, worker, delay_ms).await {
                Ok(()) => return,
                Err(error) => warn!(job_id, %error, "could not give the job back yet"),
            }
            pause = (pause * 2).min(STORE_FAILURE_PAUSE_MAX);
        }
    }

    /// A payload that is JSON but not a `PostSettlement`: dead-letter its event, or kill a stray.
    async fn unreadable(&self, job_id: &str, value: &serde_json::Value) -> Finish {
        let detail: String = value.to_string().chars().take(200).collect();
        match self.store.dead_letter_unreadable_job(job_id, &detail).await {
            Ok(Some(event_id)) => {
                warn!(job_id, %event_id, "unreadable job payload; event dead-lettered");
                count("unreadable");
                Finish::Kill("unreadable payload")
            }
            Ok(None) => {
                error!(
                    job_id,
                    "unreadable job payload of no recorded event; killed"
                );
                count("unreadable");
                Finish::Kill("unreadable payload")
            }
            Err(error) => error.into(),
        }
    }
}

/// One job run ended this way (`settle_jobs_total{outcome}`).
fn count(outcome: &'static str) {
    metrics::counter!("settle_jobs_total", "outcome" => outcome).increment(1);
}
