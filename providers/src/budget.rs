//! A source's request budget, shared by the fleet. Providers limit an account's requests per
//! second as a whole and, often, per endpoint (every retrieval of one kind of object is one
//! endpoint, whatever its id), so a budget has both. Each worker process takes an equal share of
//! them by the number of worker processes alive (read from the queue's heartbeats), so the fleet
//! as a whole stays within them. A request waits for its turn on both (governor's GCRA
//! limiters); the wait is measured.
//!
//! A process spends its share less a request a second ([`spent_milli`]), evenly spaced (no
//! bursts): a provider counts requests as they arrive, in a token bucket or in whole seconds. A
//! process sending one request every `1/r` seconds sends at most `r` in any second; the request
//! a second kept back is the room for one pushed across a second's boundary by network jitter,
//! so that a budget kept to the letter never turns into a 429. A share under ten a second keeps
//! a tenth back instead (at two a second, a whole request would be half of it).
//!
//! The budget also paces the source's jobs in the queue ([`Budget::job_turn`]): a process runs
//! at most the jobs its share serves in [`JOBS_AHEAD`], and puts the others off, spaced at its
//! share, so that a source's backlog waits in the queue rather than in the process' job slots,
//! where it would stop every other source's jobs behind it.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

/// What a process spends of a share of `milli_per_sec` thousandths of a request a second, in
/// the same unit: the share less one request a second, or less a tenth of it under ten a second.
pub fn spent_milli(milli_per_sec: u64) -> u64 {
    milli_per_sec - (milli_per_sec / 10).min(1_000)
}

/// How often a request for history looks again whether a request for now still waits.
const HISTORY_POLL: Duration = Duration::from_millis(5);

/// A process runs at once at most the jobs of a source its share serves in this long (a request
/// each), and never fewer than [`JOBS_IN_FLIGHT_MIN`]: a job running waits about this long at
/// most for its request's turn, and the process' other job slots stay free for other sources.
pub const JOBS_AHEAD: Duration = Duration::from_secs(1);
const JOBS_IN_FLIGHT_MIN: usize = 2;

/// Whose turn comes first when requests of a process wait for the same budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// What is happening now: a webhook's fetch, the feed's own windows, a balance read.
    Now,
    /// A backfill's history: it takes a turn only when no request of the process for now is
    /// waiting.
    History,
}

/// One source's budget in this process.
#[derive(Debug)]
pub struct Budget {
    source: String,
    /// Requests per second the whole fleet may send to this source, in all and per endpoint.
    fleet_per_sec: u32,
    fleet_per_endpoint_per_sec: u32,
    share: RwLock<Share>,
    /// Requests for now waiting for their turn.
    waiting_now: AtomicUsize,
    /// Requests of any priority waiting for their turn.
    waiting: AtomicUsize,
    /// The source's jobs running in this process.
    jobs_in_flight: AtomicUsize,
    /// When the next job put off is due (each one put off moves it on by a job's turn).
    next_put_off: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct Share {
    workers: u32,
    total: Arc<DefaultDirectRateLimiter>,
    endpoints: Mutex<HashMap<&'static str, Arc<DefaultDirectRateLimiter>>>,
}

impl Budget {
    pub fn new(source: &str, fleet_per_sec: u32, fleet_per_endpoint_per_sec: u32) -> Self {
        let budget = Self {
            source: source.to_owned(),
            fleet_per_sec: fleet_per_sec.max(1),
            fleet_per_endpoint_per_sec: fleet_per_endpoint_per_sec.max(1),
            share: RwLock::new(Share::empty(1, 1_000)),
            waiting_now: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            jobs_in_flight: AtomicUsize::new(0),
            next_put_off: Mutex::new(None),
        };
        if let Ok(mut share) = budget.share.write() {
            *share = Share::empty(1, Self::share_of(budget.fleet_per_sec, 1));
        }
        budget
    }

    /// This process' share of `fleet_per_sec` when `workers` processes are alive, in
    /// thousandths of a request per second.
    fn share_of(fleet_per_sec: u32, workers: u32) -> u64 {
        u64::from(fleet_per_sec) * 1_000 / u64::from(workers.max(1))
    }

    /// How many requests of this process wait for their turn now: none or one when the budget
    /// is not all spent (every request in flight is being answered), more while it is.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Requests per second the whole fleet may send to this source, in all.
    pub fn fleet_per_sec(&self) -> u32 {
        self.fleet_per_sec
    }

