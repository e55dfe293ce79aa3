//! The worker role: an apalis worker over the store's queue, supervised (a failed worker is
//! restarted with backoff, never in a tight loop), beside the sweep; drained on shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use apalis::prelude::WorkerBuilderExt;
use apalis_core::backend::ext::poll_strategy::PollWith;
use apalis_core::error::BoxDynError;
use apalis_core::task::data::Data;
use apalis_core::task::task_id::TaskId;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_core::worker::context::WorkerContext;
use apalis_postgres::{PostgresStorage, Pubsub};
use apalis_sqlite::SqliteStorage;
use ledger::job::{JobPayload, POST_SETTLEMENT_QUEUE};
use ledger::store::{QueuePool, RetentionPolicy};
use ledger::{PostingRules, Store, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::chaos::Chaos;
use crate::resolvers::Resolvers;
use crate::runner::Runner;
use crate::settings::WorkerSettings;
use crate::wake::NotifyOrTick;

/// A worker that ran at least this long before failing starts its restart backoff afresh.
/// How long a worker not seen since still counts in the fleet that shares provider budgets:
/// twice the longest lag of a busy worker's heartbeat seen on a loaded 2-core machine (5 s).
const BUDGET_WINDOW_MIN: Duration = Duration::from_secs(10);
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// How often a worker process folds the balances kept by day.
const BALANCES_FOLD_EVERY: Duration = Duration::from_secs(10);
const RESTART_BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// Who expires payloads, in the erasures' audit.
pub const PRUNE_ACTOR: &str = "settle (retention)";
/// How long the start-up check waits for its own NOTIFY.
const SESSION_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the worker role could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkersError {
    #[error("invalid worker settings: {0}")]
    Settings(String),
    #[error(
        "workers need a session-mode database connection (LISTEN/NOTIFY and advisory locks): {0}. \
         If DATABASE_URL goes through a transaction pooler, set WORKER_DATABASE_URL to a direct \
         or session-mode URL"
    )]
    SessionRequired(StoreError),
}

/// The worker role of one process.
#[derive(Debug)]
pub struct Workers {
    store: Store,
    settings: WorkerSettings,
    runner: Arc<Runner>,
    resolvers: Resolvers,
    health: WorkerHealth,
    /// Expires payloads by this policy this often (none: payloads are never expired here).
    retention: Option<(RetentionPolicy, Duration)>,
    current: CurrentWorker,
}

/// The name of this process' worker running now, if one is.
#[derive(Clone, Debug, Default)]
struct CurrentWorker(Arc<std::sync::Mutex<Option<String>>>);

impl CurrentWorker {
    fn set(&self, name: Option<&str>) {
        if let Ok(mut current) = self.0.lock() {
            *current = name.map(str::to_owned);
        }
    }

    fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|current| current.clone())
    }
}

/// Whether this process' worker is running right now (for `/readyz`).
#[derive(Clone, Debug, Default)]
pub struct WorkerHealth(Arc<std::sync::atomic::AtomicBool>);

