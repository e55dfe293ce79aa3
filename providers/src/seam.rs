//! The seam: what a provider implements, and everything the rest of settle knows of one.
//!
//! - [`Provider`]: its name, its configuration keys, and the builders of its two halves for one
//!   configured source;
//! - [`Receive`]: the ingress half, on a delivery's raw bytes and headers: verify, then name what
//!   the delivery is about (events with their facts, a [`Trigger`] for what must be fetched, or
//!   [`Ignore`]d, saying why);
//! - [`Resolve`]: the workers' half, outside any transaction: fetch what a trigger names from the
//!   provider, check it, and draft one entry per movement by the posting rules ([`Resolution`]);
//! - the tools beside them: signed sample deliveries for `settle loadgen`, a part of `settle
//!   demo` ([`crate::demo::DemoPart`]), fuzz targets.
//!
//! A provider never reads or writes the store: it answers values, and settle records and posts
//! them.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use http::HeaderMap;
use ledger::posting::Accounts;
use ledger::resolved::Resolved;
use ledger::trigger::{Named, Trigger};
use ledger::{Amount, Currency, NewEvent, PostError};

use crate::budget::Budget;
use crate::config::{Key, Section, SectionError};
use crate::demo::{DemoError, DemoPart};
use crate::signature::SignatureError;

/// A payment provider: what a source's `provider = "..."` selects.
pub trait Provider: Send + Sync + 'static {
    /// The name `provider = "..."` selects it by (also the name of its module).
    fn name(&self) -> &'static str;

    /// The keys of a `[[sources]]` table it reads beside those every source has; any other key
    /// in one of its sources' tables is refused.
    fn keys(&self) -> &'static [Key];

    /// The tags its triggers are stored under (see [`Trigger`]); no two providers share one.
    fn trigger_tags(&self) -> &'static [&'static str];

    /// How the ingress receives one source's deliveries: its secrets turned into keys the
    /// provider's way and every key of its table checked.
    fn receiver(&self, section: &Section<'_>) -> Result<Arc<dyn Receive>, SectionError>;

    /// How workers resolve what one source's events name; `None` when its events carry their
    /// own facts. Credentials named by an environment variable are read here.
    fn resolver(&self, section: &Section<'_>) -> Result<Option<Arc<dyn Resolve>>, SectionError>;

    /// What a person running one source should know about how it books (said at start, by
    /// `settle config check` and on the dashboard's sources page); by default nothing.
    fn notes(&self, section: &Section<'_>) -> Result<Vec<String>, SectionError> {
        let _ = section;
        Ok(Vec::new())
    }

    /// A delivery of one made-up sale for `settle loadgen`, signed with `secret` the provider's
    /// way: event `id` of `minor` units, or with `conflicting` other facts under the same id.
    /// The provider's own API is not called to make it.
    fn sample(&self, secret: &str, id: &str, minor: i64, conflicting: bool) -> Sample;

    /// The external id settle records for sample event `id` (the id itself unless the provider
    /// builds its own).
    fn sample_external_id(&self, id: &str) -> String {
        id.to_owned()
    }

    /// Starts this provider's part of `settle demo` (a fake of its API, if it needs one).
    fn demo(&self) -> BoxFuture<'static, Result<Box<dyn DemoPart>, DemoError>>;

    /// Its fuzz targets (`fuzz/fuzz_targets/<name>.rs`, seeds in `fuzz/seeds/<name>`).
    fn fuzz_targets(&self) -> &'static [FuzzTarget] {
        &[]
    }
}

/// A signed delivery: headers and body, as the provider sends them.
#[derive(Clone, Debug)]
pub struct Sample {
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// A fuzz target: arbitrary bytes in, a panic only when a property fails.
#[derive(Clone, Copy, Debug)]
pub struct FuzzTarget {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// The ingress half of one configured source.
pub trait Receive: Send + Sync + fmt::Debug {
    /// What can be checked before the body is read (a signature header present and readable,
    /// a signed timestamp within tolerance); by default nothing.
    fn precheck(&self, headers: &HeaderMap, now: i64) -> Result<(), SignatureError> {
        let _ = (headers, now);
        Ok(())
    }

    /// Verifies the delivery on its raw bytes, then (only if authentic) reads it.
    fn receive(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Adapted, Rejection>;

    /// How a delivery that was kept (or ignored) is answered.
    fn acknowledgement(&self) -> Acknowledgement {
        Acknowledgement::PerEvent
    }
}

/// How a source's kept deliveries are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acknowledgement {
    /// `{"status": "recorded" | "duplicate" | "ignored", ...}`, and a conflict is 409.
    PerEvent,
    /// The same answer to every delivery kept, conflicts included (a provider whose retry queue
    /// holds back every later delivery behind one it keeps failing): a conflict surfaces on the
    /// ops side instead.
    Fixed {
        content_type: &'static str,
        body: &'static str,
    },
}

/// What an authentic delivery turned out to be.
#[derive(Debug)]
pub enum Adapted {
    /// Authentic, but nothing to book: acknowledged, nothing recorded.
    Ignored(Ignore),
    /// One event (or one per item of a batch), each valid, kept with its validation error, or
    /// naming what its job must fetch.
    Events(Vec<NewEvent>),
}

/// Why an authentic delivery is acknowledged without being recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignore {
    /// Not a settlement-relevant type.
    NotSettlement,
    /// About a connected account of a source that does not post them.
    ConnectedAccount,
    /// Of the other mode (a test-mode event at a live source, or the reverse).
    OtherMode,
    /// An update that names no money movement the event's object did not name before.
    NoMovement,
    /// Of an account at the provider (a merchant account) the source does not book.
    OtherAccount,
}

impl Ignore {
    pub fn as_str(self) -> &'static str {
        match self {
            Ignore::NotSettlement => "not_settlement",
            Ignore::ConnectedAccount => "connected_account",
            Ignore::OtherMode => "other_mode",
            Ignore::NoMovement => "no_movement",
            Ignore::OtherAccount => "other_account",
        }
    }
}

