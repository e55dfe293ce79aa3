//! A source's feed from the operator's side (README.md, Feeds): backfilling its history with an
//! opening balance, and reconciling the books with the provider's own: its balance, and its list
//! of movements over a window (coverage).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, bail};
use chrono::{DateTime, TimeDelta, Utc};
use ledger::feed::{OPENING_EXTERNAL_ID, Opening, Window};
use ledger::finance::BalanceQuery;
use ledger::{Accounts, Content, EventStatus, ExternalId, NewEvent, Recorded, SourceName, Store};
use providers::{FeedSettings, Listed, ProviderLedger};
use rust_decimal::Decimal;
use serde::Serialize;

/// How much of a backfill one window (one event, one job) lists.
pub const BACKFILL_SPAN: TimeDelta = TimeDelta::days(1);

/// What a backfill recorded: its windows' keys (new or already there) and where it ends.
#[derive(Clone, Debug)]
pub struct Backfill {
    pub keys: Vec<String>,
    pub until: DateTime<Utc>,
    /// Windows recorded by this run (the rest were there from an earlier one).
    pub new: usize,
}

/// Records `source`'s backfill from `since`: a window a day up to where its feed begins (its
/// first window is opened here if it has none, so nothing falls between them) and its opening
/// balance at `since`. Safe to run again: each window and the opening are recorded once by their
/// keys; a second opening at another date is refused (a source has one).
pub async fn backfill(
    store: &Store,
    source: &SourceName,
    feed: &FeedSettings,
    since: DateTime<Utc>,
    lock_timeout_ms: u64,
) -> anyhow::Result<Backfill> {
    let now = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap_or_else(Utc::now);
    let until = match store.feed_cursor(source).await? {
        Some(_) => first_window(store, source).await?.from,
        None => {
            let overlap = TimeDelta::from_std(feed.overlap).unwrap_or(TimeDelta::zero());
            let first = Window {
                seq: 1,
                from: now - overlap,
                to: now,
            };
            record_new(store, source, &first.key(), first.named(), lock_timeout_ms).await?;
            store.advance_feed_cursor(source, None, 1).await?;
            first_window(store, source).await?.from
        }
    };
    if since >= until {
        bail!("--since {since} is not before the feed's first window ({until})");
    }
    let windows = Window::backfill_windows(since, until, BACKFILL_SPAN);
    let mut new = 0;
    for window in &windows {
        new += usize::from(
            record_new(
                store,
                source,
                &window.key(),
                window.named(),
                lock_timeout_ms,
            )
            .await?,
        );
    }
    let opening = Opening { since };
    let event = NewEvent {
        source: source.clone(),
        external_id: ExternalId::parse(OPENING_EXTERNAL_ID)?,
        payload: opening.named().trigger.to_stored().to_string(),
        content: Content::Named(opening.named()),
    };
    if let Some(Recorded::Conflict { event_id, .. }) = store.record(&[event]).await?.first() {
        let earlier = store
            .event(*event_id)
            .await?
            .and_then(|e| e.facts)
            .map(|f| f.to_string())
            .unwrap_or_default();
        bail!(
            "source {source} already has an opening balance ({earlier}); a source has one. \
             The windows from {since} were recorded; the opening was not"
        );
    }
    Ok(Backfill {
        keys: windows.iter().map(Window::key).collect(),
        until,
        new,
    })
}

async fn first_window(store: &Store, source: &SourceName) -> anyhow::Result<Window> {
    let event = store
        .event_by_key(source.as_str(), &Window::external_id(1))
        .await?
        .context("the feed's first window is missing")?;
    event
        .facts
        .as_ref()
        .and_then(Window::from_facts)
        .context("the feed's first window holds no window")?
        .map_err(anyhow::Error::msg)
}

