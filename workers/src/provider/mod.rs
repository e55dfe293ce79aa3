//! Providers' APIs, for events whose webhook only names the money: each source's client (typed
//! errors, timeouts, a request budget the fleet shares) and the resolution of an event to the
//! movements it names: Stripe's API, and Adyen's settlement details reports.

pub mod adyen;
mod budget;
pub(crate) mod report;
pub(crate) mod resolve;
pub mod stripe;

use std::collections::HashMap;
use std::sync::Arc;

use ledger::SourceName;

pub use adyen::{ADYEN_REPORT_HOSTS, AdyenReportSettings, AdyenReports, ReportAuth, ReportHost};
pub use budget::Budget;
pub use stripe::{ApiKey, ApiSetupError, STRIPE_VERSION, StripeApi, StripeApiSettings};

/// The provider APIs this worker can call, by source.
#[derive(Clone, Debug, Default)]
pub struct ProviderApis {
    stripe: HashMap<SourceName, Arc<StripeApi>>,
    adyen_reports: HashMap<SourceName, Arc<AdyenReports>>,
}

impl ProviderApis {
    /// Builds a client for each Stripe source and each Adyen source's report downloads.
    pub fn new(
        stripe: Vec<StripeApiSettings>,
        adyen_reports: Vec<AdyenReportSettings>,
    ) -> Result<Self, ApiSetupError> {
        let mut apis = HashMap::with_capacity(stripe.len());
        for settings in stripe {
            apis.insert(settings.source.clone(), Arc::new(StripeApi::new(settings)?));
        }
        let mut reports = HashMap::with_capacity(adyen_reports.len());
        for settings in adyen_reports {
            let source = settings.source.clone();
            let client = AdyenReports::new(settings).map_err(|error| ApiSetupError::Client {
                source_name: source.clone(),
                error,
            })?;
            reports.insert(source, Arc::new(client));
        }
        Ok(Self {
            stripe: apis,
            adyen_reports: reports,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.stripe.is_empty() && self.adyen_reports.is_empty()
    }

    pub(crate) fn adyen_reports(&self, source: &SourceName) -> Option<&AdyenReports> {
        self.adyen_reports.get(source).map(Arc::as_ref)
    }

    pub(crate) fn stripe(&self, source: &SourceName) -> Option<&StripeApi> {
        self.stripe.get(source).map(Arc::as_ref)
    }

    /// Every budget, so the fleet's size can be applied to all of them.
    pub(crate) fn budgets(&self) -> impl Iterator<Item = &Budget> {
        self.stripe.values().map(|api| api.budget())
    }
}