    /// This process' share of the whole budget, and of each endpoint's, in requests per second
    /// (what it may send; it spends [`spent_milli`] of each).
    pub fn per_sec(&self) -> (Decimal, Decimal) {
        let workers = self.share.read().map_or(1, |s| s.workers);
        let rate =
            |milli: u64| Decimal::new(i64::try_from(milli).unwrap_or(i64::MAX), 3).normalize();
        (
            rate(Self::share_of(self.fleet_per_sec, workers)),
            rate(Self::share_of(self.fleet_per_endpoint_per_sec, workers)),
        )
    }

    /// Applies the fleet's current size.
    pub fn set_workers(&self, workers: u32) {
        let workers = workers.max(1);
        let Ok(mut share) = self.share.write() else {
            return;
        };
        if share.workers != workers {
            *share = Share::empty(workers, Self::share_of(self.fleet_per_sec, workers));
        }
        drop(share);
        let (total, endpoint) = self.per_sec();
        metrics::gauge!("settle_provider_budget_per_second", "source" => self.source.clone(), "scope" => "total")
            .set(total.to_f64().unwrap_or_default());
        metrics::gauge!("settle_provider_budget_per_second", "source" => self.source.clone(), "scope" => "endpoint")
            .set(endpoint.to_f64().unwrap_or_default());
    }

    /// The limiters a request to `endpoint` passes: this process' share of the whole budget and
    /// of the endpoint's.
    fn limiters(
        &self,
        endpoint: &'static str,
    ) -> Option<(Arc<DefaultDirectRateLimiter>, Arc<DefaultDirectRateLimiter>)> {
        let share = self.share.read().ok()?;
        let per_sec = Self::share_of(self.fleet_per_endpoint_per_sec, share.workers);
        let per_endpoint = share
            .endpoints
            .lock()
            .ok()?
            .entry(endpoint)
            .or_insert_with(|| limiter(per_sec))
            .clone();
        Some((share.total.clone(), per_endpoint))
    }

    /// Waits for the next request's turn at `endpoint`; answers how long it waited.
    pub async fn acquire(&self, endpoint: &'static str) -> Duration {
        self.acquire_as(endpoint, Priority::Now).await
    }

    /// Waits for the next turn at `endpoint` of a request of `priority`: a request for history
    /// lets every request for now of this process that is waiting go first.
    ///
    /// Only the limiters of the share in force grant a turn: a request that waited on the
    /// limiters of a share replaced meanwhile (the fleet changed size) waits again on the new
    /// ones, so that the old share's waiters and the new share's never send side by side.
    pub async fn acquire_as(&self, endpoint: &'static str, priority: Priority) -> Duration {
        let started = Instant::now();
        let _waiting = matches!(priority, Priority::Now).then(|| Waiting::on(&self.waiting_now));
        let _in_line = Waiting::on(&self.waiting);
        loop {
            let Some((total, per_endpoint)) = self.limiters(endpoint) else {
                return Duration::ZERO;
            };
            match priority {
                Priority::Now => {
                    per_endpoint.until_ready().await;
                    total.until_ready().await;
                }
                Priority::History => loop {
                    // While a request for now waits, look again shortly; else take the
                    // endpoint's next turn, or sleep until it comes (not a poll's length past it).
                    let pause = match self.waiting_now.load(Ordering::Acquire) {
                        0 => match per_endpoint.check() {
                            Ok(()) => {
                                total.until_ready().await;
                                break;
                            }
                            Err(not_until) => not_until.wait_time_from(per_endpoint.clock().now()),
                        },
                        _ => HISTORY_POLL,
                    };
                    tokio::time::sleep(pause.clamp(Duration::from_millis(1), HISTORY_POLL * 20))
                        .await;
                },
            }
            if self.in_force(&total) {
                break;
            }
        }
        let waited = started.elapsed();
        metrics::histogram!("settle_provider_budget_wait_seconds", "source" => self.source.clone())
            .record(waited.as_secs_f64());
        waited
    }
}

/// A job of the source running in this process, counted until dropped.
#[derive(Debug)]
pub struct JobTurn<'a> {
    _running: Waiting<'a>,
}

