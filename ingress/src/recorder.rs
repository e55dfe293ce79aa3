//! Recording with group commit. Deliveries of one event each (most deliveries of every provider)
//! that arrive together are inserted by one store call with one commit
//! (`Store::record_new`); each is answered as if recorded alone, and only after that commit.
//! What the group cannot answer by itself goes through `Store::record` alone: an event whose key
//! was taken (a replay or a conflict); every event of a group that waited longer than
//! `ingress.lock_timeout_ms` for a key another transaction held (so one stalled key holds up only
//! its own delivery, never a group slot); and every event of a group the database refused for a
//! reason other than being unavailable (so one bad event cannot fail the others).
//! Deliveries of several events (a batch of notification items) are recorded by `Store::record`
//! in their own transaction.

use std::sync::Arc;

use ledger::group::Grouper;
use ledger::store::{STATEMENT_BYTES_MAX, split_by_bytes};
use ledger::{EventId, NewEvent, Recorded, Store, StoreError};
use serde::{Deserialize, Serialize};
use tracing::warn;

/// The `[ingress]` settings. Every limit carries its unit in its name.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngressSettings {
    /// At most this many concurrent deliveries share one recording commit; 1 gives every
    /// delivery its own.
    pub group_size_max: usize,
    /// At most this many recording commits of groups in flight at once.
    pub groups_max: usize,
    /// A group's statement waits at most this long for a key another transaction holds, then
    /// leaves its deliveries to be recorded one by one (PostgreSQL).
    pub lock_timeout_ms: u64,
    /// A webhook's body must arrive whole within this long of its head (a sender trickling
    /// it, or never ending a chunked one, gets 408).
    pub body_read_timeout_ms: u64,
    /// Bodies being read before their signature is checked, all connections together, hold at
    /// most this much memory, reserved as their bytes arrive: a delivery whose next bytes do
    /// not fit gets 503 with `Retry-After`.
    pub body_budget_bytes: usize,
    /// What the bodies being read from one client address may hold together.
    pub client_budget_bytes: usize,
    /// What the bodies being read for one source may hold together.
    pub source_budget_bytes: usize,
    /// After its first second, a body must keep arriving at this many bytes a second on average
    /// (else 408): a connection trickling bytes is closed long before `body_read_timeout_ms`.
    pub body_min_bytes_per_sec: u64,
}

impl Default for IngressSettings {
    fn default() -> Self {
        Self {
            group_size_max: 64,
            groups_max: 2,
            lock_timeout_ms: 1000,
            body_read_timeout_ms: 10_000,
            body_budget_bytes: 32 * 1024 * 1024,
            client_budget_bytes: 4 * 1024 * 1024,
            source_budget_bytes: 16 * 1024 * 1024,
            body_min_bytes_per_sec: 1024,
        }
    }
}

impl IngressSettings {
    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("group_size_max", self.group_size_max as u64),
            ("groups_max", self.groups_max as u64),
            // PostgreSQL reads a lock timeout of 0 as "wait for ever".
            ("lock_timeout_ms", self.lock_timeout_ms),
            ("body_read_timeout_ms", self.body_read_timeout_ms),
            ("body_budget_bytes", self.body_budget_bytes as u64),
            ("client_budget_bytes", self.client_budget_bytes as u64),
            ("source_budget_bytes", self.source_budget_bytes as u64),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("ingress.{name} must be positive"));
            }
        }
        Ok(())
    }
}

/// What a delivery adds to its statement besides its payload (ids, fingerprint, canonical facts).
const EVENT_BYTES_OVERHEAD: usize = 512;

/// What the group said of one delivery.
#[derive(Clone, Copy, Debug)]
enum GroupAnswer {
    New(EventId),
    /// For `Store::record` to settle alone: its key was taken (a replay or a conflict), or the
    /// group kept nothing because it waited too long for a key held elsewhere, or because the
    /// database refused it for good (perhaps for another delivery's sake).
    Alone,
    /// The database was unavailable; nothing of the group was kept.
    Unavailable,
}

/// A delivery's events, shared with the group that records them.
type Delivery = Arc<Vec<NewEvent>>;

#[derive(Debug)]
pub(crate) struct Recorder {
    store: Store,
    /// `None` when grouping is off (`group_size_max = 1`).
    group: Option<Grouper<Delivery, GroupAnswer>>,
}

impl Recorder {
    /// Spawns the group loop on the current tokio runtime.
    pub(crate) fn spawn(store: Store, settings: &IngressSettings) -> Self {
        let lock_timeout_ms = settings.lock_timeout_ms;
        let group = (settings.group_size_max > 1).then(|| {
            let store = store.clone();
            Grouper::spawn(
                settings.group_size_max,
                settings.groups_max,
                move |group: Vec<Delivery>| record_group(store.clone(), group, lock_timeout_ms),
            )
        });
        Self { store, group }
    }

    /// Records one delivery's events; returns only after their commit.
    pub(crate) async fn record(&self, delivery: &Delivery) -> Result<Vec<Recorded>, StoreError> {
        let Some(group) = self.group.as_ref().filter(|_| delivery.len() == 1) else {
            return self.store.record(delivery).await;
        };
        match group.call(delivery.clone()).await {
            Some(GroupAnswer::New(event_id)) => Ok(vec![Recorded::New(event_id)]),
            Some(GroupAnswer::Alone) => self.store.record(delivery).await,
            Some(GroupAnswer::Unavailable) => Err(StoreError::Interrupted(
                "the group's recording failed on the database; nothing of it was kept",
            )),
            None => Err(StoreError::Interrupted(
                "the recording group ended before answering",
            )),
        }
    }
}

async fn record_group(
    store: Store,
    group: Vec<Delivery>,
    lock_timeout_ms: u64,
) -> Vec<GroupAnswer> {
    metrics::histogram!("settle_ingress_group_size").record(group.len() as f64);
    // `Recorder::record` groups only deliveries of exactly one event.
    let events: Vec<&NewEvent> = group.iter().map(|delivery| &delivery[0]).collect();
    let sizes: Vec<usize> = events
        .iter()
        .map(|event| event.payload.len() + EVENT_BYTES_OVERHEAD)
        .collect();
    // Statements side by side, each its own commit (see STATEMENT_BYTES_MAX).
    let statements = split_by_bytes(&sizes, STATEMENT_BYTES_MAX);
    futures::future::join_all(
        statements
            .into_iter()
            .map(|range| record_together(&store, &events[range], lock_timeout_ms)),
    )
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// One statement's deliveries, inserted with one commit.
async fn record_together(
    store: &Store,
    events: &[&NewEvent],
    lock_timeout_ms: u64,
) -> Vec<GroupAnswer> {
    match store.record_new(events, lock_timeout_ms).await {
        Ok(inserted) => inserted
            .into_iter()
            .map(|id| id.map_or(GroupAnswer::Alone, GroupAnswer::New))
            .collect(),
        Err(error) => {
            let answer = if error.is_transient() && !error.is_lock_wait() {
                GroupAnswer::Unavailable
            } else {
                GroupAnswer::Alone
            };
            warn!(%error, ?answer, deliveries = events.len(), "group recording failed; nothing of it was kept");
            metrics::counter!("settle_ingress_groups_failed_total", "then" => match answer {
                GroupAnswer::Unavailable => "unavailable",
                _ => "alone",
            })
            .increment(1);
            vec![answer; events.len()]
        }
    }
}