/// An authentic delivery whose event key cannot be read: 400, nothing written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unparseable(pub &'static str);

/// Why a delivery was turned away before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error(transparent)]
    Unparseable(#[from] Unparseable),
}

/// The workers' half of one configured source.
pub trait Resolve: Send + Sync + fmt::Debug {
    /// Fetches what `trigger` names and drafts an entry per movement to `accounts` (the
    /// source's). Outside any transaction; a failure is classified where it is born.
    fn resolve<'a>(
        &'a self,
        trigger: &'a Trigger,
        accounts: &'a Accounts,
    ) -> BoxFuture<'a, Result<Resolution, PostError>>;

    /// The request budget the fleet shares for this source, if its calls have one.
    fn budget(&self) -> Option<&Budget> {
        None
    }

    /// How this source's feed is swept, if the provider lists its movements and the source
    /// reads them: settle then opens a window (`ledger::feed::Window`) after the last one posted
    /// every `every`, or at once when a webhook wakes it, and hands each to [`Resolve::resolve`]
    /// as its trigger.
    fn feed(&self) -> Option<FeedSettings> {
        None
    }

    /// The source's accounts at the provider that keep books of their own (a platform's
    /// connected accounts, when the source posts them), each swept by a feed of its own beside the
    /// source's: a window of one names it (`ledger::feed::Window::account`). Asked again every
    /// `FeedSettings::every`.
    fn feed_accounts(&self) -> BoxFuture<'_, Result<Vec<String>, PostError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// The provider's own ledger of this source, if it can be read: its balance and the net of
    /// its listed movements, to reconcile the books with.
    fn ledger(&self) -> Option<&dyn ProviderLedger> {
        None
    }

    /// The source's numbered documents, if the provider numbers what it publishes in series
    /// and serves each by its number (ARCHITECTURE.md, Sequences).
    fn sequence(&self) -> Option<&dyn Sequence> {
        None
    }
}

/// Documents a provider numbers 1, 2, 3... in series (one series per account at the provider)
/// and serves by number, each recorded as an event of the source: settle notices a number
/// missing between two it recorded, and the one after the last, and asks the provider for them,
/// so a document whose notification never came is still booked.
pub trait Sequence: Send + Sync {
    /// The longest wait between two looks for the next document when no new one woke settle.
    fn every(&self) -> std::time::Duration;

    /// What the external ids of the documents' events start with.
    fn prefix(&self) -> &'static str;

    /// The series and number of a document's event, read from its external id; `None` for an
    /// event that is not one of the numbered documents.
    fn place(&self, external_id: &str) -> Option<(String, u64)>;

    /// Asks the provider for document `number` of the series of `like` (the trigger of a
    /// document of the series settle recorded): the external id and facts to record it under
    /// if the provider serves it (the ones its notification would carry, so the two are one
    /// event), `None` if it does not (yet).
    fn probe<'a>(
        &'a self,
        like: &'a Trigger,
        number: u64,
    ) -> BoxFuture<'a, Result<Option<(String, Named)>, PostError>>;
}

/// What the provider's own books say.
pub trait ProviderLedger: Send + Sync {
    /// What the provider holds for the source now, per currency: what `{source}:balance` books.
    fn balance(&self) -> BoxFuture<'_, Result<Vec<(Currency, Amount)>, PostError>>;

    /// Every movement the provider lists as created in `[from, to)`.
    fn listed(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Vec<Listed>, PostError>>;
}

/// A movement as the provider lists it, with the key its entry is booked under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The source key of its entry.
    pub key: String,
    /// The provider's id.
    pub id: String,
    /// The provider's category.
    pub category: String,
    pub currency: Currency,
    /// What it did to the provider balance.
    pub net: Amount,
    pub created: DateTime<Utc>,
}

/// How often a source's feed is swept, and how far back each window reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedSettings {
    /// The longest wait between two windows when no webhook wakes the feed.
    pub every: std::time::Duration,
    /// How far before the last window's end the next one starts again: a movement the
    /// provider lists late (created before the window's end, visible after it) is still read.
    pub overlap: std::time::Duration,
}

/// What a trigger resolved to.
pub enum Resolution {
    /// Every movement at once: posted in one transaction (grouped with other jobs').
    Whole(Resolved),
    /// More than one transaction should hold (a settlement report of a million lines): posted
    /// chunk by chunk, each in its own transaction.
    Chunked(Box<dyn Chunks>),
}

impl fmt::Debug for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resolution::Whole(resolved) => f.debug_tuple("Whole").field(resolved).finish(),
            Resolution::Chunked(_) => f.write_str("Chunked(..)"),
        }
    }
}

/// A resolution read a chunk at a time (from a file the provider downloaded, or a listing's
/// pages).
pub trait Chunks: Send {
    /// The next chunk. Every chunk but the last is `partial`; the caller stops after the last.
    /// A chunk may be empty.
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Resolved, PostError>>;
}
