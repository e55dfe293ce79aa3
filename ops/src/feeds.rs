//! A source's feed from the operator's side (README.md, Feeds): backfilling its history with an
//! opening balance, and reconciling the books with the provider's own: its balance, and its list
//! of movements over a window (coverage).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, bail};
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use ledger::feed::{OPENING_EXTERNAL_ID, Opening, Window};
use ledger::finance::BalanceQuery;
use ledger::{Accounts, Content, EventStatus, ExternalId, NewEvent, SourceName, Store};
use providers::{FeedSettings, Listed, ProviderLedger};
use rust_decimal::Decimal;
use serde::Serialize;

/// What a backfill recorded: its windows' keys (new or already there) and where it ends.
#[derive(Clone, Debug)]
pub struct Backfill {
    pub keys: Vec<String>,
    pub until: DateTime<Utc>,
    /// Windows recorded by this run (the rest were there from an earlier one).
    pub new: usize,
}

/// Records `source`'s backfill from the start of `day` (UTC): a window a day up to where its
/// feed begins (its first window is opened here if it has none, so nothing falls between them),
/// and asks for its opening balance at the start of `day`, which the workers record and compute
/// once every window has posted. Safe to run again: each window is recorded once by its key; an
/// opening from another day is refused (a source has one).
pub async fn backfill(
    store: &Store,
    source: &SourceName,
    feed: &FeedSettings,
    day: NaiveDate,
    lock_timeout_ms: u64,
) -> anyhow::Result<Backfill> {
    let opening = Opening::of_day(day);
    let since = opening.since;
    let now = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap_or_else(Utc::now);
    let until = match store.feed_cursor(source).await? {
        Some(_) => first_window(store, source).await?.from,
        None => {
            let overlap = TimeDelta::from_std(feed.overlap).unwrap_or(TimeDelta::zero());
            let first = Window::first(None, now, overlap);
            record_new(store, source, &first.key(), first.named(), lock_timeout_ms).await?;
            store.advance_feed_cursor(source, None, None, 1).await?;
            first_window(store, source).await?.from
        }
    };
    if since >= until {
        bail!("--since {since} is not before the feed's first window ({until})");
    }
    let windows = opening.backfill_windows(until);
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
    let asked = store
        .request_opening(source, day)
        .await?
        .context("the feed has no cursor")?;
    if asked != day {
        bail!(
            "source {source} already has an opening balance, from {asked}; a source has one. \
             The windows from {day} were recorded; the opening was not"
        );
    }
    Ok(Backfill {
        keys: windows.iter().map(Window::key).collect(),
        until,
        new,
    })
}

async fn first_window(store: &Store, source: &SourceName) -> anyhow::Result<Window> {
    let (window, _) = store
        .first_feed_window(source)
        .await?
        .context("the feed's first window is missing")?;
    Ok(window)
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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

/// Where a source's feed stands: its newest window, what the books have read up to, and its
/// backfill, if it has one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FeedState {
    pub source: String,
    /// The newest window's number (`feed:{seq}`); none before the first.
    pub seq: Option<i64>,
    /// The end of the newest posted window: the provider's list is read up to here.
    pub cut: Option<DateTime<Utc>>,
    /// How far behind now the cut is, in seconds.
    pub lag_seconds: Option<i64>,
    pub backfill: Option<BackfillState>,
}

/// A source's backfill: from which day, and how far the workers have posted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BackfillState {
    pub since: NaiveDate,
    /// Where the backfill ends: the feed's first window.
    pub until: DateTime<Utc>,
    #[schema(inline)]
    pub progress: Progress,
}

/// `source`'s feed as it stands now.
pub async fn feed_state(store: &Store, source: &SourceName) -> anyhow::Result<FeedState> {
    let seq = store.feed_cursor(source).await?;
    let cut = store.feed_cut(source).await?;
    let backfill = match (
        store.opening_requested(source).await?,
        store.first_feed_window(source).await?,
    ) {
        (Some(since), Some((first, _))) => {
            let keys: Vec<String> = Opening::of_day(since)
                .backfill_windows(first.from)
                .iter()
                .map(Window::key)
                .collect();
            Some(BackfillState {
                since,
                until: first.from,
                progress: progress(store, source, &keys).await?,
            })
        }
        _ => None,
    };
    Ok(FeedState {
        source: source.to_string(),
        seq,
        cut,
        lag_seconds: cut.map(|cut| (Utc::now() - cut).num_seconds().max(0)),
        backfill,
    })
}

/// The books beside the provider's balance, per currency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BalanceCheck {
    pub source: String,
    pub account: String,
    /// The end of the feed's last posted window: what the books have read up to.
    pub cut: Option<DateTime<Utc>>,
    pub currencies: Vec<CurrencyBalance>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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
    let cut = store.feed_cut(source).await?;
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

