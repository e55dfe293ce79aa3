//! The configured sources' resolving halves (`providers::Resolve`), by source: what a job whose
//! event names the money (a trigger) is resolved through, and the loop that posts a resolution
//! too large for one transaction chunk by chunk.

use std::collections::HashMap;
use std::sync::Arc;

use ledger::job::{JobRef, Posted};
use ledger::store::ResolvedPost;
use ledger::{PostError, SourceName, Store};
use providers::{Budget, Chunks, Resolve};

/// The resolvers of this worker's sources.
#[derive(Clone, Debug, Default)]
pub struct Resolvers {
    by_source: HashMap<SourceName, Arc<dyn Resolve>>,
}

impl Resolvers {
    pub fn new(by_source: HashMap<SourceName, Arc<dyn Resolve>>) -> Self {
        Self { by_source }
    }

    /// No source of this worker records triggers: no job needs its event read before posting.
    pub fn is_empty(&self) -> bool {
        self.by_source.is_empty()
    }

    pub(crate) fn get(&self, source: &SourceName) -> Option<&dyn Resolve> {
        self.by_source.get(source).map(Arc::as_ref)
    }

    /// How `source`'s feed is swept, if it has one.
    pub fn feed_of(&self, source: &SourceName) -> Option<providers::FeedSettings> {
        self.by_source.get(source)?.feed()
    }

    /// `source`'s provider's own ledger, if it can be read.
    pub fn ledger_of(&self, source: &SourceName) -> Option<&dyn providers::ProviderLedger> {
        self.by_source.get(source)?.ledger()
    }

    /// The sources whose feed is swept, with how.
    pub(crate) fn feeds(&self) -> impl Iterator<Item = (SourceName, providers::FeedSettings)> + '_ {
        self.by_source
            .iter()
            .filter_map(|(source, resolver)| Some((source.clone(), resolver.feed()?)))
    }

    /// `source`'s numbered documents, if its provider numbers them.
    pub fn sequence_of(&self, source: &SourceName) -> Option<&dyn providers::Sequence> {
        self.by_source.get(source)?.sequence()
    }

    /// The sources whose numbered documents are followed.
    pub(crate) fn sequences(&self) -> impl Iterator<Item = (SourceName, &dyn providers::Sequence)> {
        self.by_source
            .iter()
            .filter_map(|(source, resolver)| Some((source.clone(), resolver.sequence()?)))
    }

    /// Every request budget, so the fleet's size can be applied to all of them.
    pub(crate) fn budgets(&self) -> impl Iterator<Item = &Budget> {
        self.by_source.values().filter_map(|r| r.budget())
    }
}

/// At most this many chunks of one job posting at once, each in its own transaction.
const CHUNKS_IN_FLIGHT: usize = 4;

/// Posts `chunks` for `job`'s attempt, each chunk in its own transaction: up to
/// [`CHUNKS_IN_FLIGHT`] side by side while the next is read (they share the event's lock), and
/// the last (which marks the event posted) only once every other has posted. A run that stops
/// half way is run again and finds what it posted already posted, with the same facts.
pub(crate) async fn post_chunks(
    store: &Store,
    mut chunks: Box<dyn Chunks>,
    job: &JobRef,
    attempt: u32,
    lock_timeout_ms: u64,
) -> Result<Posted, PostError> {
    let mut tally = Tally::default();
    let mut posting = tokio::task::JoinSet::new();
    loop {
        while let Some(done) = posting.try_join_next() {
            if let Some(settled) = tally.add(done)? {
                return Ok(settled);
            }
        }
        while posting.len() >= CHUNKS_IN_FLIGHT {
            let Some(done) = posting.join_next().await else {
                break;
            };
            if let Some(settled) = tally.add(done)? {
                return Ok(settled);
            }
        }
        let resolved = chunks.next_chunk().await?;
        if resolved.partial {
            let (store, job) = (store.clone(), job.clone());
            posting.spawn(async move {
                let post = ResolvedPost {
                    job: &job,
                    attempt,
                    resolved: &resolved,
                };
                store.post_resolved(&post, lock_timeout_ms).await
            });
            continue;
        }
        while let Some(done) = posting.join_next().await {
            if let Some(settled) = tally.add(done)? {
                return Ok(settled);
            }
        }
        let post = ResolvedPost {
            job,
            attempt,
            resolved: &resolved,
        };
        return match store.post_resolved(&post, lock_timeout_ms).await? {
            Posted::Movements {
                written,
                existing,
                received_at,
            } => Ok(Posted::Movements {
                written: tally.written + written,
                existing: tally.existing + existing,
                received_at,
            }),
            // Posted or closed by another run meanwhile.
            other => Ok(other),
        };
    }
}

/// What a job's chunks posted so far.
#[derive(Default)]
struct Tally {
    written: u32,
    existing: u32,
}

impl Tally {
    /// Counts a chunk's posting: its error, or (`Some`) the answer when another run posted or
    /// closed the event meanwhile (nothing more to do).
    fn add(
        &mut self,
        done: Result<Result<Posted, PostError>, tokio::task::JoinError>,
    ) -> Result<Option<Posted>, PostError> {
        let posted = done.map_err(|_| {
            PostError::from(ledger::StoreError::Interrupted(
                "a chunk's posting was lost",
            ))
        })??;
        match posted {
            Posted::Movements {
                written, existing, ..
            } => {
                self.written += written;
                self.existing += existing;
                Ok(None)
            }
            other => Ok(Some(other)),
        }
    }
}