impl Budget {
    /// A turn for one of the source's jobs to run now, or how long to put it off. A process
    /// runs at once at most the jobs its share serves in [`JOBS_AHEAD`] (a request each); each
    /// job beyond them is put off a turn after the last one put off, and at least
    /// [`JOBS_AHEAD`], so that a backlog comes back at the pace its share serves it.
    pub fn job_turn(&self) -> Result<JobTurn<'_>, Duration> {
        let milli = self.share_milli_per_sec();
        // Jobs its share serves in JOBS_AHEAD: spent milli / 1000 × milliseconds / 1000.
        let ahead =
            spent_milli(milli) * u64::try_from(JOBS_AHEAD.as_millis()).unwrap_or(0) / 1_000_000;
        let cap = usize::try_from(ahead)
            .unwrap_or(usize::MAX)
            .max(JOBS_IN_FLIGHT_MIN);
        let admitted =
            self.jobs_in_flight
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                    (running < cap).then_some(running + 1)
                });
        if admitted.is_ok() {
            return Ok(JobTurn {
                _running: Waiting(&self.jobs_in_flight),
            });
        }
        let now = Instant::now();
        let mut next = self
            .next_put_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let due = next.map_or(now + JOBS_AHEAD, |at| at.max(now + JOBS_AHEAD));
        *next = Some(due + interval(milli));
        Err(due - now)
    }

    /// This process' share of the whole budget, in thousandths of a request per second.
    fn share_milli_per_sec(&self) -> u64 {
        let workers = self.share.read().map_or(1, |s| s.workers);
        Self::share_of(self.fleet_per_sec, workers)
    }
}

