//! Sweeping the sources' feeds (ARCHITECTURE.md, Feeds): every process looks once a second
//! whether a source's next window is due, and opens it by recording it as an event of the
//! source (`feed:{seq}`, a [`Window`] trigger), whose job the source's provider resolves by
//! listing its movements. The next window opens only after the last one posted, from the last
//! one's end less the overlap, to now: when a webhook woke the feed (a delivery to the source
//! received later than [`WAKE_MARGIN`] before the last window's end) or `every` after the last
//! window's end. Two processes opening the same window record it once (its natural key), and
//! the cursor moves by compare-and-set.
//!
//! A backfill asks for the source's opening balance; it is recorded (`opening`, an [`Opening`]
//! trigger) once the feed's first window and every window of the backfill have posted, and its
//! job computes it from the provider's balance and the books ([`opening`]), so the history is
//! listed once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use ledger::feed::{OPENING_EXTERNAL_ID, Opening, Window};
use ledger::finance::BalanceQuery;
use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::{
    Amount, Content, EventId, EventStatus, ExternalId, NewEvent, PostError, ProviderError,
    SourceName, Store, StoreError,
};
use providers::{FeedSettings, ProviderLedger};
use rust_decimal::Decimal;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::resolvers::Resolvers;

/// How often each process looks at the feeds.
const TICK: Duration = Duration::from_secs(1);
/// A delivery received at `r` keeps the feed due until a window has read to `r` + this: a
/// window reads whole seconds (its end is exclusive), and a provider may list a movement a
/// moment after its webhook.
const WAKE_MARGIN: TimeDelta = TimeDelta::seconds(2);

/// What one look at a source's feed did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// Opened this window.
    Opened(Window),
    /// Its last window has not posted yet (running, waiting for a retry, paused, or dead-lettered).
    Busy,
    /// Nothing woke it and its period has not passed.
    NotDue,
}

/// Looks at every feed of `resolvers` each [`TICK`] until `shutdown`.
pub(crate) async fn feed_loop(
    store: Store,
    resolvers: Resolvers,
    lock_timeout_ms: u64,
    shutdown: CancellationToken,
) {
    let feeds: Vec<(SourceName, FeedSettings)> = resolvers.feeds().collect();
    let mut openings: HashMap<SourceName, OpeningWatch> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        for (source, settings) in &feeds {
            match look(&store, source, settings, Utc::now(), lock_timeout_ms).await {
                Ok(Look::Opened(window)) => {
                    info!(%source, seq = window.seq, from = %window.from, to = %window.to, "feed window opened");
                    metrics::counter!("settle_feed_windows_opened_total", "source" => source.to_string())
                        .increment(1);
                }
                Ok(_) => {}
                Err(error) => warn!(%source, %error, "looking at the feed failed"),
            }
            let watch = openings.entry(source.clone()).or_default();
            match record_opening_when_ready(&store, source, watch, lock_timeout_ms).await {
                Ok(Some(opening)) => {
                    info!(%source, since = %opening.since, "backfill posted; opening balance recorded");
                }
                Ok(None) => {}
                Err(error) => warn!(%source, %error, "looking at the opening balance failed"),
            }
        }
    }
}

/// How far one process has seen a source's backfill post.
#[derive(Debug, Default)]
pub struct OpeningWatch {
    /// The opening is recorded: nothing more to watch.
    recorded: bool,
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
        return Ok(None);
    }
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

/// Looks once at `source`'s feed at `now`, and opens its next window if it is due.
pub async fn look(
    store: &Store,
    source: &SourceName,
    settings: &FeedSettings,
    now: DateTime<Utc>,
    lock_timeout_ms: u64,
) -> Result<Look, StoreError> {
    let overlap = TimeDelta::from_std(settings.overlap).unwrap_or(TimeDelta::MAX);
    let every = TimeDelta::from_std(settings.every).unwrap_or(TimeDelta::MAX);
    let now = DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now);
    let cursor = store.feed_cursor(source).await?;
    let (seq, from) = match cursor {
        None => (1, now - overlap),
        Some(seq) => {
            let key = Window::external_id(seq);
            let last = store
                .event_by_key(source.as_str(), &key)
                .await?
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("{source}: feed window {key} is missing"))
                })?;
            let window = last
                .facts
                .as_ref()
                .and_then(Window::from_facts)
                .transpose()
                .map_err(StoreError::Corrupt)?
                .ok_or_else(|| StoreError::Corrupt(format!("{source}: {key} holds no window")))?;
            let read_to = match last.status {
                EventStatus::Posted => window.to,
                _ => window.from + overlap,
            };
            lag(source, now, read_to);
            if last.status != EventStatus::Posted {
                return Ok(Look::Busy);
            }
            // A delivery that could keep the feed due was recorded after the window before
            // the last one opened (the last one opened after it, or within the margin).
            let before_last = match seq {
                1 => None,
                seq => store
                    .event_by_key(source.as_str(), &Window::external_id(seq - 1))
                    .await?
                    .map(|e| e.id),
            };
            let woken = store
                .newest_delivery(source, EventId::new(before_last.unwrap_or(0)))
                .await?
                .is_some_and(|received| received + WAKE_MARGIN > window.to);
            if !woken && now < window.to + every {
                return Ok(Look::NotDue);
            }
            (seq + 1, window.to - overlap)
        }
    };
    if now <= from {
        return Ok(Look::NotDue);
    }
    let window = Window { seq, from, to: now };
    let external_id = ExternalId::parse(&Window::external_id(seq))
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let event = NewEvent {
        source: source.clone(),
        external_id,
        payload: window.named().trigger.to_stored().to_string(),
        content: Content::Named(window.named()),
    };
    let opened = store.record_new(&[&event], lock_timeout_ms).await?;
    store.advance_feed_cursor(source, cursor, seq).await?;
    Ok(match opened.first() {
        Some(Some(_)) => Look::Opened(window),
        // Another process opened it first.
        _ => Look::Busy,
    })
}

/// `settle_feed_lag_seconds{source}`: how far behind now the feed has read.
fn lag(source: &SourceName, now: DateTime<Utc>, read_to: DateTime<Utc>) {
    let behind = (now - read_to).to_std().unwrap_or_default();
    metrics::gauge!("settle_feed_lag_seconds", "source" => source.to_string())
        .set(behind.as_secs_f64());
}
