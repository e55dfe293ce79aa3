//! Following the sources' numbered documents (ARCHITECTURE.md, Sequences): a provider that
//! numbers what it publishes 1, 2, 3... per account (a merchant account's settlement batches) and serves each
//! by its number. Every process looks at each such source when a new document of it was
//! recorded and at least every `Sequence::every`: a number missing between two recorded ones is
//! asked of the provider (up to [`LOOKUPS_PER_SERIES`] a look), and, on the schedule, the numbers
//! after the last; one the provider serves is recorded under the key and facts its notification
//! would have carried, so a notification that comes later is the same event, and its job books
//! it. Two processes that find the same document record it once.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ledger::review::{EventFilter, PageRequest};
use ledger::trigger::Trigger;
use ledger::{Content, ExternalId, NewEvent, PostError, SourceName, Store, StoreError};
use providers::Sequence;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::resolvers::Resolvers;

/// How often each process looks whether a new document was recorded.
const TICK: Duration = Duration::from_secs(1);
/// At most this many numbers of one series are asked of the provider in one look.
pub const LOOKUPS_PER_SERIES: usize = 40;

/// Where one recorded document stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Posted: its money is in the books.
    Booked,
    /// Recorded, its job not done yet (running, or waiting for a retry).
    Fetching,
    /// Recorded, and in the dead letter for a person.
    DeadLetter,
    /// Recorded, and closed by a person without posting (abandoned or discarded).
    Closed,
}

/// One series (one account at the provider) as the books hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    pub name: String,
    /// Every number recorded, with where it stands.
    pub held: BTreeMap<u64, Held>,
    /// The numbers between the first and the last recorded that are not.
    pub missing: Vec<u64>,
    /// When the oldest missing number was first known to be missing: when the first document
    /// after it was received.
    pub gap_since: Option<DateTime<Utc>>,
    /// The external id of the document others are looked up like: the last booked, else the
    /// last recorded.
    like: String,
}

impl Series {
    pub fn first(&self) -> Option<u64> {
        self.held.keys().next().copied()
    }

    pub fn last(&self) -> Option<u64> {
        self.held.keys().next_back().copied()
    }

    pub fn count(&self, held: Held) -> usize {
        self.held.values().filter(|h| **h == held).count()
    }
}

/// The search for `source`'s document events.
fn documents(source: &SourceName, sequence: &dyn Sequence) -> EventFilter {
    EventFilter {
        source: Some(source.to_string()),
        external_id_prefix: Some(sequence.prefix().to_owned()),
        ..EventFilter::default()
    }
}

/// A recorded document: where it stands, when it was received, its external id.
type Recorded = (Held, DateTime<Utc>, String);

