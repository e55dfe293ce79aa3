//! The retry policy: permanent errors dead-letter at once; transient ones retry with
//! exponential backoff and jitter until `attempts_max` attempts have run.

use ledger::PostError;
use ledger::job::{ErrorClass, FailureDecision, out_of_attempts};

#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub attempts_max: u32,
    pub base_ms: u64,
    pub max_ms: u64,
}

impl RetryPolicy {
    /// What to do after attempt number `attempt` failed with `error`.
    pub fn decide(&self, attempt: u32, error: &PostError) -> FailureDecision {
        if !error.is_transient() {
            FailureDecision::DeadLetter(ErrorClass::Permanent)
        } else if out_of_attempts(attempt, self.attempts_max) {
            FailureDecision::DeadLetter(ErrorClass::Exhausted)
        } else {
            // Never sooner than the cause asked (a provider's Retry-After).
            let delay_ms = self
                .delay_ms(attempt)
                .max(error.retry_after_ms().unwrap_or(0));
            FailureDecision::RetryAfterMs(delay_ms)
        }
    }

    /// The wait after `attempt` attempts: half of `base × 2^(attempt-1)` (capped), plus a random
    /// share of the other half. The jitter spreads retries apart; the fixed half keeps each gap
    /// at least as long as the longest possible previous one.
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let ceiling = self.ceiling_ms(attempt);
        let fixed = ceiling / 2;
        fixed + rand::random_range(0..=ceiling - fixed)
    }

    /// `base × 2^(attempt-1)`, capped at `max_ms`.
    pub fn ceiling_ms(&self, attempt: u32) -> u64 {
        let doublings = attempt.saturating_sub(1).min(40);
        self.base_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        attempts_max: 4,
        base_ms: 100,
        max_ms: 500,
    };

    fn transient() -> PostError {
        PostError::DependencyNotReady {
            payout_id: "po".into(),
        }
    }

    fn check(attempt: u32, error: PostError, expected: FailureDecision) {
        let got = POLICY.decide(attempt, &error);
        match (got, expected) {
            (FailureDecision::RetryAfterMs(ms), FailureDecision::RetryAfterMs(ceiling)) => {
                assert!(
                    (ceiling / 2..=ceiling).contains(&ms),
                    "attempt {attempt}: {ms} ms"
                );
            }
            (got, expected) => assert_eq!(got, expected, "attempt {attempt}"),
        }
    }

    #[test]
    fn transient_errors_retry_until_attempts_run_out() {
        check(1, transient(), FailureDecision::RetryAfterMs(100));
        check(2, transient(), FailureDecision::RetryAfterMs(200));
        check(3, transient(), FailureDecision::RetryAfterMs(400));
        check(
            4,
            transient(),
            FailureDecision::DeadLetter(ErrorClass::Exhausted),
        );
        check(
            9,
            transient(),
            FailureDecision::DeadLetter(ErrorClass::Exhausted),
        );
    }

    #[test]
    fn permanent_errors_dead_letter_at_once() {
        check(
            1,
            PostError::InvalidFacts("x".into()),
            FailureDecision::DeadLetter(ErrorClass::Permanent),
        );
        check(
            1,
            PostError::SourceReplayConflict {
                source_key: "k".into(),
            },
            FailureDecision::DeadLetter(ErrorClass::Permanent),
        );
        check(
            1,
            PostError::Unbalanced("k".into()),
            FailureDecision::DeadLetter(ErrorClass::Permanent),
        );
    }

    #[test]
    fn gaps_never_shrink_and_are_capped() {
        let mut previous_max = 0;
        for attempt in 1..=10 {
            let ceiling = POLICY.ceiling_ms(attempt);
            assert!(ceiling / 2 >= previous_max / 2, "attempt {attempt}");
            assert!(ceiling <= POLICY.max_ms);
            for _ in 0..50 {
                let delay = POLICY.delay_ms(attempt);
                assert!((ceiling / 2..=ceiling).contains(&delay));
            }
            previous_max = ceiling;
        }
        assert_eq!(POLICY.ceiling_ms(u32::MAX), 500);
    }
}
