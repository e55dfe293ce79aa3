//! Resolving a Stripe event to the balance transactions it names, through Stripe's API, outside
//! any transaction: the fetched facts are checked and drafted into entries by the posting rules,
//! and the store posts them (each by its key, so fetching twice is harmless).

use std::collections::HashSet;

use futures::future::BoxFuture;
use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::trigger::Trigger;
use ledger::{PayoutId, PostError, ProviderError, SourceName};
use serde_json::Value;

use super::api::StripeApi;
use super::balance_transaction::{self, BalanceTransaction};
use super::trigger::StripeTrigger;
use crate::budget::Budget;
use crate::seam::{Resolution, Resolve};

/// One Stripe source's resolving half: its API client.
#[derive(Debug)]
pub(crate) struct Resolver {
    pub(crate) api: StripeApi,
}

impl Resolve for Resolver {
    fn resolve<'a>(
        &'a self,
        trigger: &'a Trigger,
        accounts: &'a Accounts,
    ) -> BoxFuture<'a, Result<Resolution, PostError>> {
        Box::pin(async move {
            let trigger =
                StripeTrigger::from_trigger(trigger).map_err(PostError::CorruptEvent)?;
            let transactions = fetch(&self.api, &trigger).await?;
            let resolved = draft(self.api.source(), accounts, &trigger, &transactions)?;
            Ok(Resolution::Whole(resolved))
        })
    }

    fn budget(&self) -> Option<&Budget> {
        Some(self.api.budget())
    }
}

/// Every balance transaction the trigger names, each once, in the order named: those named by
/// id, those embedded (fetched when incomplete), a charge's refunds', a payout's listing.
async fn fetch(
    api: &StripeApi,
    trigger: &StripeTrigger,
) -> Result<Vec<BalanceTransaction>, ProviderError> {
    let account = trigger.account.as_deref();
    let mut named = Vec::new();
    for id in &trigger.balance_transactions {
        named.push(api.balance_transaction(account, id).await?);
    }
    for embedded in &trigger.embedded {
        let complete = is_complete(embedded)
            .then(|| serde_json::from_value::<BalanceTransaction>(embedded.clone()).ok())
            .flatten();
        named.push(match complete {
            Some(complete) => complete,
            None => {
                api.balance_transaction(account, &embedded_id(embedded)?)
                    .await?
            }
        });
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
    if let Some(charge) = &trigger.refunds_of_charge {
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

/// Checks each transaction and drafts its entry; a connected account's go to accounts
/// namespaced by it. A transaction that moves no money posts nothing.
fn draft(
    source: &SourceName,
    accounts: &Accounts,
    trigger: &StripeTrigger,
    transactions: &[BalanceTransaction],
) -> Result<Resolved, ProviderError> {
    let account = trigger.account.as_deref();
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
    let payout = trigger
        .payout_listing
        .as_deref()
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

    fn trigger(account: Option<&str>) -> StripeTrigger {
        StripeTrigger {
            event_type: "payout.paid".into(),
            object: "po_1".into(),
            account: account.map(str::to_owned),
            balance_transactions: vec![],
            embedded: vec![],
            refunds_of_charge: None,
            payout_listing: Some("po_1".into()),
        }
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
        let resolved = draft(&source, &accounts, &trigger(None), &listing).expect("drafted");
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
            &trigger(Some("acct_9")),
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