impl WorkerHealth {
    pub fn is_running(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn set(&self, running: bool) {
        self.0.store(running, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Workers {
    pub fn new(
        store: Store,
        rules: PostingRules,
        resolvers: Resolvers,
        settings: WorkerSettings,
    ) -> Result<Self, WorkersError> {
        settings.validate().map_err(WorkersError::Settings)?;
        let runner = Arc::new(Runner::new(
            store.clone(),
            rules,
            resolvers.clone(),
            &settings,
            Chaos::from_env(),
        ));
        Ok(Self {
            store,
            settings,
            runner,
            resolvers,
            health: WorkerHealth::default(),
            current: CurrentWorker::default(),
            retention: None,
        })
    }

    /// Expires payloads by `policy` every `every` while working.
    pub fn with_retention(mut self, policy: RetentionPolicy, every: Duration) -> Self {
        self.retention = Some((policy, every));
        self
    }

    pub fn health(&self) -> WorkerHealth {
        self.health.clone()
    }

    /// Checks the connection supports what workers need, then works until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkersError> {
        self.store
            .check_session_mode(SESSION_PROBE_TIMEOUT)
            .await
            .map_err(WorkersError::SessionRequired)?;
        let sweep = tokio::spawn(sweep_loop(
            self.store.clone(),
            self.settings.clone(),
            shutdown.clone(),
        ));
        tokio::spawn(balances_loop(self.store.clone(), shutdown.clone()));
        if let Some((policy, every)) = &self.retention {
            tokio::spawn(prune_loop(
                self.store.clone(),
                policy.clone(),
                *every,
                shutdown.clone(),
            ));
        }
        if self.resolvers.feeds().next().is_some() {
            tokio::spawn(crate::feed::feed_loop(
                self.store.clone(),
                self.resolvers.clone(),
                self.settings.lock_timeout_ms,
                shutdown.clone(),
            ));
        }
        if self.resolvers.sequences().next().is_some() {
            tokio::spawn(crate::sequence::sequence_loop(
                self.store.clone(),
                self.resolvers.clone(),
                self.settings.lock_timeout_ms,
                shutdown.clone(),
            ));
        }
        if self.resolvers.budgets().next().is_some() {
            tokio::spawn(budget_loop(
                self.store.clone(),
                self.resolvers.clone(),
                self.settings.clone(),
                self.current.clone(),
                shutdown.clone(),
            ));
        }
        self.supervise(&shutdown).await;
        if let Err(error) = sweep.await {
            error!(%error, "sweep task failed");
        }
        info!("workers stopped");
        Ok(())
    }

    async fn supervise(&self, shutdown: &CancellationToken) {
        let mut failures: u32 = 0;
        while !shutdown.is_cancelled() {
            let name = worker_name();
            let started = Instant::now();
            info!(worker = %name, concurrency = self.settings.concurrency, "worker starting");
            self.health.set(true);
            self.current.set(Some(&name));
            let result = self.run_worker(&name, shutdown).await;
            self.current.set(None);
            self.health.set(false);
            match result {
                Ok(()) if shutdown.is_cancelled() => break,
                Ok(()) => warn!(worker = %name, "worker stopped by itself; restarting"),
                Err(error) => error!(worker = %name, %error, "worker failed; restarting"),
            }
            failures = if started.elapsed() >= HEALTHY_RUN {
                1
            } else {
                failures + 1
            };
            let pause = restart_pause(
                failures,
                Duration::from_millis(self.settings.restart_backoff_max_ms),
            );
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }

    async fn run_worker(
        &self,
        name: &str,
        shutdown: &CancellationToken,
    ) -> Result<(), BoxDynError> {
        let settings = &self.settings;
        let heartbeat = Duration::from_millis(settings.heartbeat_interval_ms);
        let poll = Duration::from_millis(settings.poll_interval_ms);
        let stop = shutdown.clone();
        let stopped = async move {
            stop.cancelled().await;
            Ok::<(), std::io::Error>(())
        };
        // The two backends are different types; the worker around them is the same.
        macro_rules! run {
            ($backend:expr) => {
                WorkerBuilder::new(name)
                    .backend($backend)
                    .concurrency(settings.concurrency)
                    .data(self.runner.clone())
                    .data(shutdown.clone())
                    .build(handle)
                    .run_until(stopped)
                    .await
            };
        }
        let run = async {
            match self.store.queue_pool() {
                QueuePool::Postgres(pool) => {
                    let config = apalis_postgres::Config::default()
                        .queue(POST_SETTLEMENT_QUEUE)
                        .batch_size(settings.batch_size)
                        .heartbeat_interval(heartbeat)
                        .missed_heartbeats(settings.missed_heartbeats)
                        .lock_tasks(false)
                        .persist_results(false);
                    let storage = PostgresStorage::<JobPayload>::new(&pool).with_config(config);
                    let pubsub = Pubsub::new(pool.clone(), POST_SETTLEMENT_QUEUE.to_owned());
                    run!(PollWith::new(storage, NotifyOrTick::pubsub(pubsub, poll)))
                }
                QueuePool::Sqlite {
                    pool,
                    jobs_inserted,
                } => {
                    let config = apalis_sqlite::Config::default()
                        .queue(POST_SETTLEMENT_QUEUE)
                        .batch_size(settings.batch_size)
                        .heartbeat_interval(heartbeat)
                        .missed_heartbeats(settings.missed_heartbeats)
                        .lock_tasks(false)
                        .persist_results(false);
                    let storage = SqliteStorage::<JobPayload>::new(&pool).with_config(config);
                    run!(PollWith::new(
                        storage,
                        NotifyOrTick::local(jobs_inserted, poll)
                    ))
                }
            }
        };
        let drain = Duration::from_secs(settings.drain_timeout_secs);
        tokio::select! {
            result = run => result.map_err(Into::into),
            _ = async { shutdown.cancelled().await; tokio::time::sleep(drain).await } => {
                warn!(worker = %name, "drain timed out; unfinished jobs will be rescued");
                Ok(())
            }
        }
    }
}

async fn handle(
    payload: JobPayload,
    task_id: TaskId,
    worker: WorkerContext,
    runner: Data<Arc<Runner>>,
    shutdown: Data<CancellationToken>,
) -> Result<(), BoxDynError> {
    runner
        .run(payload, task_id.to_string(), worker.name(), &shutdown)
        .await
}

/// What every worker name of this process begins with: the host, the process id and an id of
/// this start, so that no other process, nor a later start under a reused pid, shares it.
fn process_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "host".into());
        format!(
            "settle-{host}-{}-{}-",
            std::process::id(),
            ulid::Ulid::generate()
        )
    })
}