/// Counts a waiting request for as long as it waits (a wait given up included).
#[derive(Debug)]
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn on(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Budget {
    /// Whether `total` is the whole-budget limiter of the share in force.
    fn in_force(&self, total: &Arc<DefaultDirectRateLimiter>) -> bool {
        self.share
            .read()
            .is_ok_and(|share| Arc::ptr_eq(&share.total, total))
    }
}

#[cfg(test)]
impl Budget {
    /// A turn now, at both limiters, or none.
    fn try_acquire(&self, endpoint: &'static str) -> bool {
        self.limiters(endpoint)
            .is_some_and(|(total, per_endpoint)| {
                per_endpoint.check().is_ok() && total.check().is_ok()
            })
    }
}

impl Share {
    fn empty(workers: u32, total_milli_per_sec: u64) -> Self {
        Self {
            workers,
            total: limiter(total_milli_per_sec),
            endpoints: Mutex::default(),
        }
    }
}

/// The time between two turns when a share of `milli_per_sec` thousandths of a request a second
/// is spent ([`spent_milli`]).
fn interval(milli_per_sec: u64) -> Duration {
    // 1 s / (spent milli / 1000), in nanoseconds.
    let spent = spent_milli(milli_per_sec).max(1);
    Duration::from_nanos(1_000_000_000_000 / spent)
}

/// What a process spends of `milli_per_sec` thousandths of a request a second, one at a time: each
/// waits a whole interval after the one before.
fn limiter(milli_per_sec: u64) -> Arc<DefaultDirectRateLimiter> {
    let quota = Quota::with_period(interval(milli_per_sec))
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(NonZeroU32::MIN);
    Arc::new(RateLimiter::direct(quota))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_shares_the_budget() {
        let budget = Budget::new("cards", 100, 25);
        let rates = |budget: &Budget| {
            let (total, endpoint) = budget.per_sec();
            (total.to_string(), endpoint.to_string())
        };
        assert_eq!(rates(&budget), ("100".into(), "25".into()));
        budget.set_workers(4);
        assert_eq!(rates(&budget), ("25".into(), "6.25".into()));
        budget.set_workers(0);
        assert_eq!(rates(&budget), ("100".into(), "25".into()));
    }

    #[test]
    fn a_share_is_spent_less_a_request_a_second_or_a_tenth_under_ten() {
        let spent = |milli| spent_milli(milli);
        assert_eq!(spent(100_000), 99_000);
        assert_eq!(spent(25_000), 24_000);
        assert_eq!(spent(10_000), 9_000);
        assert_eq!(spent(6_250), 5_625);
        assert_eq!(spent(1_000), 900);
        assert_eq!(interval(25_000), Duration::from_nanos(41_666_666));
    }

    #[test]
    fn jobs_beyond_what_the_share_serves_soon_are_put_off_at_its_pace() {
        // Alone, 10 a second less one: 9 jobs in a second, then one put off every 111 ms.
        let budget = Budget::new("cards", 10, 10);
        let running: Vec<JobTurn<'_>> = (0..9)
            .map(|n| {
                budget
                    .job_turn()
                    .unwrap_or_else(|_| panic!("job {n} put off"))
            })
            .collect();
        let put_off: Vec<Duration> = (0..3)
            .map(|_| budget.job_turn().expect_err("put off"))
            .collect();
        assert!(
            put_off[0] <= JOBS_AHEAD && put_off[0] > JOBS_AHEAD - Duration::from_millis(50),
            "{put_off:?}"
        );
        for pair in put_off.windows(2) {
            let gap = pair[1].saturating_sub(pair[0]);
            assert!(
                gap > Duration::from_millis(100) && gap < Duration::from_millis(120),
                "{put_off:?}"
            );
        }
        drop(running);
        assert!(
            budget.job_turn().is_ok(),
            "the jobs that ended free their turns"
        );
        // A fleet of four: a quarter of the share, 2.25 a second: 2 jobs at once.
        budget.set_workers(4);
        let running: Vec<JobTurn<'_>> = (0..2).filter_map(|_| budget.job_turn().ok()).collect();
        assert_eq!(running.len(), 2);
        assert!(budget.job_turn().is_err());
    }

    #[tokio::test]
    async fn requests_waiting_when_the_fleet_grows_take_the_new_share() {
        // Alone, 10 a second less one; a second process joins while twenty requests wait.
        let budget = Arc::new(Budget::new("cards", 10, 10));
        let granted = Arc::new(AtomicUsize::new(0));
        let waiting: Vec<_> = (0..20)
            .map(|_| {
                let (budget, granted) = (budget.clone(), granted.clone());
                tokio::spawn(async move {
                    budget.acquire("balance_transaction").await;
                    granted.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        budget.set_workers(2);
        let before = granted.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = granted.load(Ordering::SeqCst);
        // At the new share (4.5 a second) two seconds grant at most ten; the old limiter's
        // waiters going out beside the new one's would have granted about twenty-seven.
        assert!(
            after - before <= 11,
            "{} granted in the two seconds after the fleet grew",
            after - before
        );
        for task in waiting {
            task.abort();
        }
    }

    #[tokio::test]
    async fn requests_beyond_an_endpoints_share_wait_for_their_turn() {
        let budget = Budget::new("cards", 1_000, 20);
        let started = Instant::now();
        for _ in 0..12 {
            budget.acquire("balance_transaction").await;
        }
        // 20 a second less one, one at a time: one every 52.6 ms, so twelve take at least
        // eleven intervals.
        assert!(
            started.elapsed() >= Duration::from_millis(575),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn each_endpoint_has_its_own_share_within_the_whole() {
        let budget = Budget::new("cards", 1_000, 1);
        budget.acquire("balance_transaction").await;
        // The whole budget's next turn comes within a few milliseconds; the endpoint's, in a
        // second.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !budget.try_acquire("balance_transaction"),
            "its one a second is spent"
        );
        assert!(budget.try_acquire("refunds"), "another endpoint's is not");
        let whole = Budget::new("cards", 1, 1_000);
        whole.acquire("balance_transaction").await;
        assert!(
            !whole.try_acquire("refunds"),
            "the whole budget is shared by all endpoints"
        );
    }

    #[tokio::test]
    async fn a_request_for_now_goes_before_a_backfills_that_waited_longer() {
        // 10 a second less one: a turn every 111 ms.
        let budget = Arc::new(Budget::new("cards", 1_000, 10));
        budget.acquire("balance_transactions").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let history = {
            let (budget, order) = (budget.clone(), order.clone());
            tokio::spawn(async move {
                budget
                    .acquire_as("balance_transactions", Priority::History)
                    .await;
                order.lock().expect("order").push("history");
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        let now = {
            let (budget, order) = (budget.clone(), order.clone());
            tokio::spawn(async move {
                budget.acquire("balance_transactions").await;
                order.lock().expect("order").push("now");
            })
        };
        history.await.expect("history");
        now.await.expect("now");
        assert_eq!(*order.lock().expect("order"), ["now", "history"]);
    }
}
