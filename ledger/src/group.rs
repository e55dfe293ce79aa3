//! Group commit, the mechanism: callers hand a request to a [`Grouper`] and wait; its loop takes
//! every request waiting at that moment (up to `group_size_max`) and runs them as one call, so N
//! concurrent callers cost one commit instead of N. Nothing waits to fill a group: a lone request
//! runs at once, and under load a group is whatever arrived while the groups before it were
//! committing. At most `groups_max` groups run at once.
//!
//! The ingress groups the recording of single-event deliveries; the workers group attempt starts
//! and postings. Each group's function answers every request as if it had run alone.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

/// One request waiting for its group, with where its answer goes.
type Waiting<Req, Resp> = (Req, oneshot::Sender<Resp>);

/// A queue in front of one loop that runs requests in groups.
#[derive(Debug)]
pub struct Grouper<Req, Resp> {
    queue: mpsc::Sender<Waiting<Req, Resp>>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Grouper<Req, Resp> {
    /// Spawns the loop (on the current tokio runtime); it ends when the grouper is dropped.
    /// `run` answers a group's requests in order, one answer each.
    pub fn spawn<F, Fut>(group_size_max: usize, groups_max: usize, run: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<Resp>> + Send + 'static,
    {
        let group_size_max = group_size_max.max(1);
        let (queue, waiting) = mpsc::channel(group_size_max * groups_max.max(1) * 2);
        tokio::spawn(serve(waiting, group_size_max, groups_max.max(1), run));
        Self { queue }
    }

    /// Runs `request` in the next group; `None` if its group ended without answering (the loop
    /// is gone, the group panicked, or it was answered short): nothing is known of its outcome.
    pub async fn call(&self, request: Req) -> Option<Resp> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((request, reply)).await.ok()?;
        answer.await.ok()
    }
}

async fn serve<Req, Resp, F, Fut>(
    mut waiting: mpsc::Receiver<Waiting<Req, Resp>>,
    group_size_max: usize,
    groups_max: usize,
    run: F,
) where
    Req: Send + 'static,
    Resp: Send + 'static,
    F: Fn(Vec<Req>) -> Fut,
    Fut: Future<Output = Vec<Resp>> + Send + 'static,
{
    let running = Arc::new(Semaphore::new(groups_max));
    loop {
        // A free slot first, then whatever waits: while every slot is busy, requests gather.
        let Ok(slot) = running.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = waiting.recv().await else {
            return;
        };
        let mut group = Vec::with_capacity(group_size_max);
        group.push(first);
        while group.len() < group_size_max {
            match waiting.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let (requests, replies): (Vec<Req>, Vec<_>) = group.into_iter().unzip();
        let group = tokio::spawn(run(requests));
        tokio::spawn(async move {
            let answers = group.await;
            // Answered before the slot is free: the next group gathers from a queue its
            // callers' next requests can join, not from stragglers alone.
            answer(replies, answers);
            drop(slot);
        });
    }
}

/// Answers are matched to callers by position: a group answered short is answered to nobody
/// (each caller sees `None`), never to the wrong caller. A panic loses only its group's answers.
fn answer<Resp>(
    replies: Vec<oneshot::Sender<Resp>>,
    answers: Result<Vec<Resp>, tokio::task::JoinError>,
) {
    let answers = match answers {
        Ok(answers) if answers.len() == replies.len() => answers,
        Ok(answers) => {
            tracing::error!(
                answers = answers.len(),
                requests = replies.len(),
                "a group was answered short; none of its requests is answered"
            );
            return;
        }
        Err(error) => {
            tracing::error!(%error, "a group panicked; none of its requests is answered");
            return;
        }
    };
    for (reply, answer) in replies.into_iter().zip(answers) {
        let _ = reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Runs 20 concurrent calls through a grouper of groups of at most 8, each group taking
    /// 20 ms; returns how many groups ran and the most that ran at once.
    async fn twenty_calls(groups_max: usize) -> (usize, usize) {
        let groups = Arc::new(AtomicUsize::new(0));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (g, r, m) = (groups.clone(), running.clone(), most.clone());
        let grouper = Arc::new(Grouper::spawn(8, groups_max, move |group: Vec<u32>| {
            g.fetch_add(1, Ordering::SeqCst);
            let (r, m) = (r.clone(), m.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                group.into_iter().map(|n| n * 10).collect::<Vec<_>>()
            }
        }));
        let answers = futures::future::join_all((0..20u32).map(|n| {
            let grouper = grouper.clone();
            async move { (n, grouper.call(n).await) }
        }))
        .await;
        for (n, answer) in answers {
            assert_eq!(answer, Some(n * 10), "each caller gets its own answer");
        }
        (groups.load(Ordering::SeqCst), most.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn concurrent_requests_share_groups_and_each_gets_its_own_answer() {
        let (groups, most) = twenty_calls(1).await;
        assert!(
            (3..20).contains(&groups),
            "20 requests ran in {groups} groups of at most 8"
        );
        assert_eq!(most, 1, "one group at a time");
    }

    #[tokio::test]
    async fn no_more_than_groups_max_groups_run_at_once() {
        let (groups, most) = twenty_calls(2).await;
        assert!(
            groups >= 3,
            "20 requests ran in {groups} groups of at most 8"
        );
        assert_eq!(most, 2, "two groups ran at once, and never more");
    }

    #[tokio::test]
    async fn a_lone_request_runs_at_once_and_a_short_answer_is_no_answer() {
        let grouper = Grouper::spawn(8, 1, |group: Vec<u32>| async move {
            group.into_iter().filter(|n| *n != 7).collect::<Vec<_>>()
        });
        assert_eq!(grouper.call(3).await, Some(3));
        assert_eq!(grouper.call(7).await, None);
    }

    #[tokio::test]
    async fn a_panicking_group_answers_nobody_and_the_loop_goes_on() {
        let grouper = Grouper::spawn(8, 1, |group: Vec<u32>| async move {
            assert!(!group.contains(&7), "seven");
            group
        });
        assert_eq!(grouper.call(7).await, None);
        assert_eq!(grouper.call(3).await, Some(3));
    }
}