/// Unique per worker start: a restarted process, or a worker the supervisor restarts, must
/// never reuse a name the queue still holds jobs under.
fn worker_name() -> String {
    static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}{start}", process_prefix())
}

fn restart_pause(failures: u32, max: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RESTART_BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(max)
}

/// Re-enqueues recorded events left without a live job (a backstop, idempotent, safe to run
/// from every process).
async fn sweep_loop(store: Store, settings: WorkerSettings, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(settings.sweep_interval_secs));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        match store
            .sweep(settings.sweep_grace_secs, settings.sweep_batch_max)
            .await
        {
            Ok(0) => {}
            Ok(count) => {
                metrics::counter!("settle_sweep_requeued_total").increment(count);
                warn!(count, "sweep re-enqueued stranded events");
            }
            Err(error) => warn!(%error, "sweep failed"),
        }
    }
}

/// Folds the balances kept by day every [`BALANCES_FOLD_EVERY`], so a balance read sums about a
/// row per account, currency and day however many postings wrote them (safe from every worker
/// process at once: see `Store::compact_balances`).
async fn balances_loop(store: Store, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(BALANCES_FOLD_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        match store.compact_balances().await {
            Ok(folded) => {
                metrics::counter!("settle_balance_rows_folded_total").increment(folded);
            }
            Err(error) => warn!(%error, "folding the balances kept failed"),
        }
    }
}

/// Expires the payloads the retention policy no longer allows (see ARCHITECTURE.md, Retention):
/// idempotent, in short batches, safe from every worker process at once.
async fn prune_loop(
    store: Store,
    policy: RetentionPolicy,
    every: Duration,
    shutdown: CancellationToken,
) {
    // The first run waits a whole period: a fleet starting together adds nothing to its start.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        match store
            .prune_payloads(&policy, chrono::Utc::now(), PRUNE_ACTOR, false)
            .await
        {
            Ok(lines) => {
                for line in lines.iter().filter(|l| l.events + l.conflicts > 0) {
                    metrics::counter!("settle_payloads_expired_total")
                        .increment(line.events + line.conflicts);
                    info!(
                        source = line.source.as_deref().unwrap_or("*"),
                        events = line.events,
                        conflicts = line.conflicts,
                        erasure = line.erasure_id,
                        "expired payloads"
                    );
                }
            }
            Err(error) => warn!(%error, "payload expiry failed"),
        }
    }
}

/// Keeps each provider budget's share in step with the fleet: every heartbeat, the worker
/// processes alive split each source's requests per second. A process counts itself, and every
/// other worker seen within [`BUDGET_WINDOW_MIN`] or the rescue window, whichever is longer; it
/// also marks its current worker seen, from this task of its own: the queue's heartbeat of a
/// busy worker can lag seconds behind, and a worker missed makes every other one spend more
/// than its share, past the provider's limit, while a dead one still counted only makes the
/// fleet spend less for a while.
async fn budget_loop(
    store: Store,
    resolvers: Resolvers,
    settings: WorkerSettings,
    current: CurrentWorker,
    shutdown: CancellationToken,
) {
    let heartbeat = Duration::from_millis(settings.heartbeat_interval_ms);
    let window = (heartbeat * u32::try_from(settings.missed_heartbeats).unwrap_or(u32::MAX))
        .max(BUDGET_WINDOW_MIN);
    let mut tick = tokio::time::interval(heartbeat);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        if let Some(name) = current.get()
            && let Err(error) = store.keep_worker_alive(&name).await
        {
            warn!(%error, "marking this worker seen failed");
        }
        match store.live_workers(window, process_prefix()).await {
            Ok(workers) => resolvers
                .budgets()
                .for_each(|budget| budget.set_workers(workers)),
            Err(error) => warn!(%error, "counting the fleet's workers failed; budgets unchanged"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_and_are_capped() {
        let max = Duration::from_secs(30);
        assert_eq!(restart_pause(1, max), Duration::from_millis(500));
        assert_eq!(restart_pause(2, max), Duration::from_secs(1));
        assert_eq!(restart_pause(5, max), Duration::from_secs(8));
        assert_eq!(restart_pause(50, max), max);
    }

    #[test]
    fn worker_names_differ_per_start() {
        assert_ne!(worker_name(), worker_name());
    }
}
