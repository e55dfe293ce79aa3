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

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use ledger::feed::Window;
use ledger::{Content, EventId, EventStatus, ExternalId, NewEvent, SourceName, Store, StoreError};
use providers::FeedSettings;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::resolvers::Resolvers;

mod opening;

pub(crate) use opening::opening;
use opening::opening_look;
pub use opening::{OpeningWatch, record_opening_when_ready};

/// How often each process looks at the feeds.
const TICK: Duration = Duration::from_secs(1);
/// How often a process looks at a feed it is chasing: one whose last window, opened by this
/// process, was cut short of the time it opened at ([`reach`]), so the next is due the moment it
/// posts (a catch-up goes window after window without a tick's wait between them); for at most
/// [`CHASING_FOR`] after that window opened (one that stopped, failing or paused, is looked at
/// each [`TICK`] again).
const CHASING_TICK: Duration = Duration::from_millis(100);
const CHASING_FOR: Duration = Duration::from_secs(30);
/// How often a process looks whether a backfill it has seen asked for an opening balance is
/// ready for it: the backfill's command waits for the opening, so the look is close behind the
/// last window's posting.
const OPENING_TICK: Duration = Duration::from_millis(200);
/// A delivery received at `r` keeps the feed due until a window has read to `r` + this: a
/// window reads whole seconds (its end is exclusive), and a provider may list a movement a
/// moment after its webhook.
const WAKE_MARGIN: TimeDelta = TimeDelta::seconds(2);
/// How many earlier windows [`woken`] looks back through for where the deliveries it reads begin.
const WAKE_LOOKBACK: usize = 16;
/// A feed's next window reads anew as far past the last one's end as the last one's pace (what
/// it read anew, over the time from its opening to its posting) lists in about this long: at
/// least a second, at most twice what the last one read anew, at most to now. So a feed far
/// behind (an outage, a backlog, a dense account) catches up in windows each short enough to
/// post between two failures, a window that took long (its worker died, its provider failed)
/// is followed by a shorter one, and a quick one by one at most twice as long (its movements
/// may lie thicker further on).
const WINDOW_TAKES: TimeDelta = TimeDelta::seconds(5);

/// What one look at a feed did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    /// Opened this window.
    Opened(Window),
    /// Its last window has not posted yet (running, waiting for a retry, paused, or dead-lettered).
    Busy,
    /// Nothing woke it and its period has not passed: it is due at `due` unless woken.
    NotDue { due: DateTime<Utc> },
}

/// Looks at every feed of `resolvers` each [`TICK`] (a feed it is chasing each
/// [`CHASING_TICK`]) until `shutdown`.
pub(crate) async fn feed_loop(
    store: Store,
    resolvers: Resolvers,
    lock_timeout_ms: u64,
    shutdown: CancellationToken,
) {
    let feeds: Vec<(SourceName, FeedSettings)> = resolvers.feeds().collect();
    let mut openings: HashMap<SourceName, OpeningWatch> = HashMap::new();
    let mut accounts: HashMap<SourceName, AccountFeeds> = HashMap::new();
    // A process that has just started does not know what happened while none looked (an
    // outage, a deploy): each source's own feed is swept at once, then as it is due.
    let mut starting: HashSet<SourceName> = feeds.iter().map(|(s, _)| s.clone()).collect();
    let mut chasing: HashMap<SourceName, Instant> = HashMap::new();
    let mut next_look = tokio::time::Instant::now();
    let mut opening_tick = tokio::time::interval(OPENING_TICK);
    opening_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next_look) => {}
            _ = opening_tick.tick() => {
                for (source, watch) in openings.iter_mut().filter(|(_, w)| w.awaited) {
                    opening_look(&store, source, watch, lock_timeout_ms).await;
                }
                continue;
            }
            _ = shutdown.cancelled() => return,
        }
        for (source, settings) in &feeds {
            let wake = starting.contains(source);
            let now = Utc::now();
            match look(&store, source, settings, now, wake, lock_timeout_ms).await {
                // Woken until a window opens after the start (the last one may still be
                // running, or have ended this very second).
                Ok(Look::Opened(window)) => {
                    opened(source, &window);
                    starting.remove(source);
                    if window.to + TimeDelta::seconds(1) < now {
                        chasing.insert(source.clone(), Instant::now());
                    } else {
                        chasing.remove(source);
                    }
                }
                Ok(Look::Busy) => {}
                Ok(Look::NotDue { .. }) => {
                    chasing.remove(source);
                }
                Err(error) => {
                    chasing.remove(source);
                    warn!(%source, %error, "looking at the feed failed");
                }
            }
            if let Some(resolver) = resolvers.get(source) {
                let feeds = accounts.entry(source.clone()).or_default();
                feeds
                    .look(&store, source, resolver, settings, lock_timeout_ms)
                    .await;
            }
            let watch = openings.entry(source.clone()).or_default();
            opening_look(&store, source, watch, lock_timeout_ms).await;
        }
        chasing.retain(|_, since| since.elapsed() < CHASING_FOR);
        next_look = tokio::time::Instant::now()
            + if chasing.is_empty() {
                TICK
            } else {
                CHASING_TICK
            };
    }
}