/// Records one event if its key is free: whether it was.
async fn record_new(
    store: &Store,
    source: &SourceName,
    key: &str,
    named: ledger::trigger::Named,
    lock_timeout_ms: u64,
) -> anyhow::Result<bool> {
    let event = NewEvent {
        source: source.clone(),
        external_id: ExternalId::parse(key)?,
        payload: named.trigger.to_stored().to_string(),
        content: Content::Named(named),
    };
    let recorded = store.record_new(&[&event], lock_timeout_ms).await?;
    Ok(matches!(recorded.first(), Some(Some(_))))
}

/// How far a backfill has come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    pub windows: usize,
    pub posted: usize,
    /// Windows (or the opening) in the dead letter.
    pub abandoned: usize,
    pub opening_posted: bool,
}

impl Progress {
    pub fn done(&self) -> bool {
        self.posted == self.windows && self.opening_posted
    }
}

/// Where `source`'s backfill windows `keys` and its opening stand.
pub async fn progress(
    store: &Store,
    source: &SourceName,
    keys: &[String],
) -> anyhow::Result<Progress> {
    let mut progress = Progress {
        windows: keys.len(),
        ..Progress::default()
    };
    for key in keys {
        match store
            .event_by_key(source.as_str(), key)
            .await?
            .map(|e| e.status)
        {
            Some(EventStatus::Posted) => progress.posted += 1,
            Some(EventStatus::Abandoned) => progress.abandoned += 1,
            _ => {}
        }
    }
    match store
        .event_by_key(source.as_str(), OPENING_EXTERNAL_ID)
        .await?
        .map(|e| e.status)
    {
        Some(EventStatus::Posted) => progress.opening_posted = true,
        Some(EventStatus::Abandoned) => progress.abandoned += 1,
        _ => {}
    }
    Ok(progress)
}

/// The books beside the provider's balance, per currency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BalanceCheck {
    pub source: String,
    pub account: String,
    /// The end of the feed's last posted window: what the books have read up to.
    pub cut: Option<DateTime<Utc>>,
    pub currencies: Vec<CurrencyBalance>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CurrencyBalance {
    pub currency: String,
    /// What the provider holds now.
    pub provider: String,
    /// What the books hold on the source's balance account.
    pub books: String,
    /// The net of what the provider listed after the cut and the books do not hold yet.
    pub after_cut: String,
    pub after_cut_count: usize,
    /// provider - books - after_cut: zero when the books are whole.
    pub difference: String,
}

impl BalanceCheck {
    pub fn equal(&self) -> bool {
        self.currencies
            .iter()
            .all(|c| c.difference.parse::<Decimal>().is_ok_and(|d| d.is_zero()))
    }
}

/// `source`'s balance at its provider against the books' balance account: equal to the minor
/// unit when the account is quiet; otherwise the movements listed after the feed's cut that the
/// books do not hold yet explain the difference.
pub async fn check_balance(
    store: &Store,
    source: &SourceName,
    ledger: &dyn ProviderLedger,
    accounts: &Accounts,
) -> anyhow::Result<BalanceCheck> {
    let cut = feed_cut(store, source).await?;
    let provider = ledger.balance().await?;
    let now = Utc::now() + TimeDelta::seconds(1);
    let after = match cut {
        Some(cut) => ledger.listed(cut, now).await?,
        None => Vec::new(),
    };
    let booked = booked_keys(store, &after, &accounts.balance).await?;
    let mut rows: BTreeMap<String, [Decimal; 3]> = BTreeMap::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for (currency, amount) in provider {
        rows.entry(currency.code().to_owned()).or_default()[0] += amount.decimal();
    }
    for row in store.balances(BalanceQuery::default()).await? {
        if row.account == accounts.balance {
            rows.entry(row.currency.clone()).or_default()[1] += row.balance.parse::<Decimal>()?;
        }
    }
    for listed in after.iter().filter(|l| !booked.contains_key(&l.key)) {
        rows.entry(listed.currency.code().to_owned()).or_default()[2] += listed.net.decimal();
        *counts.entry(listed.currency.code().to_owned()).or_default() += 1;
    }
    Ok(BalanceCheck {
        source: source.to_string(),
        account: accounts.balance.clone(),
        cut,
        currencies: rows
            .into_iter()
            .map(|(currency, [provider, books, after_cut])| CurrencyBalance {
                after_cut_count: counts.get(&currency).copied().unwrap_or(0),
                difference: (provider - books - after_cut).normalize().to_string(),
                provider: provider.normalize().to_string(),
                books: books.normalize().to_string(),
                after_cut: after_cut.normalize().to_string(),
                currency,
            })
            .collect(),
    })
}

