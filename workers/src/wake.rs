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
use tokio::time::{Interval, MissedTickBehavior, Sleep};

pub(crate) struct NotifyOrTick {
    signal: Signal,
    tick: Interval,
    period: Duration,
    /// Armed by a signal: one more look shortly after it (see [`RECHECK_AFTER_SIGNAL`]).
    recheck: Pin<Box<Sleep>>,
    recheck_armed: bool,
}

/// A signal can arrive while a fetch is already running, one whose snapshot predates the
/// insert it announces. apalis takes the wake-up, that fetch comes back empty, and nothing would
/// look again until the next signal or tick. So every signal also arms one more look this much
/// later (re-armed by each signal, so a stream of signals adds at most one fetch at its end).
const RECHECK_AFTER_SIGNAL: Duration = Duration::from_millis(10);

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

    /// Whether a job was inserted since the last call. Takes every signal that is waiting, so
    /// that it returns only after the waker is registered for the next one: a signal taken
    /// without re-registering would leave the worker asleep until the tick.
    fn poll_signalled(&mut self, cx: &mut Context<'_>) -> bool {
        let mut signalled = false;
        let mut renewals = 0;
        loop {
            let ready = match self {
                Signal::Pubsub(pubsub) => match pubsub.poll_next_unpin(cx) {
                    Poll::Ready(Some(Ok(_))) => true,
                    // A listener that failed to connect says so once, then ends (renewed below):
                    // no job came.
                    Poll::Ready(Some(Err(_))) => continue,
                    Poll::Ready(None) if renewals == 0 => {
                        // The listener's connection is gone: listen again (polled at once, so
                        // it connects and registers the waker); the tick covers the gap.
                        renewals += 1;
                        *self = self.renewed();
                        continue;
                    }
                    Poll::Ready(None) | Poll::Pending => false,
                },
                Signal::Local { notify, waiting } => match waiting.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        *waiting = Box::pin(notify.clone().notified_owned());
                        true
                    }
                    Poll::Pending => false,
                },
            };
            if !ready {
                return signalled;
            }
            signalled = true;
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
            recheck: Box::pin(tokio::time::sleep(Duration::ZERO)),
            recheck_armed: false,
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
        if notified {
            self.recheck
                .as_mut()
                .reset(tokio::time::Instant::now() + RECHECK_AFTER_SIGNAL);
            self.recheck_armed = true;
        }
        let rechecked = self.recheck_armed && self.recheck.as_mut().poll(cx).is_ready();
        if rechecked {
            self.recheck_armed = false;
        }
        // A tick taken is polled again at once, so the waker is registered for the next one.
        let mut ticked = false;
        while self.tick.poll_tick(cx).is_ready() {
            ticked = true;
        }
        if notified || rechecked || ticked {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;

    /// Counts how often the worker would have been woken.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Probe {
        strategy: NotifyOrTick,
        wakes: Arc<Wakes>,
        waker: Waker,
    }

    impl Probe {
        /// A strategy whose tick is far away, already past its first (immediate) tick.
        fn new(notify: Arc<Notify>) -> Self {
            let wakes = Arc::new(Wakes::default());
            let waker = Waker::from(wakes.clone());
            let mut probe = Probe {
                strategy: NotifyOrTick::local(notify, Duration::from_secs(3600)),
                wakes,
                waker,
            };
            assert!(probe.drive(), "an interval's first tick is immediate");
            probe
        }

        /// Whether the strategy says "look now".
        fn drive(&mut self) -> bool {
            let mut cx = Context::from_waker(&self.waker);
            self.strategy
                .poll_drive(&mut cx, &PollSnapshot::default())
                .is_ready()
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::SeqCst)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_taken_signal_leaves_the_worker_listening_for_the_next() {
        let notify = Arc::new(Notify::new());
        let mut probe = Probe::new(notify.clone());
        assert!(!probe.drive());
        notify.notify_waiters();
        assert_eq!(probe.wakes(), 1);
        assert!(probe.drive(), "the signal is seen");
        // The next signal must wake the worker without anything else polling it first.
        notify.notify_waiters();
        assert_eq!(probe.wakes(), 2, "the second signal woke nobody");
        assert!(probe.drive());
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_is_looked_at_once_more_shortly_after() {
        let notify = Arc::new(Notify::new());
        let mut probe = Probe::new(notify.clone());
        notify.notify_waiters();
        assert!(probe.drive());
        assert!(!probe.drive(), "nothing new yet");
        let wakes = probe.wakes();
        tokio::time::sleep(RECHECK_AFTER_SIGNAL).await;
        assert_eq!(probe.wakes(), wakes + 1, "the recheck woke the worker");
        assert!(probe.drive(), "one more look after the signal");
        tokio::time::sleep(RECHECK_AFTER_SIGNAL * 10).await;
        assert!(!probe.drive(), "and only one");
        assert_eq!(probe.wakes(), wakes + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_tick_keeps_ticking_without_signals() {
        let notify = Arc::new(Notify::new());
        let mut probe = Probe::new(notify);
        assert!(!probe.drive());
        for n in 1..=3 {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            assert_eq!(probe.wakes(), n, "tick {n} woke the worker");
            assert!(probe.drive());
        }
    }
}