fn opened(source: &SourceName, window: &Window) {
    info!(%source, account = window.account.as_deref().unwrap_or_default(), seq = window.seq,
          from = %window.from, listed_from = %window.listed_from(), to = %window.to,
          "feed window opened");
    metrics::counter!("settle_feed_windows_opened_total", "source" => source.to_string())
        .increment(1);
}

/// The feeds of a source's accounts at its provider (`Resolve::feed_accounts`, e.g. a
/// platform's connected accounts), as one process sweeps them: the accounts as last asked for, and when
/// each is next looked at. An account's feed is not woken by webhooks (a connected account's
/// webhook fetches what it names by id); its windows open on its schedule: `every`, stretched
/// so that the accounts' windows together spend at most [`ACCOUNTS_BUDGET_PERCENT`] of the
/// source's requests a second (each window costs at least one request).
#[derive(Debug, Default)]
pub struct AccountFeeds {
    accounts: Vec<String>,
    asked_at: Option<Instant>,
    next_look: HashMap<String, Instant>,
    read_to: HashMap<String, DateTime<Utc>>,
}

/// At most this many accounts' feeds are looked at in one tick.
const ACCOUNT_LOOKS_PER_TICK: usize = 100;
/// At most this share of a source's requests a second goes to its accounts' scheduled windows.
const ACCOUNTS_BUDGET_PERCENT: u64 = 50;

