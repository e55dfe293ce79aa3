//! Resolving a Stripe event to the balance transactions it names, through Stripe's API, outside
//! any transaction: the fetched facts are checked and drafted into entries by the posting rules,
//! and the store posts them (each by its key, so fetching twice is harmless).

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use chrono::{DateTime, Utc};
use ledger::feed::Window;
use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::trigger::Trigger;
use ledger::{Amount, Currency, PayoutId, PostError, ProviderError, SourceName};
use serde_json::Value;

use super::api::StripeApi;
use super::balance_transaction::{self, BalanceTransaction};
use super::trigger::StripeTrigger;
use crate::budget::{Budget, Priority};
use crate::seam::{Chunks, FeedSettings, Listed, ProviderLedger, Resolution, Resolve};
use tokio::task::JoinHandle;

/// One Stripe source's resolving half: its API client, and its feed when it reads one.
#[derive(Debug)]
pub(crate) struct Resolver {
    pub(crate) api: Arc<StripeApi>,
    pub(crate) feed: Option<FeedSettings>,
}

impl Resolve for Resolver {
    fn resolve<'a>(
        &'a self,
        trigger: &'a Trigger,
        accounts: &'a Accounts,
    ) -> BoxFuture<'a, Result<Resolution, PostError>> {
        Box::pin(async move {
            if let Some(window) = Window::from_trigger(trigger) {
                let window = window.map_err(PostError::CorruptEvent)?;
                return Ok(Resolution::Chunked(Box::new(WindowChunks::new(
                    self.api.clone(),
                    accounts.clone(),
                    window,
                ))));
            }
            let trigger =
                StripeTrigger::from_trigger(trigger).map_err(PostError::CorruptEvent)?;
            // The platform's feed books what a webhook names by id; a connected account's
            // money has no feed here, and is fetched by id.
            let by_id = self.feed.is_none() || trigger.account.is_some();
            let transactions = fetch(&self.api, &trigger, by_id).await?;
            let resolved = draft(
                self.api.source(),
                accounts,
                trigger.account.as_deref(),
                trigger.payout_listing.as_deref(),
                &transactions,
            )?;
            Ok(Resolution::Whole(resolved))
        })
    }

    fn budget(&self) -> Option<&Budget> {
        Some(self.api.budget())
    }

    fn feed(&self) -> Option<FeedSettings> {
        self.feed
    }

    fn ledger(&self) -> Option<&dyn ProviderLedger> {
        Some(self)
    }
}

impl ProviderLedger for Resolver {
    fn balance(&self) -> BoxFuture<'_, Result<Vec<(Currency, Amount)>, PostError>> {
        Box::pin(async move {
            let balance = self.api.balance(None).await?;
            balance
                .held()
                .into_iter()
                .map(|(currency, minor)| amount_of(&currency, minor))
                .collect::<Result<_, _>>()
                .map_err(PostError::from)
        })
    }

    fn listed(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Vec<Listed>, PostError>> {
        Box::pin(async move {
            let source = self.api.source();
            let mut listed = Vec::new();
            let mut failed = None;
            each_listed(&self.api, from.timestamp(), to.timestamp(), |transaction| {
                match amount_of(&transaction.currency, transaction.net) {
                    Ok((currency, net)) => listed.push(Listed {
                        key: balance_transaction::source_key(source, None, &transaction.id),
                        id: transaction.id.clone(),
                        category: transaction.category().to_owned(),
                        currency,
                        net,
                        created: DateTime::from_timestamp(transaction.created, 0)
                            .unwrap_or_default(),
                    }),
                    Err(error) => failed = Some(error),
                }
            })
            .await?;
            match failed {
                Some(error) => Err(error.into()),
                None => Ok(listed),
            }
        })
    }
}

/// Stripe's lower-case currency and minor units, as settle's.
fn amount_of(currency: &str, minor: i64) -> Result<(Currency, Amount), ProviderError> {
    let currency = Currency::parse(&currency.to_ascii_uppercase())
        .map_err(|e| ProviderError::Response(format!("balance: {e}")))?;
    let amount = balance_transaction::EXPONENTS
        .amount(minor, currency)
        .map_err(|e| ProviderError::Response(format!("balance: {e}")))?;
    Ok((currency, amount))
}

/// Calls `each` with every balance transaction Stripe lists as created in `[from, to)`, page
/// after page.
async fn each_listed(
    api: &StripeApi,
    from: i64,
    to: i64,
    mut each: impl FnMut(&BalanceTransaction),
) -> Result<(), ProviderError> {
    let mut after: Option<String> = None;
    loop {
        let (page, more) = api
            .window_page(None, (from, to), after.as_deref(), Priority::Now)
            .await?;
        page.iter().for_each(&mut each);
        match (more, page.last()) {
            (true, Some(last)) => after = Some(last.id.clone()),
            (true, None) => {
                return Err(ProviderError::Response(
                    "an empty listing page says it has more".into(),
                ));
            }
            (false, _) => return Ok(()),
        }
    }
}

