//! The `[workers]` settings. Every limit carries its unit in its name.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// Jobs in flight at once in this process.
    pub concurrency: usize,
    /// Attempts (rescues included) before an event goes to the dead letter.
    pub attempts_max: u32,
    /// First retry delay; doubles each attempt (with jitter), up to `backoff_max_ms`.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// Jobs fetched per query.
    pub batch_size: usize,
    /// At most this many concurrent jobs share one attempt-start commit and one posting
    /// commit (group commit); 1 gives every job its own transactions.
    pub group_size_max: usize,
    /// At most this many groups of each kind (starts, postings) committing at once.
    pub groups_max: usize,
    /// Liveness: a worker unseen for `heartbeat_interval_ms × missed_heartbeats` is dead and its
    /// jobs are rescued by the others.
    pub heartbeat_interval_ms: u64,
    pub missed_heartbeats: usize,
    /// Besides LISTEN/NOTIFY, look for due jobs (retries, requeues) this often.
    pub poll_interval_ms: u64,
    /// How often the sweep looks for recorded events without a live job, and how old such an
    /// event must be before it counts as stranded.
    pub sweep_interval_secs: u64,
    pub sweep_grace_secs: u64,
    pub sweep_batch_max: u32,
    /// On SIGTERM: how long in-flight jobs get to finish.
    pub drain_timeout_secs: u64,
    /// How long a posting transaction waits for a row lock before failing transiently.
    pub lock_timeout_ms: u64,
    /// Longest pause between restarts of a failed worker.
    pub restart_backoff_max_ms: u64,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            concurrency: 128,
            attempts_max: 8,
            backoff_base_ms: 1_000,
            backoff_max_ms: 300_000,
            batch_size: 128,
            group_size_max: 64,
            groups_max: 2,
            heartbeat_interval_ms: 2_000,
            missed_heartbeats: 4,
            poll_interval_ms: 1_000,
            sweep_interval_secs: 30,
            sweep_grace_secs: 60,
            sweep_batch_max: 1_000,
            drain_timeout_secs: 30,
            lock_timeout_ms: 5_000,
            restart_backoff_max_ms: 30_000,
        }
    }
}

impl WorkerSettings {
    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("concurrency", self.concurrency as u64),
            ("attempts_max", u64::from(self.attempts_max)),
            ("batch_size", self.batch_size as u64),
            ("group_size_max", self.group_size_max as u64),
            ("groups_max", self.groups_max as u64),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("missed_heartbeats", self.missed_heartbeats as u64),
            ("poll_interval_ms", self.poll_interval_ms),
            ("sweep_interval_secs", self.sweep_interval_secs),
            ("sweep_batch_max", u64::from(self.sweep_batch_max)),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("workers.{name} must be positive"));
            }
        }
        if self.backoff_max_ms < self.backoff_base_ms {
            return Err("workers.backoff_max_ms must be at least workers.backoff_base_ms".into());
        }
        Ok(())
    }
}