impl AccountFeeds {
    /// Asks for the accounts when `every` has passed since the last time, then looks at each
    /// account's feed that is due.
    pub async fn look(
        &mut self,
        store: &Store,
        source: &SourceName,
        resolver: &dyn providers::Resolve,
        settings: &FeedSettings,
        lock_timeout_ms: u64,
    ) {
        if self
            .asked_at
            .is_none_or(|at| at.elapsed() >= settings.every)
        {
            self.asked_at = Some(Instant::now());
            match resolver.feed_accounts().await {
                Ok(accounts) => {
                    self.next_look.retain(|a, _| accounts.contains(a));
                    self.read_to.retain(|a, _| accounts.contains(a));
                    self.accounts = accounts;
                }
                Err(error) => warn!(%source, %error, "listing the source's accounts failed"),
            }
        }
        if self.accounts.is_empty() {
            return;
        }
        let settings = FeedSettings {
            every: account_every(settings.every, self.accounts.len(), resolver.budget()),
            ..*settings
        };
        let now = Instant::now();
        let mut looks = 0;
        for account in &self.accounts {
            if self.next_look.get(account).is_some_and(|at| *at > now) {
                continue;
            }
            // The rest wait for the next tick: the source's own feed is looked at every tick.
            if looks == ACCOUNT_LOOKS_PER_TICK {
                break;
            }
            looks += 1;
            let looked = look_at(
                store,
                source,
                Some(account.as_str()),
                &settings,
                Utc::now(),
                false,
                lock_timeout_ms,
            )
            .await;
            let next = match looked {
                Ok((look, read_to)) => {
                    if let Some(read_to) = read_to {
                        self.read_to.insert(account.clone(), read_to);
                    }
                    match look {
                        Look::Opened(window) => {
                            opened(source, &window);
                            now + TICK
                        }
                        Look::Busy => now + TICK,
                        Look::NotDue { due } => {
                            now + (due - Utc::now()).to_std().unwrap_or_default().max(TICK)
                        }
                    }
                }
                Err(error) => {
                    warn!(%source, %account, %error, "looking at an account's feed failed");
                    now + TICK
                }
            };
            self.next_look.insert(account.clone(), next);
        }
        // The furthest behind of the accounts' feeds.
        let behind = self
            .read_to
            .values()
            .map(|read_to| (Utc::now() - *read_to).to_std().unwrap_or_default())
            .max()
            .unwrap_or_default();
        metrics::gauge!("settle_feed_accounts_lag_seconds", "source" => source.to_string())
            .set(behind.as_secs_f64());
    }
}

/// How often each of `accounts` account feeds opens a window unwoken: `every`, or longer when
/// that would spend more than [`ACCOUNTS_BUDGET_PERCENT`] of the fleet's requests a second.
fn account_every(every: Duration, accounts: usize, budget: Option<&providers::Budget>) -> Duration {
    let Some(per_sec) = budget.map(providers::Budget::fleet_per_sec) else {
        return every;
    };
    let spendable_milli = (u64::from(per_sec) * ACCOUNTS_BUDGET_PERCENT * 10).max(1);
    let spread = Duration::from_millis(accounts as u64 * 1_000_000 / spendable_milli);
    every.max(spread)
}

/// Looks once at `source`'s own feed at `now`, and opens its next window if it is due, or at
/// once when `wake`.
pub async fn look(
    store: &Store,
    source: &SourceName,
    settings: &FeedSettings,
    now: DateTime<Utc>,
    wake: bool,
    lock_timeout_ms: u64,
) -> Result<Look, StoreError> {
    let (look, read_to) =
        look_at(store, source, None, settings, now, wake, lock_timeout_ms).await?;
    if let Some(read_to) = read_to {
        lag(source, now, read_to);
    }
    Ok(look)
}

