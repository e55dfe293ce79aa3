//! The memory bodies may hold while they are read, before their signature is checked: one
//! budget for all connections. A delivery reserves its size before its body is read and gives
//! it back when it has been answered; one that does not fit is turned away at once (503), never
//! queued and never buffered.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget's unit: reservations are rounded up to whole KiB.
const UNIT_BYTES: usize = 1024;

#[derive(Clone, Debug)]
pub(crate) struct BodyBudget {
    units: Arc<Semaphore>,
    total_units: usize,
}

impl BodyBudget {
    pub(crate) fn new(bytes: usize) -> Self {
        let total_units = bytes.div_ceil(UNIT_BYTES).max(1);
        Self {
            units: Arc::new(Semaphore::new(total_units)),
            total_units,
        }
    }

    /// Reserves room for a body of `bytes`, or `None` when the budget has no room for it now.
    /// A body larger than the whole budget never fits.
    pub(crate) fn reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let units = bytes.div_ceil(UNIT_BYTES).max(1);
        if units > self.total_units {
            return None;
        }
        let permit = self
            .units
            .clone()
            .try_acquire_many_owned(u32::try_from(units).ok()?)
            .ok();
        if permit.is_none() {
            metrics::counter!("settle_ingress_body_budget_refused_total").increment(1);
        }
        permit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_the_budget_and_come_back() {
        let budget = BodyBudget::new(10 * 1024);
        let a = budget.reserve(6 * 1024).expect("fits");
        assert!(budget.reserve(5 * 1024).is_none(), "over the budget");
        let b = budget.reserve(4 * 1024).expect("fits beside");
        drop(a);
        assert!(budget.reserve(5 * 1024).is_some(), "freed");
        drop(b);
        assert!(budget.reserve(11 * 1024).is_none(), "never fits");
    }
}