/// A page of a window's listing being fetched.
type PageFetch = JoinHandle<Result<(Vec<BalanceTransaction>, bool), ProviderError>>;

/// A feed window's balance transactions, a listing page at a time: while one page is posted,
/// the next is already being fetched.
struct WindowChunks {
    api: Arc<StripeApi>,
    accounts: Accounts,
    window: Window,
    next: Option<PageFetch>,
}

impl WindowChunks {
    fn new(api: Arc<StripeApi>, accounts: Accounts, window: Window) -> Self {
        let mut chunks = Self {
            api,
            accounts,
            window,
            next: None,
        };
        chunks.next = Some(chunks.fetch(None));
        chunks
    }

    fn fetch(&self, after: Option<String>) -> PageFetch {
        let api = self.api.clone();
        let span = (self.window.from.timestamp(), self.window.to.timestamp());
        // A backfill's window reads history: the feed's own windows and webhooks go first.
        let priority = match self.window.seq {
            0 => Priority::History,
            _ => Priority::Now,
        };
        tokio::spawn(async move {
            api.window_page(None, span, after.as_deref(), priority)
                .await
        })
    }
}

impl Drop for WindowChunks {
    fn drop(&mut self) {
        if let Some(fetch) = self.next.take() {
            fetch.abort();
        }
    }
}

impl Chunks for WindowChunks {
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Resolved, PostError>> {
        Box::pin(async move {
            let fetch = match self.next.take() {
                Some(fetch) => fetch,
                None => self.fetch(None),
            };
            let (page, more) = fetch
                .await
                .map_err(|e| ProviderError::Response(format!("a listing page: {e}")))??;
            if more {
                let last = page.last().map(|t| t.id.clone()).ok_or_else(|| {
                    ProviderError::Response("an empty listing page says it has more".into())
                })?;
                self.next = Some(self.fetch(Some(last)));
            }
            let mut resolved = draft_listed(self.api.source(), &self.accounts, &page)?;
            resolved.partial = more;
            metrics::counter!("settle_feed_transactions_listed_total", "source" => self.api.source().to_string())
                .increment(page.len() as u64);
            Ok(resolved)
        })
    }
}

/// Every balance transaction the trigger names, each once, in the order named: those named by
/// id (when `by_id`; else the feed books them), those embedded (fetched when incomplete and
/// `by_id`), a charge's refunds' (when `by_id`), a payout's listing.
async fn fetch(
    api: &StripeApi,
    trigger: &StripeTrigger,
    by_id: bool,
) -> Result<Vec<BalanceTransaction>, ProviderError> {
    let account = trigger.account.as_deref();
    let mut named = Vec::new();
    if by_id {
        for id in &trigger.balance_transactions {
            named.push(api.balance_transaction(account, id).await?);
        }
    }
    for embedded in &trigger.embedded {
        let complete = is_complete(embedded)
            .then(|| serde_json::from_value::<BalanceTransaction>(embedded.clone()).ok())
            .flatten();
        match complete {
            Some(complete) => named.push(complete),
            None if by_id => named.push(
                api.balance_transaction(account, &embedded_id(embedded)?)
                    .await?,
            ),
            None => {}
        }
    }
    // What the object names directly belongs to the object itself.
    for transaction in &named {
        if let Some(owner) = transaction.source_id()
            && owner != trigger.object
        {
            return Err(ProviderError::Facts(format!(
                "balance transaction {} belongs to {owner}, not to {}",
                transaction.id, trigger.object
            )));
        }
    }
    let mut all = named;
    if let Some(charge) = trigger.refunds_of_charge.as_ref().filter(|_| by_id) {
        all.extend(api.refund_transactions(account, charge).await?);
    }
    if let Some(payout) = &trigger.payout_listing {
        all.extend(api.payout_transactions(account, payout).await?);
    }
    let mut seen = HashSet::new();
    all.retain(|transaction| seen.insert(transaction.id.clone()));
    Ok(all)
}

/// Whether an embedded balance transaction carries every field a movement is built from (an
/// object rendered at another API version, or shortened, is fetched instead).
fn is_complete(embedded: &Value) -> bool {
    const FIELDS: [&str; 10] = [
        "id",
        "amount",
        "created",
        "currency",
        "fee",
        "fee_details",
        "net",
        "reporting_category",
        "source",
        "type",
    ];
    embedded.as_object().is_some_and(|object| {
        FIELDS
            .iter()
            .all(|f| object.get(*f).is_some_and(|v| !v.is_null()))
    })
}

/// An embedded balance transaction's id (an embedded item may be an id or a partial object).
fn embedded_id(embedded: &Value) -> Result<String, ProviderError> {
    match embedded {
        Value::String(id) => Ok(id.clone()),
        other => other
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                ProviderError::Facts("an embedded balance transaction has no id".into())
            }),
    }
}

