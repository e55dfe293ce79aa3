//! Group commit. The jobs running at once in one process hand their attempt starts and their
//! postings to two small loops, each of which takes every request waiting at that moment (up to
//! `group_size_max`) and runs them as one store call, so N concurrent jobs cost two commits
//! instead of 2N. Nothing waits to fill a group: an idle process runs a lone job at once, and
//! under load a group is whatever arrived while the previous one was committing.
//!
//! The store answers each job as if it had run alone (see `Store::start_attempts` and
//! `Store::post_many`), so the runner cannot tell a group from a single call, and the guarantees
//! are those of a single call: a start is committed before its job's work begins, a posting is
//! all or nothing.

use std::sync::Arc;

use ledger::group::Grouper;
use ledger::job::{AttemptStart, JobRef, Posted, Work};
use ledger::resolved::Resolved;
use ledger::store::ResolvedPost;
use ledger::{EventId, PostError, PostingRules, Store, StoreError};
use tracing::warn;

type Start = (JobRef, String);
type Post = (JobRef, u32);
type PostResolved = (JobRef, u32, Arc<Resolved>);

/// The groupers of one worker process: attempt starts, reads of what each event needs, and the
/// two kinds of posting (an event's own facts; movements resolved through a provider).
#[derive(Debug)]
pub(crate) struct WorkerGroupers {
    starts: Grouper<Start, Result<AttemptStart, StoreError>>,
    work: Grouper<EventId, Result<Work, StoreError>>,
    posts: Grouper<Post, Result<Posted, PostError>>,
    resolved: Grouper<PostResolved, Result<Posted, PostError>>,
}

impl WorkerGroupers {
    pub(crate) fn spawn(
        store: Store,
        rules: PostingRules,
        attempts_max: u32,
        lock_timeout_ms: u64,
        group_size_max: usize,
        groups_max: usize,
    ) -> Self {
        let start_store = store.clone();
        let starts = Grouper::spawn(group_size_max, groups_max, move |group: Vec<Start>| {
            metrics::histogram!("settle_group_size").record(group.len() as f64);
            let store = start_store.clone();
            async move {
                store
                    .start_attempts(&group, attempts_max, lock_timeout_ms)
                    .await
            }
        });
        let work_store = store.clone();
        let work = Grouper::spawn(group_size_max, groups_max, move |group: Vec<EventId>| {
            let store = work_store.clone();
            async move {
                match store.work(&group).await {
                    Ok(work) => work.into_iter().map(Ok).collect(),
                    Err(error) => {
                        warn!(%error, events = group.len(), "reading what events need failed");
                        group
                            .iter()
                            .map(|_| Err(StoreError::Interrupted("reading the event failed")))
                            .collect()
                    }
                }
            }
        });
        let resolved_store = store.clone();
        let resolved = Grouper::spawn(
            group_size_max,
            groups_max,
            move |group: Vec<PostResolved>| {
                metrics::histogram!("settle_group_size").record(group.len() as f64);
                let store = resolved_store.clone();
                async move {
                    let posts: Vec<ResolvedPost<'_>> = group
                        .iter()
                        .map(|(job, attempt, resolved)| ResolvedPost {
                            job,
                            attempt: *attempt,
                            resolved,
                        })
                        .collect();
                    store.post_resolved_many(&posts, lock_timeout_ms).await
                }
            },
        );
        let posts = Grouper::spawn(group_size_max, groups_max, move |group: Vec<Post>| {
            metrics::histogram!("settle_group_size").record(group.len() as f64);
            let store = store.clone();
            let rules = rules.clone();
            async move { store.post_many(&group, &rules, lock_timeout_ms).await }
        });
        Self {
            starts,
            work,
            posts,
            resolved,
        }
    }

    /// `Store::work`, in the next group.
    pub(crate) async fn work(&self, job: &JobRef) -> Result<Work, StoreError> {
        self.work
            .call(job.event_id)
            .await
            .unwrap_or(Err(StoreError::Interrupted(
                "the read group ended before answering",
            )))
    }

    /// `Store::post_resolved`, in the next group.
    pub(crate) async fn post_resolved(
        &self,
        job: &JobRef,
        attempt: u32,
        resolved: Resolved,
    ) -> Result<Posted, PostError> {
        self.resolved
            .call((job.clone(), attempt, Arc::new(resolved)))
            .await
            .unwrap_or(Err(PostError::Store(StoreError::Interrupted(
                "the posting group ended before answering",
            ))))
    }

    /// `Store::start_attempt`, in the next group.
    pub(crate) async fn start_attempt(
        &self,
        job: &JobRef,
        worker: &str,
    ) -> Result<AttemptStart, StoreError> {
        self.starts
            .call((job.clone(), worker.to_owned()))
            .await
            .unwrap_or(Err(StoreError::Interrupted(
                "the attempt-start group ended before answering",
            )))
    }

    /// `Store::post`, in the next group.
    pub(crate) async fn post(&self, job: &JobRef, attempt: u32) -> Result<Posted, PostError> {
        self.posts
            .call((job.clone(), attempt))
            .await
            .unwrap_or(Err(PostError::Store(StoreError::Interrupted(
                "the posting group ended before answering",
            ))))
    }
}
