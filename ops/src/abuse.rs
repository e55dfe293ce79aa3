//! Failed authentication, limited per client address: every wrong API token or dashboard login
//! token spends one of the address' allowance (governor's keyed GCRA limiter: `per_minute` a
//! minute, in a burst of as many); once it is spent, every wrong attempt from that address is
//! answered 429 with `Retry-After` until the allowance recovers. A request that presents no
//! token spends nothing, and a valid token always passes: operators behind one address (a
//! tunnel, a proxy) are not locked out by whoever else is there. Failures are logged at warn
//! (the address and where, never what was presented) and counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tracing::warn;

/// Addresses remembered at most (locked ones and the limiter's state): beyond it, expired ones
/// are forgotten first.
const ADDRESSES_MAX: usize = 100_000;

#[derive(Debug)]
pub struct AuthGuard {
    failures: DefaultKeyedRateLimiter<IpAddr>,
    locked: Mutex<HashMap<IpAddr, Instant>>,
}

/// An address that spent its allowance: how long until it may try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after: Duration,
}

impl Throttled {
    /// Whole seconds for `Retry-After` (at least one).
    pub fn retry_after_secs(self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

impl AuthGuard {
    pub fn new(per_minute: u32) -> Self {
        let per_minute = NonZeroU32::new(per_minute.max(1)).unwrap_or(NonZeroU32::MIN);
        Self {
            failures: RateLimiter::keyed(Quota::per_minute(per_minute)),
            locked: Mutex::default(),
        }
    }

    /// After what `client` presented proved wrong, before counting it: refused while the
    /// address is throttled.
    pub fn admit(&self, client: IpAddr, surface: &'static str) -> Result<(), Throttled> {
        let now = Instant::now();
        let until = self
            .locked
            .lock()
            .ok()
            .and_then(|locked| locked.get(&client).copied());
        match until {
            Some(until) if until > now => {
                metrics::counter!("settle_auth_throttled_total", "surface" => surface).increment(1);
                Err(Throttled {
                    retry_after: until - now,
                })
            }
            _ => Ok(()),
        }
    }

    /// After `client` presented something wrong: logged, counted, and throttled once its
    /// allowance is spent (then the answer is 429, not 401).
    pub fn failed(&self, client: IpAddr, surface: &'static str) -> Result<(), Throttled> {
        metrics::counter!("settle_auth_failures_total", "surface" => surface).increment(1);
        warn!(client = %client, surface, "authentication failed");
        let Err(not_until) = self.failures.check_key(&client) else {
            return Ok(());
        };
        let retry_after = not_until.wait_time_from(DefaultClock::default().now());
        let now = Instant::now();
        if let Ok(mut locked) = self.locked.lock() {
            if locked.len() >= ADDRESSES_MAX {
                locked.retain(|_, until| *until > now);
                self.failures.retain_recent();
            }
            if locked.len() < ADDRESSES_MAX {
                locked.insert(client, now + retry_after);
            }
        }
        warn!(client = %client, surface, retry_after_secs = retry_after.as_secs(), "authentication throttled");
        metrics::counter!("settle_auth_throttled_total", "surface" => surface).increment(1);
        Err(Throttled { retry_after })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_throttled_after_its_allowance_and_others_are_not() {
        let guard = AuthGuard::new(3);
        let attacker: IpAddr = "203.0.113.9".parse().expect("ip");
        let neighbour: IpAddr = "203.0.113.10".parse().expect("ip");
        for _ in 0..3 {
            assert!(guard.admit(attacker, "api").is_ok());
            assert!(
                guard.failed(attacker, "api").is_ok(),
                "within the allowance"
            );
        }
        let throttled = guard.failed(attacker, "api").expect_err("allowance spent");
        assert!(throttled.retry_after_secs() >= 1);
        assert!(
            guard.admit(attacker, "api").is_err(),
            "even a right token waits"
        );
        assert!(guard.admit(neighbour, "api").is_ok());
    }
}
