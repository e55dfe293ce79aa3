//! `provider = "adyen"`. Notifications carry the shopper's amount, no fees, no settlement
//! currency and no payout; the settlement details report of each batch carries the money. A
//! source books from one of the two (`config::MoneyFrom`): notifications post what they carry
//! (`receive`), or a `REPORT_AVAILABLE` names a report (`trigger`) that the job downloads
//! (`download`) and posts line by line (`report`: the one table from record type to entry;
//! `resolve`), with each `CAPTURE` booked as a receivable that the report's line clears.

mod chart;
mod config;
mod demo;
mod download;
pub mod fake;
mod form;
mod fuzzing;
mod receive;
pub mod report;
mod resolve;
mod sequence;
pub mod sign;
mod trigger;

use std::sync::Arc;

use futures::future::BoxFuture;
use ledger::minor_units::Exponents;

pub use config::{GROSS_ONLY, MoneyFrom, REPORT_HOSTS};
pub use download::{AdyenReports, ReportAuth, ReportHost, ReportSettings};
pub use resolve::CHUNK_ENTRIES;
pub use trigger::{AdyenReportTrigger, AdyenSaleTrigger, AdyenTrigger};

use crate::config::{Key, Section, SectionError};
use crate::demo::{DemoError, DemoPart};
use crate::seam::{FuzzTarget, Provider, Receive, Resolve, Sample};

/// Adyen's exponent table (docs.adyen.com, "Currency codes"): its own zero- and three-decimal
/// lists (IDR and CVE are zero-decimal at Adyen; CLP and ISK are two-decimal). Everything else
/// has two decimals.
pub const EXPONENTS: Exponents = Exponents {
    zero: &[
        "CVE", "DJF", "GNF", "IDR", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV", "XAF",
        "XOF", "XPF",
    ],
    three: &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"],
};

/// The `adyen` provider.
#[derive(Debug)]
pub struct Adyen;

pub(crate) static PROVIDER: Adyen = Adyen;

impl Provider for Adyen {
    fn name(&self) -> &'static str {
        "adyen"
    }

    fn keys(&self) -> &'static [Key] {
        config::KEYS
    }

    fn trigger_tags(&self) -> &'static [&'static str] {
        &[trigger::REPORT_TAG, trigger::SALE_TAG]
    }

    fn receiver(&self, section: &Section<'_>) -> Result<Arc<dyn Receive>, SectionError> {
        let money_from = config::money_from(section)?;
        Ok(Arc::new(receive::Receiver {
            name: section.source.clone(),
            keys: crate::signature::signing_keys(section, self.name(), receive::signing_key)?,
            money_from,
            merchant_accounts: config::merchant_accounts(section)?,
        }))
    }

    /// A source booking from notifications holds gross amounts only: said at start, by
    /// `settle config check` and on the dashboard.
    fn notes(&self, section: &Section<'_>) -> Result<Vec<String>, SectionError> {
        Ok(match config::money_from(section)? {
            MoneyFrom::Notifications => vec![config::GROSS_ONLY.to_owned()],
            MoneyFrom::Reports => Vec::new(),
        })
    }

    /// Only a source booking from reports records triggers (its reports and its sales).
    fn resolver(&self, section: &Section<'_>) -> Result<Option<Arc<dyn Resolve>>, SectionError> {
        if config::money_from(section)? != MoneyFrom::Reports {
            return Ok(None);
        }
        let reports = match config::reports(section)? {
            Some(settings) => Some(AdyenReports::new(settings).map_err(|error| {
                SectionError::source(format!("cannot build the HTTP client: {error}"))
            })?),
            None => None,
        };
        Ok(Some(Arc::new(resolve::Resolver {
            source: section.source.clone(),
            reports,
            merchant_accounts: config::merchant_accounts(section)?,
            every: config::feed_every(section)?,
        })))
    }

    /// A `CAPTURE` of `minor` cents in EUR, its PSP reference [`sign::reference`] of `id`.
    fn sample(&self, secret: &str, id: &str, minor: i64, _conflicting: bool) -> Sample {
        let item = sign::item("CAPTURE", &sign::reference(id), minor, "EUR", "true");
        Sample {
            headers: Vec::new(),
            body: sign::notification(secret, &[item]),
        }
    }

    fn sample_external_id(&self, id: &str) -> String {
        // A run's prefix (`{run}-`) or one event of it.
        match id.strip_suffix('-') {
            Some(run) => format!("CAPTURE:{}", sign::reference_prefix(run)),
            None => format!("CAPTURE:{}", sign::reference(id)),
        }
    }

    fn demo(&self) -> BoxFuture<'static, Result<Box<dyn DemoPart>, DemoError>> {
        Box::pin(async { Ok(Box::new(demo::Part::start().await?) as Box<dyn DemoPart>) })
    }

    fn fuzz_targets(&self) -> &'static [FuzzTarget] {
        fuzzing::TARGETS
    }
}

#[cfg(test)]
mod tests {
    use ledger::Currency;

    use super::*;

    #[test]
    fn adyens_exponent_table_converts_exactly() {
        let cases: &[(i64, &str, Option<&str>)] = &[
            (10000, "IDR", Some("10000.00")),
            (1500, "CLP", Some("15")),
            (1550, "CLP", None),
            (1234, "KWD", Some("1.234")),
            (77, "CVE", Some("77.00")),
            (500, "JPY", Some("500")),
        ];
        for &(minor, code, want) in cases {
            let got = EXPONENTS.amount(minor, Currency::parse(code).expect("currency"));
            assert_eq!(got.ok().map(|a| a.to_string()).as_deref(), want, "{minor} {code}");
        }
    }
}
