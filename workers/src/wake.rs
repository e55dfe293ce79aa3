//! When a worker looks for jobs: at once on a NOTIFY for an inserted job (apalis' pubsub), and
//! at least every `poll_interval_ms` besides, because rows made due by an UPDATE (a retry's
//! `run_at`, a rescue) raise no NOTIFY.

use std::task::{Context, Poll};
use std::time::Duration;

use apalis_core::backend::ext::poll_strategy::{PollSnapshot, PollStrategy};
use apalis_postgres::Pubsub;
use futures::StreamExt;
use tokio::time::{Interval, MissedTickBehavior};

pub(crate) struct NotifyOrTick {
    pubsub: Pubsub,
    tick: Interval,
    period: Duration,
}

impl NotifyOrTick {
    pub(crate) fn new(pubsub: Pubsub, period: Duration) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            pubsub,
            tick,
            period,
        }
    }
}

impl std::fmt::Debug for NotifyOrTick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyOrTick")
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

impl Clone for NotifyOrTick {
    fn clone(&self) -> Self {
        // A clone of a Pubsub opens its own listener.
        Self::new(self.pubsub.clone(), self.period)
    }
}

impl PollStrategy for NotifyOrTick {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        let notified = match self.pubsub.poll_next_unpin(cx) {
            Poll::Ready(Some(_)) => true,
            Poll::Ready(None) => {
                // The listener's connection is gone: listen again; the tick covers the gap.
                self.pubsub = self.pubsub.clone();
                false
            }
            Poll::Pending => false,
        };
        let ticked = self.tick.poll_tick(cx).is_ready();
        if notified || ticked {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }
}
