//! Providers' APIs, for events whose webhook only names the money: each source's client (typed
//! errors, timeouts, a request budget the fleet shares) and the resolution of an event to the
//! movements it names. Today: Stripe.

mod budget;
pub(crate) mod resolve;
pub mod stripe;

use std::collections::HashMap;
use std::sync::Arc;

use ledger::SourceName;

pub use budget::Budget;
pub use stripe::{ApiKey, ApiSetupError, STRIPE_VERSION, StripeApi, StripeApiSettings};

/// The provider APIs this worker can call, by source.
#[derive(Clone, Debug, Default)]
pub struct ProviderApis {
    stripe: HashMap<SourceName, Arc<StripeApi>>,
}

impl ProviderApis {
    /// Builds a client for each Stripe source.
    pub fn new(stripe: Vec<StripeApiSettings>) -> Result<Self, ApiSetupError> {
        let mut apis = HashMap::with_capacity(stripe.len());
        for settings in stripe {
            apis.insert(settings.source.clone(), Arc::new(StripeApi::new(settings)?));
        }
        Ok(Self { stripe: apis })
    }

    pub fn is_empty(&self) -> bool {
        self.stripe.is_empty()
    }

    pub(crate) fn stripe(&self, source: &SourceName) -> Option<&StripeApi> {
        self.stripe.get(source).map(Arc::as_ref)
    }

    /// Every budget, so the fleet's size can be applied to all of them.
    pub(crate) fn budgets(&self) -> impl Iterator<Item = &Budget> {
        self.stripe.values().map(|api| api.budget())
    }
}
