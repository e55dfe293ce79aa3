//! Recording with group commit. Deliveries of one event each (Stripe, Standard Webhooks, most of
//! Adyen's) that arrive together are inserted by one store call with one commit
//! (`Store::record_new`); each is answered as if recorded alone, and only after that commit.
//! What the group cannot answer by itself goes through `Store::record` alone: an event whose key
//! was taken (a replay or a conflict), and every event of a group the database refused for a
//! reason other than being unavailable (so one bad event cannot fail the others).
//! Deliveries of several events (an Adyen batch) are recorded by `Store::record` in their own
//! transaction, as before.

use std::sync::Arc;

use jobs::group::Grouper;
use jobs::store::{STATEMENT_BYTES_MAX, split_by_bytes};
use jobs::{EventId, NewEvent, Recorded, Store, StoreError};
use serde::Deserialize;
use tracing::warn;

/// The `[ingress]` settings. Every limit carries its unit in its name.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngressSettings {
    /// At most this many concurrent deliveries share one recording commit; 1 gives every
    /// delivery its own.
    pub group_size_max: usize,
    /// At most this many recording commits of groups in flight at once.
    pub groups_max: usize,
}

impl Default for IngressSettings {
    fn default() -> Self {
        Self {
            group_size_max: 64,
            groups_max: 2,
        }
    }
}

impl IngressSettings {
    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.group_size_max == 0 {
            return Err("ingress.group_size_max must be positive".into());
        }
        if self.groups_max == 0 {
            return Err("ingress.groups_max must be positive".into());
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
    /// Its key was taken: a replay or a conflict, for `Store::record` to tell.
    Taken,
    /// The group's commit failed; nothing of it was kept.
    Failed {
        transient: bool,
    },
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
        let group = (settings.group_size_max > 1).then(|| {
            let store = store.clone();
            Grouper::spawn(
                settings.group_size_max,
                settings.groups_max,
                move |group: Vec<Delivery>| record_group(store.clone(), group),
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
            Some(GroupAnswer::Taken | GroupAnswer::Failed { transient: false }) => {
                self.store.record(delivery).await
            }
            Some(GroupAnswer::Failed { transient: true }) => Err(StoreError::Interrupted(
                "the group's recording failed on the database; nothing of it was kept",
            )),
            None => Err(StoreError::Interrupted(
                "the recording group ended before answering",
            )),
        }
    }
}

async fn record_group(store: Store, group: Vec<Delivery>) -> Vec<GroupAnswer> {
    metrics::histogram!("settle_ingress_group_size").record(group.len() as f64);
    let events: Vec<&NewEvent> = group
        .iter()
        .filter_map(|delivery| delivery.first())
        .collect();
    let sizes: Vec<usize> = events
        .iter()
        .map(|event| event.payload.len() + EVENT_BYTES_OVERHEAD)
        .collect();
    // Statements side by side, each its own commit (see STATEMENT_BYTES_MAX).
    let statements = split_by_bytes(&sizes, STATEMENT_BYTES_MAX);
    futures::future::join_all(
        statements
            .into_iter()
            .map(|range| record_together(&store, &events[range])),
    )
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// One statement's deliveries, inserted with one commit.
async fn record_together(store: &Store, events: &[&NewEvent]) -> Vec<GroupAnswer> {
    match store.record_new(events).await {
        Ok(inserted) => inserted
            .into_iter()
            .map(|id| id.map_or(GroupAnswer::Taken, GroupAnswer::New))
            .collect(),
        Err(error) => {
            warn!(%error, transient = error.is_transient(), deliveries = events.len(), "group recording failed");
            let answer = GroupAnswer::Failed {
                transient: error.is_transient(),
            };
            vec![answer; events.len()]
        }
    }
}
