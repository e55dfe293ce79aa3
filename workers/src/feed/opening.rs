//! A source's opening balance (ARCHITECTURE.md, Feeds): recorded once a backfill asked for it
//! and the feed's first window and every window of the backfill have posted, and computed by its
//! job from the provider's balance and the books.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use ledger::feed::{OPENING_EXTERNAL_ID, Opening, Window};
use ledger::finance::BalanceQuery;
use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::{
    Amount, Content, EventStatus, ExternalId, NewEvent, PostError, ProviderError, SourceName,
    Store, StoreError,
};
use providers::ProviderLedger;
use rust_decimal::Decimal;
use tracing::{info, warn};

/// How far one process has seen a source's backfill post.
#[derive(Debug, Default)]
pub struct OpeningWatch {
    /// The opening is recorded: nothing more to watch.
    recorded: bool,
    /// A backfill asked for an opening that is not recorded yet: looked at every
    /// [`OPENING_TICK`](super::OPENING_TICK).
    pub(super) awaited: bool,
    /// How many of the windows before the opening have posted (in order).
    posted: usize,
}

/// Records `source`'s opening balance if a backfill asked for it and the feed's first window
/// and every window of the backfill have posted: the opening recorded, if this call did.
pub async fn record_opening_when_ready(
    store: &Store,
    source: &SourceName,
    watch: &mut OpeningWatch,
    lock_timeout_ms: u64,
) -> Result<Option<Opening>, StoreError> {
    if watch.recorded {
        return Ok(None);
    }
    let Some(day) = store.opening_requested(source).await? else {
        return Ok(None);
    };
    if store
        .event_by_key(source.as_str(), OPENING_EXTERNAL_ID)
        .await?
        .is_some()
    {
        watch.recorded = true;
        watch.awaited = false;
        return Ok(None);
    }
    watch.awaited = true;
    let Some((first, _)) = store.first_feed_window(source).await? else {
        return Ok(None);
    };
    let opening = Opening::of_day(day);
    let keys: Vec<String> = std::iter::once(first.key())
        .chain(opening.backfill_windows(first.from).iter().map(Window::key))
        .collect();
    while let Some(key) = keys.get(watch.posted) {
        match store.event_by_key(source.as_str(), key).await? {
            Some(event) if event.status == EventStatus::Posted => watch.posted += 1,
            _ => return Ok(None),
        }
    }
    let event = NewEvent {
        source: source.clone(),
        external_id: ExternalId::parse(OPENING_EXTERNAL_ID)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        payload: opening.named().trigger.to_stored().to_string(),
        content: Content::Named(opening.named()),
    };
    let recorded = store.record_new(&[&event], lock_timeout_ms).await?;
    watch.recorded = true;
    watch.awaited = false;
    Ok(matches!(recorded.first(), Some(Some(_))).then_some(opening))
}

/// `source`'s opening balance at `opening.since`, one entry per currency against the opening
/// account: what the provider holds now, less what the books hold on the source's balance
/// account, less what the provider lists after the feed's cut that the books do not hold yet.
/// Every movement since `opening.since` is in the books or that tail (the backfill's windows and
/// the feed's have posted), so this is what the provider held then less what the books hold
/// from before (a movement a payout's listing booked): the books' balance at `opening.since`
/// is the provider's, and from then on they move together. The books are read as recorded
/// before the provider's balance is, so nothing they hold was created after it; a movement
/// created while the balance was read makes the two readings disagree, and the job reads them
/// again (a transient error).
pub(crate) async fn opening(
    store: &Store,
    source: &SourceName,
    provider: &dyn ProviderLedger,
    accounts: &Accounts,
    opening: Opening,
) -> Result<Resolved, PostError> {
    let not_yet = |detail: &str| {
        PostError::Provider(ProviderError::Unavailable {
            detail: detail.to_owned(),
            retry_after_ms: Some(1_000),
        })
    };
    let cut = store
        .feed_cut(source)
        .await?
        .ok_or_else(|| not_yet("the feed has not posted a window yet"))?;
    let books_at = Utc::now();
    let before = Utc::now().timestamp();
    let balance = provider.balance().await?;
    let after = Utc::now().timestamp() + 1;
    let listed_to = DateTime::from_timestamp(after + 1, 0).unwrap_or_else(Utc::now);
    let tail = provider.listed(cut, listed_to).await?;
    if tail
        .iter()
        .any(|l| (before..=after).contains(&l.created.timestamp()))
    {
        return Err(not_yet(
            "the account moved while its balance was read; reading it again",
        ));
    }
    let tail: Vec<_> = tail
        .into_iter()
        .filter(|l| l.created.timestamp() < before)
        .collect();
    let keys: Vec<String> = tail.iter().map(|l| l.key.clone()).collect();
    let booked: HashSet<String> = store
        .booked(&keys, &accounts.balance, Some(books_at))
        .await?
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    let balance_of =
        |rows: Vec<ledger::finance::BalanceRow>| -> Result<BTreeMap<String, Decimal>, PostError> {
            let mut sums = BTreeMap::new();
            for row in rows.into_iter().filter(|r| r.account == accounts.balance) {
                let amount: Decimal = row.balance.parse().map_err(|e| {
                    StoreError::Corrupt(format!("a balance of {}: {e}", row.account))
                })?;
                *sums.entry(row.currency).or_default() += amount;
            }
            Ok(sums)
        };
    let all = balance_of(
        store
            .balances(BalanceQuery {
                as_of: None,
                recorded_at: Some(books_at),
            })
            .await?,
    )?;
    // Per currency: what the provider holds, less what the books hold, less what the provider
    // lists that the books do not hold yet.
    let mut held: BTreeMap<String, Decimal> = BTreeMap::new();
    for (currency, amount) in balance {
        *held.entry(currency.code().to_owned()).or_default() += amount.decimal();
    }
    for listed in tail.iter().filter(|l| !booked.contains(&l.key)) {
        *held.entry(listed.currency.code().to_owned()).or_default() -= listed.net.decimal();
    }
    for (code, amount) in &all {
        *held.entry(code.clone()).or_default() -= *amount;
    }
    let mut entries = Vec::new();
    for (code, opening_held) in held {
        let currency = ledger::Currency::parse(&code)
            .map_err(|e| StoreError::Corrupt(format!("a balance in {code}: {e}")))?;
        let net = Amount::from_decimal(opening_held, currency)
            .map_err(|e| ProviderError::Facts(format!("the opening balance in {code}: {e}")))?;
        if net.is_zero() {
            continue;
        }
        let movement = opening
            .movement(source, net, currency)
            .map_err(|e| ProviderError::Facts(format!("the opening balance in {code}: {e}")))?;
        let draft = posting::draft_movement(&movement, accounts);
        entries.push(MovementEntry::new(movement, draft));
    }
    Ok(Resolved {
        entries,
        payout: None,
        partial: false,
    })
}

/// Records `source`'s opening balance if it is due, and says so.
pub(super) async fn opening_look(
    store: &Store,
    source: &SourceName,
    watch: &mut OpeningWatch,
    lock_timeout_ms: u64,
) {
    match record_opening_when_ready(store, source, watch, lock_timeout_ms).await {
        Ok(Some(opening)) => {
            info!(%source, since = %opening.since, "backfill posted; opening balance recorded");
        }
        Ok(None) => {}
        Err(error) => warn!(%source, %error, "looking at the opening balance failed"),
    }
}
