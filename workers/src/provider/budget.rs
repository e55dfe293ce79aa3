//! A source's request budget, shared by the fleet: each worker process takes an equal share of
//! the requests per second the source allows, by the number of worker processes alive (read from
//! the queue's heartbeats), so the fleet as a whole stays within it. Requests wait for their turn
//! (governor's GCRA limiter); the wait is measured.

use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// One source's budget in this process.
#[derive(Debug)]
pub struct Budget {
    source: String,
    /// Requests per second the whole fleet may send to this source.
    fleet_per_sec: u32,
    limiter: RwLock<Share>,
}

#[derive(Debug)]
struct Share {
    per_sec: u32,
    limiter: Arc<DefaultDirectRateLimiter>,
}

impl Budget {
    pub fn new(source: &str, fleet_per_sec: u32) -> Self {
        let fleet_per_sec = fleet_per_sec.max(1);
        Self {
            source: source.to_owned(),
            fleet_per_sec,
            limiter: RwLock::new(Share::of(fleet_per_sec)),
        }
    }

    /// This process' share when `workers` processes are alive (at least one request per
    /// second each).
    pub fn share_for(&self, workers: u32) -> u32 {
        (self.fleet_per_sec / workers.max(1)).max(1)
    }

    /// Applies the fleet's current size.
    pub fn set_workers(&self, workers: u32) {
        let per_sec = self.share_for(workers);
        let Ok(mut share) = self.limiter.write() else {
            return;
        };
        if share.per_sec != per_sec {
            *share = Share::of(per_sec);
        }
        metrics::gauge!("settle_provider_budget_per_second", "source" => self.source.clone())
            .set(f64::from(per_sec));
    }

    /// This process' share now.
    pub fn per_sec(&self) -> u32 {
        self.limiter.read().map_or(1, |share| share.per_sec)
    }

    /// Waits for the next request's turn; answers how long it waited.
    pub async fn acquire(&self) -> Duration {
        let limiter = match self.limiter.read() {
            Ok(share) => share.limiter.clone(),
            Err(_) => return Duration::ZERO,
        };
        let started = Instant::now();
        limiter.until_ready().await;
        let waited = started.elapsed();
        metrics::histogram!("settle_provider_budget_wait_seconds", "source" => self.source.clone())
            .record(waited.as_secs_f64());
        waited
    }
}

impl Share {
    /// `per_sec` requests a second, in bursts of at most a tenth of a second's worth: a second
    /// never sees much more than its share.
    fn of(per_sec: u32) -> Self {
        let rate = NonZeroU32::new(per_sec.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new((per_sec / 10).max(1)).unwrap_or(NonZeroU32::MIN);
        Self {
            per_sec,
            limiter: Arc::new(RateLimiter::direct(
                Quota::per_second(rate).allow_burst(burst),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_shares_the_budget() {
        let budget = Budget::new("stripe", 100);
        assert_eq!(budget.share_for(1), 100);
        assert_eq!(budget.share_for(4), 25);
        assert_eq!(budget.share_for(0), 100);
        assert_eq!(
            budget.share_for(1000),
            1,
            "never below one request a second"
        );
        budget.set_workers(3);
        assert_eq!(budget.per_sec(), 33);
    }

    #[tokio::test]
    async fn requests_beyond_the_share_wait_for_their_turn() {
        let budget = Budget::new("stripe", 20);
        let started = Instant::now();
        for _ in 0..12 {
            budget.acquire().await;
        }
        // A burst of two, then one every 50 ms: at least half a second for twelve.
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
    }
}
