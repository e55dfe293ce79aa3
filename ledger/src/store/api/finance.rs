//! The store's calls for finance: the journal, balances (and folding the balances kept), open
//! receivables and payout reconciliation.

use super::*;

impl Store {
    /// The journal in (effective date, id) order after `after`, at most `limit` entries, each
    /// with its lines.
    pub async fn journal(
        &self,
        filter: &JournalFilter,
        after: Option<JournalCursor>,
        limit: u32,
    ) -> Result<JournalPage, StoreError> {
        on_backend!(self, store => store.journal(filter, after, limit).await)
    }

    /// Non-zero balances per account and currency.
    pub async fn balances(&self, query: BalanceQuery) -> Result<Vec<BalanceRow>, StoreError> {
        on_backend!(self, store => store.balances(query).await)
    }

    /// Folds the balances kept by day (what each posting added) into a row per account,
    /// currency and day, and the open receivables kept into a row per movement (dropping those
    /// cleared), keeping every sum; answers how many rows it folded. Safe beside postings and
    /// from every worker process at once.
    pub async fn compact_balances(&self) -> Result<u64, StoreError> {
        on_backend!(self, store => store.compact_balances().await)
    }

    /// Receivables on `accounts` not cleared, per capture and currency, open since (the
    /// effective date of the movement's first receivable line kept: after it was last dropped as
    /// cleared) on or before `since_on_or_before`, oldest first, at most `limit`. Read from the
    /// receivables kept as the journal is written, which keep every account named
    /// [`crate::posting::RECEIVABLES_PREFIX`]`…` (configuration allows no other).
    pub async fn open_receivables(
        &self,
        accounts: &[String],
        since_on_or_before: chrono::NaiveDate,
        limit: u32,
    ) -> Result<Vec<OpenReceivable>, StoreError> {
        on_backend!(self, store => store.open_receivables(accounts, since_on_or_before, limit).await)
    }

    /// The payout beside the items carrying its id; `None` when settle knows neither.
    pub async fn reconciliation(
        &self,
        payout_id: &str,
    ) -> Result<Option<Reconciliation>, StoreError> {
        on_backend!(self, store => store.reconciliation(payout_id).await)
    }

    /// Every payout id in the journal after `after` (in id order), with its reconciliation status.
    pub async fn payouts(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PayoutSummary>, StoreError> {
        on_backend!(self, store => store.payouts(after, limit).await)
    }
}
