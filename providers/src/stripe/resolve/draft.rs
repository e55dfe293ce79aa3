//! What a Stripe trigger names, fetched and drafted: each balance transaction once, and the
//! entries they book.

use std::collections::HashSet;

use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::{PayoutId, ProviderError, SourceName};
use serde_json::Value;

use super::super::api::StripeApi;
use super::super::balance_transaction::{self, BalanceTransaction};
use super::super::trigger::StripeTrigger;

/// Every balance transaction the trigger names, each once, in the order named: those named by
/// id (when `by_id`; else the feed books them), those embedded (fetched when incomplete and
/// `by_id`), a charge's refunds' (when `by_id`), a payout's listing.
pub(super) async fn fetch(
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
pub(in crate::stripe) fn draft_listed(
    source: &SourceName,
    accounts: &Accounts,
    account: Option<&str>,
    transactions: &[BalanceTransaction],
) -> Result<Resolved, ProviderError> {
    let mut entries = Vec::with_capacity(transactions.len());
    for transaction in transactions {
        let movement = balance_transaction::movement(source, account, transaction)
            .or_else(|error| {
                tracing::warn!(%source, transaction = %transaction.id, %error, "a listed balance transaction does not add up; booked to suspense");
                balance_transaction::suspense_movement(source, account, transaction, &error)
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
pub(super) fn draft(
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