/// How often a process running workers checks each source's balance against its provider's.
pub const BALANCE_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The balance checks of the sources with a feed: every [`BALANCE_CHECK_EVERY`] (the first a
/// minute after start), `settle_provider_balance_unexplained{source,currency}` is set to what
/// [`check_balance`] cannot explain (zero when the books are whole). Skipped while a backfill
/// has not posted its opening balance (the books hold part of the history).
#[derive(Debug)]
pub struct BalanceChecks {
    pub store: Store,
    pub sources: Vec<SourceName>,
    pub resolvers: workers::Resolvers,
    pub rules: ledger::PostingRules,
}

impl BalanceChecks {
    pub async fn run(self, shutdown: tokio_util::sync::CancellationToken) {
        let mut wait = std::time::Duration::from_secs(60);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => return,
            }
            wait = BALANCE_CHECK_EVERY;
            self.check_all().await;
        }
    }

    /// Checks every source once.
    pub async fn check_all(&self) {
        for source in &self.sources {
            if let Err(error) = self.check(source).await {
                tracing::warn!(%source, error = %format!("{error:#}"), "checking the balance against the provider failed");
                metrics::counter!("settle_provider_balance_checks_failed_total", "source" => source.to_string())
                    .increment(1);
            }
        }
    }

    async fn check(&self, source: &SourceName) -> anyhow::Result<()> {
        let (Some(_), Some(ledger)) = (
            self.resolvers.feed_of(source),
            self.resolvers.ledger_of(source),
        ) else {
            return Ok(());
        };
        if let Some(backfill) = feed_state(&self.store, source).await?.backfill
            && !backfill.progress.opening_posted
        {
            return Ok(());
        }
        let check =
            check_balance(&self.store, source, ledger, &self.rules.accounts(source)).await?;
        for currency in &check.currencies {
            let unexplained = currency.difference.parse::<Decimal>()?.abs();
            metrics::gauge!("settle_provider_balance_unexplained", "source" => source.to_string(), "currency" => currency.currency.clone())
                .set(rust_decimal::prelude::ToPrimitive::to_f64(&unexplained).unwrap_or(f64::MAX));
        }
        Ok(())
    }
}

/// The listed movements the books hold, with what each booked to `account`.
async fn booked_keys(
    store: &Store,
    listed: &[Listed],
    account: &str,
) -> anyhow::Result<HashMap<String, Decimal>> {
    let keys: Vec<String> = listed.iter().map(|l| l.key.clone()).collect();
    store
        .booked(&keys, account, None)
        .await?
        .into_iter()
        .map(|(key, amount)| Ok((key, amount.parse::<Decimal>()?)))
        .collect()
}

/// The provider's list of a window beside the books: per currency and category, its count and
/// net against the books' count and net of the same movements, the ids the books miss or hold
/// for another net, and the ids the books hold that the provider does not list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Coverage {
    pub source: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub rows: Vec<CoverageRow>,
    /// Listed by the provider, not in the books.
    pub missing_in_books: Vec<String>,
    /// In the books with another net than the provider lists.
    pub differing: Vec<String>,
    /// In the books, dated within the days, and not in the provider's list (the opening
    /// balance aside).
    pub not_listed: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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
        self.missing_in_books.is_empty() && self.differing.is_empty() && self.not_listed.is_empty()
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
    // What the books hold dated within the days (whole days: an entry is dated by the day its
    // movement was created) that the provider does not list.
    let listed_keys: std::collections::HashSet<&str> =
        listed.iter().map(|l| l.key.as_str()).collect();
    let opening = format!("{source}/opening/");
    let last_day = (to - TimeDelta::seconds(1)).date_naive();
    let not_listed = store
        .booked_between(source, &accounts.balance, (from.date_naive(), last_day))
        .await?
        .into_iter()
        .filter(|(key, _)| !listed_keys.contains(key.as_str()) && !key.starts_with(&opening))
        .map(|(_, id)| id)
        .collect();
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
        not_listed,
    })
}

/// A source's numbered documents (settlement batches, per merchant account) beside the books: per
/// series, the numbers booked, being fetched, in the dead letter or closed by a person, and the
/// numbers missing between the first and the last recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SequenceCoverage {
    pub source: String,
    pub series: Vec<SeriesCoverage>,
}

/// One series (an account at the provider: a merchant account's batches).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SeriesCoverage {
    pub series: String,
    /// The first and the last number recorded.
    pub first: Option<u64>,
    pub last: Option<u64>,
    /// How many are posted.
    pub booked: usize,
    /// Recorded, their jobs not done yet.
    pub fetching: Vec<u64>,
    pub dead_letter: Vec<u64>,
    /// Abandoned or discarded by a person.
    pub closed: Vec<u64>,
    /// Between the first and the last, and not recorded: the provider has not served them yet.
    pub missing: Vec<u64>,
    /// When the oldest missing number was first known to be missing.
    pub gap_since: Option<DateTime<Utc>>,
}

impl SequenceCoverage {
    /// Nothing missing and nothing in the dead letter (what is being fetched is on its way).
    pub fn complete(&self) -> bool {
        self.series
            .iter()
            .all(|s| s.missing.is_empty() && s.dead_letter.is_empty())
    }
}

/// `source`'s numbered documents as the books hold them.
pub async fn sequence_coverage(
    store: &Store,
    source: &SourceName,
    sequence: &dyn providers::Sequence,
) -> anyhow::Result<SequenceCoverage> {
    use workers::sequence::Held;
    let numbers = |series: &workers::sequence::Series, held: Held| -> Vec<u64> {
        series
            .held
            .iter()
            .filter(|(_, h)| **h == held)
            .map(|(n, _)| *n)
            .collect()
    };
    let series = workers::sequence::series(store, source, sequence).await?;
    Ok(SequenceCoverage {
        source: source.to_string(),
        series: series
            .iter()
            .map(|s| SeriesCoverage {
                series: s.name.clone(),
                first: s.first(),
                last: s.last(),
                booked: s.count(Held::Booked),
                fetching: numbers(s, Held::Fetching),
                dead_letter: numbers(s, Held::DeadLetter),
                closed: numbers(s, Held::Closed),
                missing: s.missing.clone(),
                gap_since: s.gap_since,
            })
            .collect(),
    })
}