/// Drafts a feed window's page: as [`draft`], but a transaction that does not add up is booked
/// to suspense on its own ([`balance_transaction::suspense_movement`]) instead of failing the page.
fn draft_listed(
    source: &SourceName,
    accounts: &Accounts,
    transactions: &[BalanceTransaction],
) -> Result<Resolved, ProviderError> {
    let mut entries = Vec::with_capacity(transactions.len());
    for transaction in transactions {
        let movement = balance_transaction::movement(source, None, transaction)
            .or_else(|error| {
                tracing::warn!(%source, transaction = %transaction.id, %error, "a listed balance transaction does not add up; booked to suspense");
                balance_transaction::suspense_movement(source, None, transaction, &error)
            })
            .map_err(|error| {
                ProviderError::Facts(format!("balance transaction {}: {error}", transaction.id))
            })?;
        if movement.is_zero() {
            continue;
        }
        let draft = posting::draft_movement(&movement, accounts);
        entries.push(MovementEntry::new(movement, draft));
    }
    Ok(Resolved {
        entries,
        payout: None,
        partial: false,
    })
}

/// Checks each transaction and drafts its entry, tied to `payout` when it is the payout's
/// listing; a connected account's go to accounts namespaced by it. A transaction that moves no
/// money posts nothing.
fn draft(
    source: &SourceName,
    accounts: &Accounts,
    account: Option<&str>,
    payout: Option<&str>,
    transactions: &[BalanceTransaction],
) -> Result<Resolved, ProviderError> {
    let accounts = match account {
        Some(account) => accounts.for_connected_account(account),
        None => accounts.clone(),
    };
    let mut entries = Vec::with_capacity(transactions.len());
    for transaction in transactions {
        let movement = balance_transaction::movement(source, account, transaction).map_err(|error| {
            ProviderError::Facts(format!("balance transaction {}: {error}", transaction.id))
        })?;
        if movement.is_zero() {
            continue;
        }
        let draft = posting::draft_movement(&movement, &accounts);
        entries.push(MovementEntry::new(movement, draft));
    }
    let payout = payout
        .map(PayoutId::parse)
        .transpose()
        .map_err(|e| ProviderError::Facts(e.to_string()))?;
    Ok(Resolved {
        entries,
        payout,
        partial: false,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn transaction(
        id: &str,
        category: &str,
        amount: i64,
        fee: i64,
        source: &str,
    ) -> BalanceTransaction {
        serde_json::from_value(json!({
            "id": id, "object": "balance_transaction", "amount": amount, "available_on": 1_700_600_000,
            "created": 1_700_000_000, "currency": "usd", "exchange_rate": null, "fee": fee,
            "fee_details": if fee == 0 { json!([]) } else {
                json!([{"amount": fee, "currency": "usd", "type": "stripe_fee", "description": "Stripe processing fees", "application": null}])
            },
            "net": amount - fee, "reporting_category": category, "source": source,
            "status": "available", "type": category}))
        .expect("transaction")
    }

    fn lines(resolved: &Resolved) -> Vec<Vec<(String, String)>> {
        resolved
            .entries
            .iter()
            .map(|e| {
                e.draft
                    .lines
                    .iter()
                    .map(|l| (l.account.clone(), l.amount.to_string()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_payout_listing_drafts_every_item_and_ties_them() {
        let source = SourceName::parse("stripe").expect("source");
        let accounts = Accounts::defaults(&source);
        let listing = [
            transaction("txn_c", "charge", 10_000, 320, "ch_1"),
            transaction("txn_f", "fee", -500, 0, "fee_1"),
            transaction("txn_p", "payout", -9_180, 0, "po_1"),
        ];
        let resolved =
            draft(&source, &accounts, None, Some("po_1"), &listing).expect("drafted");
        assert_eq!(resolved.payout.as_ref().map(PayoutId::as_str), Some("po_1"));
        assert_eq!(
            lines(&resolved),
            [
                vec![
                    ("stripe:balance".into(), "96.80".into()),
                    ("fees:stripe".into(), "3.20".into()),
                    ("sales".into(), "-100.00".into())
                ],
                vec![
                    ("stripe:balance".into(), "-5.00".into()),
                    ("fees:stripe".into(), "5.00".into())
                ],
                vec![
                    ("stripe:balance".into(), "-91.80".into()),
                    ("bank".into(), "91.80".into())
                ],
            ]
        );
        assert!(resolved.entries.iter().all(|e| e.draft.is_balanced()));
    }

    #[test]
    fn a_connected_account_never_touches_the_platforms_accounts() {
        let source = SourceName::parse("stripe").expect("source");
        let listing = [transaction("txn_c", "charge", 1_000, 59, "ch_1")];
        let resolved = draft(
            &source,
            &Accounts::defaults(&source),
            Some("acct_9"),
            Some("po_1"),
            &listing,
        )
        .expect("drafted");
        let accounts: Vec<String> = lines(&resolved)[0].iter().map(|(a, _)| a.clone()).collect();
        assert_eq!(
            accounts,
            [
                "stripe:balance:acct_9",
                "fees:stripe:acct_9",
                "sales:acct_9"
            ]
        );
        assert_eq!(
            resolved.entries[0].movement.source_key(),
            "stripe/acct_9/balance_transaction/txn_c"
        );
    }
}