/// The end of the feed's newest posted window.
async fn feed_cut(store: &Store, source: &SourceName) -> anyhow::Result<Option<DateTime<Utc>>> {
    let Some(seq) = store.feed_cursor(source).await? else {
        return Ok(None);
    };
    for seq in [seq, seq - 1] {
        if seq < 1 {
            break;
        }
        let Some(event) = store
            .event_by_key(source.as_str(), &Window::external_id(seq))
            .await?
        else {
            continue;
        };
        if event.status == EventStatus::Posted
            && let Some(Ok(window)) = event.facts.as_ref().and_then(Window::from_facts)
        {
            return Ok(Some(window.to));
        }
    }
    Ok(None)
}

/// The listed movements the books hold, with what each booked to `account`.
async fn booked_keys(
    store: &Store,
    listed: &[Listed],
    account: &str,
) -> anyhow::Result<HashMap<String, Decimal>> {
    let keys: Vec<String> = listed.iter().map(|l| l.key.clone()).collect();
    store
        .booked(&keys, account)
        .await?
        .into_iter()
        .map(|(key, amount)| Ok((key, amount.parse::<Decimal>()?)))
        .collect()
}

/// The provider's list of a window beside the books: per currency and category, its count and
/// net against the books' count and net of the same movements, and the ids the books miss.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Coverage {
    pub source: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub rows: Vec<CoverageRow>,
    /// Listed by the provider, not in the books.
    pub missing_in_books: Vec<String>,
    /// In the books with another net than the provider lists.
    pub differing: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CoverageRow {
    pub currency: String,
    pub category: String,
    pub provider_count: usize,
    pub provider_net: String,
    pub books_count: usize,
    pub books_net: String,
}

impl Coverage {
    pub fn complete(&self) -> bool {
        self.missing_in_books.is_empty() && self.differing.is_empty()
    }
}

/// `source`'s coverage over `[from, to)`.
pub async fn coverage(
    store: &Store,
    source: &SourceName,
    ledger: &dyn ProviderLedger,
    accounts: &Accounts,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<Coverage> {
    let listed = ledger.listed(from, to).await?;
    let booked = booked_keys(store, &listed, &accounts.balance).await?;
    let mut rows: BTreeMap<(String, String), (usize, Decimal, usize, Decimal)> = BTreeMap::new();
    let (mut missing_in_books, mut differing) = (Vec::new(), Vec::new());
    for movement in &listed {
        let row = rows
            .entry((
                movement.currency.code().to_owned(),
                movement.category.clone(),
            ))
            .or_default();
        row.0 += 1;
        row.1 += movement.net.decimal();
        match booked.get(&movement.key) {
            Some(net) => {
                row.2 += 1;
                row.3 += net;
                if *net != movement.net.decimal() {
                    differing.push(movement.id.clone());
                }
            }
            None => missing_in_books.push(movement.id.clone()),
        }
    }
    Ok(Coverage {
        source: source.to_string(),
        from,
        to,
        rows: rows
            .into_iter()
            .map(|((currency, category), (pc, pn, bc, bn))| CoverageRow {
                currency,
                category,
                provider_count: pc,
                provider_net: pn.normalize().to_string(),
                books_count: bc,
                books_net: bn.normalize().to_string(),
            })
            .collect(),
        missing_in_books,
        differing,
    })
}
