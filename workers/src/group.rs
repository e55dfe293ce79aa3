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

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use jobs::job::{AttemptStart, JobRef, Posted};
use jobs::{PostError, PostingRules, Store, StoreError};
use tokio::sync::{mpsc, oneshot};

/// One request waiting for its group, with where its answer goes.
type Waiting<Req, Resp> = (Req, oneshot::Sender<Resp>);

/// A queue in front of one loop that runs requests in groups.
#[derive(Debug)]
struct Grouper<Req, Resp> {
    queue: mpsc::Sender<Waiting<Req, Resp>>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Grouper<Req, Resp> {
    /// Spawns the loop; it ends when the grouper is dropped.
    fn spawn<F, Fut>(group_size_max: usize, run: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<Resp>> + Send + 'static,
    {
        let (queue, waiting) = mpsc::channel(group_size_max.max(1) * 4);
        tokio::spawn(serve(waiting, group_size_max.max(1), run));
        Self { queue }
    }

    /// Runs `request` in the next group; `None` if the loop is gone.
    async fn call(&self, request: Req) -> Option<Resp> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((request, reply)).await.ok()?;
        answer.await.ok()
    }
}

async fn serve<Req, Resp, F, Fut>(
    mut waiting: mpsc::Receiver<Waiting<Req, Resp>>,
    group_size_max: usize,
    run: F,
) where
    F: Fn(Vec<Req>) -> Fut,
    Fut: Future<Output = Vec<Resp>>,
{
    let mut group = Vec::with_capacity(group_size_max);
    while let Some(first) = waiting.recv().await {
        group.push(first);
        while group.len() < group_size_max {
            match waiting.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let (requests, replies): (Vec<Req>, Vec<_>) = group.drain(..).unzip();
        metrics::histogram!("settle_group_size").record(requests.len() as f64);
        // A panic in one group loses only that group's answers, not the loop.
        let Ok(answers) = AssertUnwindSafe(run(requests)).catch_unwind().await else {
            tracing::error!("a group panicked; its jobs will be fetched again");
            continue;
        };
        // Answers are matched to callers by position: a group answered short is answered to
        // nobody (each caller sees the loop as gone), never to the wrong caller.
        if answers.len() != replies.len() {
            tracing::error!(
                answers = answers.len(),
                jobs = replies.len(),
                "a group was answered short; its jobs will be given back"
            );
            continue;
        }
        for (reply, answer) in replies.into_iter().zip(answers) {
            let _ = reply.send(answer);
        }
    }
}

type Start = (JobRef, String);
type Post = (JobRef, u32);

/// The two groupers of one worker process.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    starts: Grouper<Start, Result<AttemptStart, StoreError>>,
    posts: Grouper<Post, Result<Posted, PostError>>,
}

impl GroupCommit {
    pub(crate) fn spawn(
        store: Store,
        rules: PostingRules,
        attempts_max: u32,
        lock_timeout_ms: u64,
        group_size_max: usize,
    ) -> Self {
        let start_store = store.clone();
        let starts = Grouper::spawn(group_size_max, move |group: Vec<Start>| {
            let store = start_store.clone();
            async move {
                store
                    .start_attempts(&group, attempts_max, lock_timeout_ms)
                    .await
            }
        });
        let posts = Grouper::spawn(group_size_max, move |group: Vec<Post>| {
            let store = store.clone();
            let rules = rules.clone();
            async move { store.post_many(&group, &rules, lock_timeout_ms).await }
        });
        Self { starts, posts }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn concurrent_requests_share_groups_and_each_gets_its_own_answer() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let grouper = Arc::new(Grouper::spawn(8, move |group: Vec<u32>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                group.into_iter().map(|n| n * 10).collect::<Vec<_>>()
            }
        }));
        let answers = futures::future::join_all((0..20u32).map(|n| {
            let grouper = grouper.clone();
            async move { (n, grouper.call(n).await) }
        }))
        .await;
        for (n, answer) in answers {
            assert_eq!(answer, Some(n * 10));
        }
        let groups = calls.load(Ordering::SeqCst);
        assert!(
            (3..20).contains(&groups),
            "20 requests ran in {groups} groups of at most 8"
        );
    }

    #[tokio::test]
    async fn a_lone_request_runs_at_once_and_a_short_answer_is_no_answer() {
        let grouper = Grouper::spawn(8, |group: Vec<u32>| async move {
            group.into_iter().filter(|n| *n != 7).collect::<Vec<_>>()
        });
        assert_eq!(grouper.call(3).await, Some(3));
        assert_eq!(grouper.call(7).await, None);
    }
}