/// Looks once at the feed of `source`'s `account` (`None`: the source's own) at `now`, and
/// opens its next window if it is due, or at once when `wake` (once its last window has
/// posted): what it did, and how far the feed has read. Only the source's own feed is woken by
/// deliveries.
pub async fn look_at(
    store: &Store,
    source: &SourceName,
    account: Option<&str>,
    settings: &FeedSettings,
    now: DateTime<Utc>,
    wake: bool,
    lock_timeout_ms: u64,
) -> Result<(Look, Option<DateTime<Utc>>), StoreError> {
    let overlap = TimeDelta::from_std(settings.overlap).unwrap_or(TimeDelta::MAX);
    let every = TimeDelta::from_std(settings.every).unwrap_or(TimeDelta::MAX);
    let now = DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now);
    let cursor = store.feed_cursor_of(source, account).await?;
    let mut read = None;
    let window = match cursor {
        None => Window::first(account, now, overlap),
        Some(seq) => {
            let key = Window::external_id_of(account, seq);
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
            read = Some(read_to);
            if last.status != EventStatus::Posted {
                return Ok((Look::Busy, read));
            }
            // Cut short of the time it was opened at (see `reach`): the rest is due at once.
            let behind = window.to + TimeDelta::seconds(1) < last.received_at;
            let woken = wake
                || behind
                || match account {
                    None => woken(store, source, seq, window.to).await?,
                    Some(_) => false,
                };
            let due = window
                .to
                .checked_add_signed(every)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            if !woken && now < due {
                return Ok((Look::NotDue { due }, read));
            }
            // Nothing new before the next whole second.
            if now <= window.to {
                return Ok((
                    Look::NotDue {
                        due: window.to + TimeDelta::seconds(1),
                    },
                    read,
                ));
            }
            let reach = reach(&window, overlap, last.status_changed_at - last.received_at);
            let to = window
                .to
                .checked_add_signed(reach)
                .map_or(now, |to| to.min(now));
            window.after(last.received_at, now, to, overlap, WAKE_MARGIN)
        }
    };
    if now <= window.from {
        return Ok((
            Look::NotDue {
                due: window.from + TimeDelta::seconds(1),
            },
            read,
        ));
    }
    let seq = window.seq;
    let external_id =
        ExternalId::parse(&window.key()).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let event = NewEvent {
        source: source.clone(),
        external_id,
        payload: window.named().trigger.to_stored().to_string(),
        content: Content::Named(window.named()),
    };
    let opened = store.record_new(&[&event], lock_timeout_ms).await?;
    store
        .advance_feed_cursor(source, account, cursor, seq)
        .await?;
    let look = match opened.first() {
        Some(Some(_)) => Look::Opened(window),
        // Another process opened it first.
        _ => Look::Busy,
    };
    Ok((look, read))
}

/// How far past `last`'s end the next window reads anew ([`WINDOW_TAKES`]): what `last` read
/// anew (past its `overlap`, at least a second) scaled by [`WINDOW_TAKES`] over what it `took`,
/// at most doubled, in whole seconds, at least one.
fn reach(last: &Window, overlap: TimeDelta, took: TimeDelta) -> TimeDelta {
    let read_anew = (last.to - (last.from + overlap)).max(TimeDelta::seconds(1));
    let took_ms = i128::from(
        took.num_milliseconds()
            .max(WINDOW_TAKES.num_milliseconds() / 2)
            .max(1),
    );
    let reach_ms = i128::from(read_anew.num_milliseconds())
        * i128::from(WINDOW_TAKES.num_milliseconds())
        / took_ms;
    let seconds = i64::try_from(reach_ms / 1_000).unwrap_or(i64::MAX).max(1);
    TimeDelta::try_seconds(seconds).unwrap_or(TimeDelta::MAX)
}

/// Whether a delivery to `source` keeps its own feed due after window `seq` (ending at `to`):
/// one received later than [`WAKE_MARGIN`] before `to`. Only deliveries recorded after the
/// newest earlier window opened by then are read (those recorded before it were received before
/// it); windows opened in quick succession (a feed being caught up) may all have opened after
/// such a delivery, so the search looks back past them, at most [`WAKE_LOOKBACK`] windows, else
/// through every delivery of the source.
async fn woken(
    store: &Store,
    source: &SourceName,
    seq: i64,
    to: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let mut bound = None;
    for earlier in (1..seq).rev().take(WAKE_LOOKBACK) {
        let Some(window) = store
            .event_by_key(source.as_str(), &Window::external_id(earlier))
            .await?
        else {
            break;
        };
        if window.received_at + WAKE_MARGIN <= to {
            bound = Some(window.id);
            break;
        }
    }
    Ok(store
        .newest_delivery(source, EventId::new(bound.unwrap_or(0)))
        .await?
        .is_some_and(|received| received + WAKE_MARGIN > to))
}

/// `settle_feed_lag_seconds{source}`: how far behind now the feed has read.
fn lag(source: &SourceName, now: DateTime<Utc>, read_to: DateTime<Utc>) {
    let behind = (now - read_to).to_std().unwrap_or_default();
    metrics::gauge!("settle_feed_lag_seconds", "source" => source.to_string())
        .set(behind.as_secs_f64());
}

#[cfg(test)]
mod tests;
