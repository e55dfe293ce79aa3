//! A source's request budget, shared by the fleet. Providers limit an account's requests per
//! second as a whole and, often, per endpoint (every retrieval of one kind of object is one
//! endpoint, whatever its id), so a budget has both. Each worker process takes an equal share of
//! them by the number of worker processes alive (read from the queue's heartbeats), so the fleet
//! as a whole stays within them. A request waits for its turn on both (governor's GCRA
//! limiters); the wait is measured.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// One source's budget in this process.
#[derive(Debug)]
pub struct Budget {
    source: String,
    /// Requests per second the whole fleet may send to this source, in all and per endpoint.
    fleet_per_sec: u32,
    fleet_per_endpoint_per_sec: u32,
    share: RwLock<Share>,
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
            share: RwLock::new(Share::empty(1, 1)),
        };
        if let Ok(mut share) = budget.share.write() {
            *share = Share::empty(1, budget.fleet_per_sec);
        }
        budget
    }

    /// This process' share of `fleet_per_sec` when `workers` processes are alive (at least one
    /// request per second).
    fn share_of(fleet_per_sec: u32, workers: u32) -> u32 {
        (fleet_per_sec / workers.max(1)).max(1)
    }

    /// This process' share of the whole budget, and of each endpoint's.
    pub fn per_sec(&self) -> (u32, u32) {
        let workers = self.share.read().map_or(1, |s| s.workers);
        (
            Self::share_of(self.fleet_per_sec, workers),
            Self::share_of(self.fleet_per_endpoint_per_sec, workers),
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
        let (total, endpoint) = (
            Self::share_of(self.fleet_per_sec, workers),
            Self::share_of(self.fleet_per_endpoint_per_sec, workers),
        );
        metrics::gauge!("settle_provider_budget_per_second", "source" => self.source.clone(), "scope" => "total")
            .set(f64::from(total));
        metrics::gauge!("settle_provider_budget_per_second", "source" => self.source.clone(), "scope" => "endpoint")
            .set(f64::from(endpoint));
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
        let Some((total, per_endpoint)) = self.limiters(endpoint) else {
            return Duration::ZERO;
        };
        let started = Instant::now();
        per_endpoint.until_ready().await;
        total.until_ready().await;
        let waited = started.elapsed();
        metrics::histogram!("settle_provider_budget_wait_seconds", "source" => self.source.clone())
            .record(waited.as_secs_f64());
        waited
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
    fn empty(workers: u32, total_per_sec: u32) -> Self {
        Self {
            workers,
            total: limiter(total_per_sec),
            endpoints: Mutex::default(),
        }
    }
}

/// `per_sec` requests a second, in bursts of at most a tenth of a second's worth: a second
/// never sees much more than its share.
fn limiter(per_sec: u32) -> Arc<DefaultDirectRateLimiter> {
    let rate = NonZeroU32::new(per_sec.max(1)).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new((per_sec / 10).max(1)).unwrap_or(NonZeroU32::MIN);
    Arc::new(RateLimiter::direct(
        Quota::per_second(rate).allow_burst(burst),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_shares_the_budget() {
        let budget = Budget::new("cards", 100, 25);
        assert_eq!(budget.per_sec(), (100, 25));
        budget.set_workers(4);
        assert_eq!(budget.per_sec(), (25, 6));
        budget.set_workers(1000);
        assert_eq!(budget.per_sec(), (1, 1), "never below one request a second");
        budget.set_workers(0);
        assert_eq!(budget.per_sec(), (100, 25));
    }

    #[tokio::test]
    async fn requests_beyond_an_endpoints_share_wait_for_their_turn() {
        let budget = Budget::new("cards", 1_000, 20);
        let started = Instant::now();
        for _ in 0..12 {
            budget.acquire("balance_transaction").await;
        }
        // A burst of two, then one every 50 ms: at least half a second for twelve.
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn each_endpoint_has_its_own_share_within_the_whole() {
        let budget = Budget::new("cards", 1_000, 1);
        budget.acquire("balance_transaction").await;
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
}
