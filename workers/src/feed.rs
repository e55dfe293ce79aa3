//! Sweeping the sources' feeds (ARCHITECTURE.md, Feeds): every process looks once a second
//! whether a source's next window is due, and opens it by recording it as an event of the
//! source (`feed:{seq}`, a [`Window`] trigger), whose job the source's provider resolves by
//! listing its movements. The next window opens only after the last one posted, from the last
//! one's end less the overlap, to now: when a webhook woke the feed (an event of the source newer
//! than the last window) or `every` after the last window's end. Two processes opening the same
//! window record it once (its natural key), and the cursor moves by compare-and-set.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use ledger::feed::Window;
use ledger::{Content, EventStatus, ExternalId, NewEvent, SourceName, Store, StoreError};
use providers::FeedSettings;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::resolvers::Resolvers;

/// How often each process looks at the feeds.
const TICK: Duration = Duration::from_secs(1);

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
        }
    }
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
            let woken = store
                .newest_event_id(source)
                .await?
                .is_some_and(|newest| newest.get() > last.id);
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
