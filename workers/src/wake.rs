//! When a worker looks for jobs: at once when a job is inserted (PostgreSQL: a NOTIFY through
//! apalis' pubsub; SQLite: the store's in-process signal after its commit), and at least every
//! `poll_interval_ms` besides, because rows made due by an UPDATE (a retry's `run_at`, a rescue)
//! or written by another process raise neither.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use apalis_core::backend::ext::poll_strategy::{PollSnapshot, PollStrategy};
use apalis_postgres::Pubsub;
use futures::StreamExt;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Interval, MissedTickBehavior};

pub(crate) struct NotifyOrTick {
    signal: Signal,
    tick: Interval,
    period: Duration,
}

/// What says a job was inserted.
enum Signal {
    Pubsub(Pubsub),
    Local {
        notify: Arc<Notify>,
        waiting: Pin<Box<OwnedNotified>>,
    },
}

impl Signal {
    fn local(notify: Arc<Notify>) -> Self {
        let waiting = Box::pin(notify.clone().notified_owned());
        Signal::Local { notify, waiting }
    }

    fn renewed(&self) -> Self {
        match self {
            // A clone of a Pubsub opens its own listener.
            Signal::Pubsub(pubsub) => Signal::Pubsub(pubsub.clone()),
            Signal::Local { notify, .. } => Signal::local(notify.clone()),
        }
    }

    /// Whether a job was inserted since the last call; registers the waker otherwise.
    fn poll_signalled(&mut self, cx: &mut Context<'_>) -> bool {
        match self {
            Signal::Pubsub(pubsub) => match pubsub.poll_next_unpin(cx) {
                Poll::Ready(Some(_)) => true,
                Poll::Ready(None) => {
                    // The listener's connection is gone: listen again; the tick covers the gap.
                    *self = self.renewed();
                    false
                }
                Poll::Pending => false,
            },
            Signal::Local { notify, waiting } => match waiting.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    *waiting = Box::pin(notify.clone().notified_owned());
                    true
                }
                Poll::Pending => false,
            },
        }
    }
}

impl NotifyOrTick {
    pub(crate) fn pubsub(pubsub: Pubsub, period: Duration) -> Self {
        Self::new(Signal::Pubsub(pubsub), period)
    }

    pub(crate) fn local(notify: Arc<Notify>, period: Duration) -> Self {
        Self::new(Signal::local(notify), period)
    }

    fn new(signal: Signal, period: Duration) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            signal,
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
        Self::new(self.signal.renewed(), self.period)
    }
}

impl PollStrategy for NotifyOrTick {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        let notified = self.signal.poll_signalled(cx);
        let ticked = self.tick.poll_tick(cx).is_ready();
        if notified || ticked {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }
}
