//! Each merchant account's batches as a sequence (ARCHITECTURE.md, Sequences): Adyen numbers a
//! merchant account's settlement batches 1, 2, 3... and serves batch N's settlement details
//! report at `/reports/download/MerchantAccount/{account}/settlement_detail_report_batch_N.csv`
//! (docs.adyen.com, "Settlement details report" and "Download reports"), so a batch whose
//! `REPORT_AVAILABLE` never came is looked up by that name, on the host the merchant account's
//! other reports came from, and recorded as its notification would have been.

use futures::future::BoxFuture;
use ledger::trigger::{Named, Trigger};
use ledger::{PostError, ProviderError};
use reqwest::Url;

use super::resolve::Resolver;
use super::trigger::{AdyenReportTrigger, AdyenTrigger, REPORT_PREFIX};
use crate::seam::Sequence;

impl Sequence for Resolver {
    fn every(&self) -> std::time::Duration {
        self.every
    }

    fn prefix(&self) -> &'static str {
        REPORT_PREFIX
    }

    /// `REPORT_AVAILABLE:{merchant account}:settlement_detail_report_batch_{N}.csv`.
    fn place(&self, external_id: &str) -> Option<(String, u64)> {
        let (account, file) = external_id.strip_prefix(REPORT_PREFIX)?.rsplit_once(':')?;
        let number = AdyenReportTrigger::batch_number(file)?;
        (!account.is_empty()).then(|| (account.to_owned(), number))
    }

    fn probe<'a>(
        &'a self,
        like: &'a Trigger,
        number: u64,
    ) -> BoxFuture<'a, Result<Option<(String, Named)>, PostError>> {
        Box::pin(async move {
            let AdyenTrigger::Report(like) =
                AdyenTrigger::from_trigger(like).map_err(PostError::CorruptEvent)?
            else {
                return Err(PostError::CorruptEvent(
                    "a sale is not a batch's report".into(),
                ));
            };
            let reports = self
                .reports
                .as_ref()
                .ok_or_else(|| ProviderError::NotConfigured(self.source.to_string()))?;
            let batch = batch_like(&like, number)?;
            Ok(match reports.exists(&batch.url).await? {
                true => Some((batch.external_id(), batch.named())),
                false => None,
            })
        })
    }
}

/// Batch `number` of `like`'s merchant account, at its documented place on `like`'s host.
fn batch_like(like: &AdyenReportTrigger, number: u64) -> Result<AdyenReportTrigger, ProviderError> {
    let file = AdyenReportTrigger::batch_file(number);
    let mut url = Url::parse(&like.url)
        .map_err(|_| ProviderError::Facts(format!("the URL of {} cannot be read", like.file)))?;
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .map_err(|()| ProviderError::Facts(format!("the URL of {} has no path", like.file)))?
        .clear()
        .extend([
            "reports",
            "download",
            "MerchantAccount",
            like.merchant_account.as_str(),
            file.as_str(),
        ]);
    Ok(AdyenReportTrigger {
        file,
        url: url.to_string(),
        merchant_account: like.merchant_account.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver() -> Resolver {
        Resolver {
            source: ledger::SourceName::parse("adyen").expect("name"),
            reports: None,
            merchant_accounts: None,
            every: std::time::Duration::from_secs(900),
        }
    }

    #[test]
    fn a_batch_is_placed_by_its_merchant_account_and_number() {
        let r = resolver();
        assert_eq!(
            r.place("REPORT_AVAILABLE:ShopEU:settlement_detail_report_batch_8.csv"),
            Some(("ShopEU".to_owned(), 8))
        );
        for other in [
            "REPORT_AVAILABLE:settlement_detail_report_batch_8.csv",
            "REPORT_AVAILABLE:ShopEU:settlement_detail_report_batch_08.csv",
            "REPORT_AVAILABLE:ShopEU:settlement_detail_report_batch_8_copy.csv",
            "REPORT_AVAILABLE:ShopEU:settlement_detail_report_batch_.csv",
            "REPORT_AVAILABLE::settlement_detail_report_batch_8.csv",
            "CAPTURE:8816000000000102",
        ] {
            assert_eq!(r.place(other), None, "{other}");
        }
    }

    /// The batch looked up is at the documented place on the host its neighbour came from, and
    /// recorded as its notification would be (the same key and facts).
    #[test]
    fn a_missing_batch_is_looked_up_where_its_notification_would_say() {
        let like = AdyenReportTrigger {
            file: "settlement_detail_report_batch_9.csv".into(),
            url: "https://ca-live.adyen.com/reports/download/MerchantAccount/Shop%20EU/settlement_detail_report_batch_9.csv".into(),
            merchant_account: "Shop EU".into(),
        };
        let eight = batch_like(&like, 8).expect("a batch");
        let notified = AdyenReportTrigger {
            file: "settlement_detail_report_batch_8.csv".into(),
            url: "https://ca-live.adyen.com/reports/download/MerchantAccount/Shop%20EU/settlement_detail_report_batch_8.csv".into(),
            merchant_account: "Shop EU".into(),
        };
        assert_eq!(eight, notified);
        assert_eq!(
            eight.named().trigger.fingerprint(),
            notified.named().trigger.fingerprint()
        );
        assert_eq!(
            eight.external_id(),
            "REPORT_AVAILABLE:Shop EU:settlement_detail_report_batch_8.csv"
        );
    }
}