/// Every series of `source`'s documents, from the events recorded (by name).
pub async fn series(
    store: &Store,
    source: &SourceName,
    sequence: &dyn Sequence,
) -> Result<Vec<Series>, StoreError> {
    let filter = documents(source, sequence);
    let mut found: BTreeMap<String, BTreeMap<u64, Recorded>> = BTreeMap::new();
    let mut cursor = None;
    loop {
        let page = store
            .search_events(&filter, PageRequest::new(cursor, Some(u32::MAX)))
            .await?;
        for event in page.items {
            let Some((name, number)) = sequence.place(&event.external_id) else {
                continue;
            };
            let held = match (event.status.as_str(), event.dead_letter_id) {
                ("posted", _) => Held::Booked,
                ("recorded", Some(_)) => Held::DeadLetter,
                ("recorded", None) => Held::Fetching,
                _ => Held::Closed,
            };
            found
                .entry(name)
                .or_default()
                .insert(number, (held, event.received_at, event.external_id));
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(found
        .into_iter()
        .map(|(name, numbers)| {
            let mut missing = Vec::new();
            let mut gap_since = None;
            let mut before = None;
            for (&number, (_, received, _)) in &numbers {
                if let Some(before) = before
                    && number > before + 1
                {
                    missing.extend(before + 1..number);
                    gap_since =
                        Some(gap_since.map_or(*received, |s: DateTime<Utc>| s.min(*received)));
                }
                before = Some(number);
            }
            let like = numbers
                .values()
                .rev()
                .find(|(held, _, _)| *held == Held::Booked)
                .or_else(|| numbers.values().next_back())
                .map(|(_, _, key)| key.clone())
                .unwrap_or_default();
            Series {
                name,
                held: numbers
                    .into_iter()
                    .map(|(n, (held, _, _))| (n, held))
                    .collect(),
                missing,
                gap_since,
                like,
            }
        })
        .collect())
}

/// What one look at a source's documents did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Looked {
    /// The external ids of the documents found and recorded by this look.
    pub recorded: Vec<String>,
    /// Missing numbers still missing after the look, over every series.
    pub missing: usize,
    /// How long the oldest gap has been known, if there is one.
    pub oldest_gap: Option<chrono::TimeDelta>,
}

/// Looks once at `source`'s documents: asks the provider for every number missing between two
/// recorded (the lowest [`LOOKUPS_PER_SERIES`] of each series) and, when `onward`, for the
/// numbers after each series' last until one is not served; records each it serves.
pub async fn look(
    store: &Store,
    source: &SourceName,
    sequence: &dyn Sequence,
    onward: bool,
    lock_timeout_ms: u64,
) -> Result<Looked, PostError> {
    let mut looked = Looked::default();
    for series in series(store, source, sequence).await? {
        let Some(like) = store.event_by_key(source.as_str(), &series.like).await? else {
            continue;
        };
        let Some(Ok(like)) = like.facts.as_ref().and_then(Trigger::from_stored) else {
            warn!(%source, series = %series.name, key = %series.like, "a document's stored facts do not read");
            continue;
        };
        let mut still_missing = 0;
        let mut gap = series.gap_since;
        for &number in series.missing.iter().take(LOOKUPS_PER_SERIES) {
            match sequence.probe(&like, number).await? {
                Some(found) => looked
                    .recorded
                    .extend(record(store, source, found, lock_timeout_ms).await?),
                None => still_missing += 1,
            }
        }
        still_missing += series.missing.len().saturating_sub(LOOKUPS_PER_SERIES);
        if still_missing == 0 {
            gap = None;
        }
        if onward && let Some(last) = series.last() {
            for number in last + 1..=last + LOOKUPS_PER_SERIES as u64 {
                match sequence.probe(&like, number).await? {
                    Some(found) => {
                        looked
                            .recorded
                            .extend(record(store, source, found, lock_timeout_ms).await?);
                    }
                    None => break,
                }
            }
        }
        looked.missing += still_missing;
        if let Some(since) = gap {
            let age = Utc::now() - since;
            looked.oldest_gap = Some(looked.oldest_gap.map_or(age, |a| a.max(age)));
        }
    }
    Ok(looked)
}

/// Records a document the provider serves: its external id if this call recorded it.
async fn record(
    store: &Store,
    source: &SourceName,
    (key, named): (String, ledger::trigger::Named),
    lock_timeout_ms: u64,
) -> Result<Option<String>, PostError> {
    let external_id = ExternalId::parse(&key)
        .map_err(|e| PostError::CorruptEvent(format!("a document's key {key:?}: {e}")))?;
    let event = NewEvent {
        source: source.clone(),
        external_id,
        payload: named.trigger.to_stored().to_string(),
        content: Content::Named(named),
    };
    let recorded = store.record_new(&[&event], lock_timeout_ms).await?;
    Ok(matches!(recorded.first(), Some(Some(_))).then_some(key))
}

/// One process's watch over a source's documents.
#[derive(Debug, Default)]
struct Watch {
    /// The newest document event seen (by id).
    newest: Option<i64>,
    /// When the last look asked for the numbers after each series' last.
    onward_at: Option<Instant>,
}

/// Looks at every source with a sequence until `shutdown`: at once, when a new document was
/// recorded (for the numbers missing before it), and every `Sequence::every` (for those and the
/// ones after the last).
pub(crate) async fn sequence_loop(
    store: Store,
    resolvers: Resolvers,
    lock_timeout_ms: u64,
    shutdown: CancellationToken,
) {
    let mut watches: HashMap<SourceName, Watch> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        for (source, sequence) in resolvers.sequences() {
            let watch = watches.entry(source.clone()).or_default();
            let newest = match newest(&store, &source, sequence).await {
                Ok(newest) => newest,
                Err(error) => {
                    warn!(%source, %error, "looking for new documents failed");
                    continue;
                }
            };
            let onward = watch
                .onward_at
                .is_none_or(|at| at.elapsed() >= sequence.every());
            if !onward && newest == watch.newest {
                continue;
            }
            // Looked at again on the next tick that has something new, or when due, whether this
            // look succeeds or not.
            watch.newest = newest;
            if onward {
                watch.onward_at = Some(Instant::now());
            }
            match look(&store, &source, sequence, onward, lock_timeout_ms).await {
                Ok(looked) => {
                    for key in &looked.recorded {
                        info!(%source, %key, "a document no notification named was found and recorded");
                    }
                    metrics::counter!("settle_feed_documents_found_total", "source" => source.to_string())
                        .increment(looked.recorded.len() as u64);
                    metrics::gauge!("settle_feed_gaps", "source" => source.to_string())
                        .set(looked.missing as f64);
                    metrics::gauge!("settle_feed_gap_age_seconds", "source" => source.to_string())
                        .set(
                            looked
                                .oldest_gap
                                .map_or(0.0, |age| age.num_seconds().max(0) as f64),
                        );
                }
                Err(error) => {
                    warn!(%source, %error, "looking for the documents not booked failed");
                }
            }
        }
    }
}

/// The id of `source`'s newest document event.
async fn newest(
    store: &Store,
    source: &SourceName,
    sequence: &dyn Sequence,
) -> Result<Option<i64>, StoreError> {
    let filter = documents(source, sequence);
    let page = store
        .search_events(&filter, PageRequest::new(None, Some(1)))
        .await?;
    Ok(page.items.first().map(|e| e.id))
}
