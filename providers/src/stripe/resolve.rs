//! Resolving a Stripe event to the balance transactions it names, through Stripe's API, outside
//! any transaction: the fetched facts are checked and drafted into entries by the posting rules,
//! and the store posts them (each by its key, so fetching twice is harmless).

use std::sync::Arc;

use futures::future::BoxFuture;
use chrono::{DateTime, Utc};
use ledger::feed::Window;
use ledger::posting::Accounts;
use ledger::resolved::Resolved;
use ledger::trigger::Trigger;
use ledger::{Amount, Currency, PostError, ProviderError, SourceName};

use super::api::StripeApi;
use super::config::Connect;
use super::balance_transaction::{self, BalanceTransaction};
use super::trigger::StripeTrigger;
use crate::budget::{Budget, Priority};
use crate::seam::{Chunks, FeedSettings, Listed, ProviderLedger, Resolution, Resolve};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

/// One Stripe source's resolving half: its API client, and its feed when it reads one.
#[derive(Debug)]
pub(crate) struct Resolver {
    pub(crate) api: Arc<StripeApi>,
    pub(crate) feed: Option<FeedSettings>,
    /// Whether connected accounts are posted: then each has a feed of its own.
    pub(crate) connect: Connect,
}

impl Resolve for Resolver {
    fn resolve<'a>(
        &'a self,
        trigger: &'a Trigger,
        accounts: &'a Accounts,
    ) -> BoxFuture<'a, Result<Resolution, PostError>> {
        Box::pin(async move {
            if let Some(window) = Window::from_trigger(trigger) {
                let window = window.map_err(PostError::CorruptEvent)?;
                let overlap = self.feed.map(|feed| feed.overlap);
                return Ok(Resolution::Chunked(Box::new(WindowChunks::new(
                    self.api.clone(),
                    accounts.clone(),
                    window,
                    overlap,
                ))));
            }
            let trigger =
                StripeTrigger::from_trigger(trigger).map_err(PostError::CorruptEvent)?;
            // The platform's feed books what a webhook names by id; a connected account's
            // money has no feed here, and is fetched by id.
            let by_id = self.feed.is_none() || trigger.account.is_some();
            let transactions = fetch(&self.api, &trigger, by_id).await?;
            let resolved = draft(
                self.api.source(),
                accounts,
                trigger.account.as_deref(),
                trigger.payout_listing.as_deref(),
                &transactions,
            )?;
            Ok(Resolution::Whole(resolved))
        })
    }

    fn budget(&self) -> Option<&Budget> {
        Some(self.api.budget())
    }

    fn feed(&self) -> Option<FeedSettings> {
        self.feed
    }

    fn feed_accounts(&self) -> BoxFuture<'_, Result<Vec<String>, PostError>> {
        Box::pin(async move {
            if self.feed.is_none() || self.connect != Connect::Post {
                return Ok(Vec::new());
            }
            Ok(self.api.connected_accounts().await?)
        })
    }

    fn ledger(&self) -> Option<&dyn ProviderLedger> {
        Some(self)
    }
}

impl ProviderLedger for Resolver {
    fn balance(&self) -> BoxFuture<'_, Result<Vec<(Currency, Amount)>, PostError>> {
        Box::pin(async move {
            let balance = self.api.balance(None).await?;
            balance
                .held()
                .into_iter()
                .map(|(currency, minor)| amount_of(&currency, minor))
                .collect::<Result<_, _>>()
                .map_err(PostError::from)
        })
    }

    fn listed(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'_, Result<Vec<Listed>, PostError>> {
        Box::pin(async move {
            let source = self.api.source();
            let mut listed = Vec::new();
            let mut failed = None;
            each_listed(&self.api, from.timestamp(), to.timestamp(), |transaction| {
                match amount_of(&transaction.currency, transaction.net) {
                    Ok((currency, net)) => listed.push(Listed {
                        key: balance_transaction::source_key(source, None, &transaction.id),
                        id: transaction.id.clone(),
                        category: transaction.category().to_owned(),
                        currency,
                        net,
                        created: DateTime::from_timestamp(transaction.created, 0)
                            .unwrap_or_default(),
                    }),
                    Err(error) => failed = Some(error),
                }
            })
            .await?;
            // Newest first, as Stripe lists them (the parts arrive in any order).
            listed.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| b.id.cmp(&a.id)));
            match failed {
                Some(error) => Err(error.into()),
                None => Ok(listed),
            }
        })
    }
}

/// Stripe's lower-case currency and minor units, as settle's.
fn amount_of(currency: &str, minor: i64) -> Result<(Currency, Amount), ProviderError> {
    let currency = Currency::parse(&currency.to_ascii_uppercase())
        .map_err(|e| ProviderError::Response(format!("balance: {e}")))?;
    let amount = balance_transaction::EXPONENTS
        .amount(minor, currency)
        .map_err(|e| ProviderError::Response(format!("balance: {e}")))?;
    Ok((currency, amount))
}

/// Calls `each` with every balance transaction Stripe lists as created in `[from, to)`, as a
/// window's are listed ([`list_window`]: not in Stripe's order).
async fn each_listed(
    api: &Arc<StripeApi>,
    from: i64,
    to: i64,
    mut each: impl FnMut(&BalanceTransaction),
) -> Result<(), ProviderError> {
    let (pages, mut received) = mpsc::channel(PAGES_AHEAD);
    let listing = list_window(api.clone(), None, vec![((from, to), Priority::Now)], pages);
    let taking = async {
        while let Some(page) = received.recv().await {
            page.iter().for_each(&mut each);
        }
    };
    let (listed, ()) = tokio::join!(listing, taking);
    listed
}

/// At most this many requests of one window's listing are in flight at once: more than a burst
/// has seconds listed side by side (a second's pages come one after another), so every chain
/// of them waits on the budget rather than some running after the others, one round trip at a
/// time.
const LISTINGS_MAX: usize = 32;
/// At most this many parts the rest of a span is cut into after its first page.
const PARTS_MAX: i64 = 32;
/// At most this many parts the rest of a span is cut into after a page within one second (a
/// burst): each part whose own first page is as dense is cut again, into its seconds, so a
/// burst's seconds are all being listed two requests after its first page, and the quiet
/// seconds around it cost a request per part, not one each.
const DENSE_PARTS: i64 = 8;
/// About this many pages a part holds by its first page's density (each part's last page is
/// short: the fewer parts, the fewer requests beyond the listing's own; a denser part than it
/// seemed is cut again). A backfill's day of 100 pages is cut into four parts; its seven windows'
/// 28 parts, listed side by side, still spend the whole budget.
const PAGES_PER_PART: i64 = 32;
/// A part that has listed at least this many pages of its own, when at most
/// [`SLACK_WAITING`] requests of the process wait for the budget, has its rest cut into parts
/// as if it were dense ([`rest_of_window`]): it is among the last chains of a listing, whose
/// pages would otherwise come one round trip at a time while the budget goes unspent.
const SLACK_AFTER_PAGES: usize = 2;
const SLACK_WAITING: usize = 1;
/// At most this many pages of a window listed and not yet posted (what a window holds in
/// memory beyond the page being posted).
const PAGES_AHEAD: usize = 16;

/// At most about this many listed transactions post in one chunk (one transaction of the
/// database): pages waiting to be posted are taken together up to it.
const CHUNK_MAX: usize = 500;

/// A listed page, on its way to be posted.
type Page = Vec<BalanceTransaction>;

/// A feed window's balance transactions, a listing page at a time: its spans
/// ([`Window::spans`]) listed side by side, each cut by `created` into parts as its pages show
/// how dense it is ([`list_span`]), with at most [`LISTINGS_MAX`] requests in flight, so a long
/// window (a catch-up after an outage, a backfill's day) is read at the budget's pace rather
/// than one request's round trip at a time, while its pages are posted as they come. The window
/// posts (its last chunk, not partial) only once every part has been listed to its end; a
/// listing that fails fails the chunk, and the window is listed again from its start.
struct WindowChunks {
    source: SourceName,
    accounts: Accounts,
    /// The connected account whose window this is (`None`: the platform's).
    account: Option<String>,
    pages: mpsc::Receiver<Page>,
    listing: JoinHandle<Result<(), ProviderError>>,
}

impl WindowChunks {
    /// `overlap`: the feed's (what a window lists again of the last one's; `None`, a source
    /// with no feed, lists a backfill's windows only).
    fn new(
        api: Arc<StripeApi>,
        accounts: Accounts,
        window: Window,
        overlap: Option<std::time::Duration>,
    ) -> Self {
        let overlap = overlap
            .and_then(|o| chrono::TimeDelta::from_std(o).ok())
            .unwrap_or_default();
        // A backfill's window reads history, and a window's second listing what was listed
        // already: what nobody has listed yet (the feed's windows reading anew, webhooks) goes
        // first.
        let (pages, received) = mpsc::channel(PAGES_AHEAD);
        let source = api.source().clone();
        let spans: Vec<((i64, i64), Priority)> = window
            .spans_listed_before(overlap)
            .into_iter()
            .map(|((from, to), again)| {
                let priority = match window.seq == 0 || again {
                    true => Priority::History,
                    false => Priority::Now,
                };
                ((from.timestamp(), to.timestamp()), priority)
            })
            .collect();
        let account = window.account;
        let accounts = match &account {
            Some(account) => accounts.for_connected_account(account),
            None => accounts,
        };
        let listing = tokio::spawn(list_window(api, account.clone(), spans, pages));
        Self {
            source,
            accounts,
            account,
            pages: received,
            listing,
        }
    }

    /// How the listing ended, once every page it sent has been taken.
    async fn listed(&mut self) -> Result<(), PostError> {
        match (&mut self.listing).await {
            Ok(listed) => listed.map_err(PostError::from),
            Err(error) => Err(ProviderError::Response(format!("a window's listing: {error}")).into()),
        }
    }
}

impl Drop for WindowChunks {
    fn drop(&mut self) {
        self.listing.abort();
    }
}

impl Chunks for WindowChunks {
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Resolved, PostError>> {
        Box::pin(async move {
            let Some(mut page) = self.pages.recv().await else {
                // Every page has been posted: the window posts once its listing has ended well.
                self.listed().await?;
                return Ok(Resolved {
                    entries: Vec::new(),
                    payout: None,
                    partial: false,
                });
            };
            // Pages listed while the last chunk posted go with this one: a window listed faster
            // than it posts (a catch-up) posts in fewer, larger transactions.
            while page.len() < CHUNK_MAX
                && let Ok(more) = self.pages.try_recv()
            {
                page.extend(more);
            }
            let mut resolved =
                draft_listed(&self.source, &self.accounts, self.account.as_deref(), &page)?;
            // The last page of an ended listing posts the window with it.
            let last = self.listing.is_finished() && self.pages.is_empty();
            if last {
                self.listed().await?;
            }
            resolved.partial = !last;
            metrics::counter!("settle_feed_transactions_listed_total", "source" => self.source.to_string())
                .increment(page.len() as u64);
            Ok(resolved)
        })
    }
}

/// Lists the balance transactions created in `spans` into `pages`, each span as
/// [`list_span`] does, with at most [`LISTINGS_MAX`] requests (each with the page it answered
/// until that page is handed on) at once. Ends early (well) when the receiver is gone; the first
/// failing request's error ends it.
async fn list_window(
    api: Arc<StripeApi>,
    account: Option<String>,
    spans: Vec<((i64, i64), Priority)>,
    pages: mpsc::Sender<Page>,
) -> Result<(), ProviderError> {
    let listing = Listing {
        api,
        account,
        pages,
        turns: Semaphore::new(LISTINGS_MAX),
    };
    futures::future::try_join_all(
        spans
            .into_iter()
            .map(|(span, priority)| list_span(&listing, Part { span, after: None }, priority)),
    )
    .await
    .map(drop)
}

/// What every part of one window's listing shares.
struct Listing {
    api: Arc<StripeApi>,
    account: Option<String>,
    pages: mpsc::Sender<Page>,
    /// A turn per request in flight (held until its page is handed on, so a window listed
    /// faster than it posts holds at most this many pages beyond the channel).
    turns: Semaphore,
}

/// One part of a window: the transactions created in `span`, after `after`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Part {
    span: (i64, i64),
    after: Option<String>,
}

/// Lists `part` page after page at `priority`; after each page, what remains ([`rest_of_window`]): when the
/// pages show the rest holds many pages, it is cut into parts (what remains of the page's last
/// second, and the seconds before it), each listed the same way, side by side. So a listing
/// spreads over as many requests at once as its density calls for, wherever in the span the
/// density lies, and a sparse one is read page after page.
fn list_span<'a>(
    listing: &'a Listing,
    part: Part,
    priority: Priority,
) -> BoxFuture<'a, Result<(), ProviderError>> {
    Box::pin(async move {
        let Part { span, mut after } = part;
        let mut listed = 0;
        loop {
            let turn = listing
                .turns
                .acquire()
                .await
                .map_err(|_| ProviderError::Response("a window's listing was closed".into()))?;
            let (page, more) = listing
                .api
                .window_page(
                    listing.account.as_deref(),
                    span,
                    after.as_deref(),
                    priority,
                )
                .await?;
            let newest = page.first().map(|t| t.created);
            let oldest = page.last().map(|t| (t.id.clone(), t.created));
            let sent = listing.pages.send(page).await;
            drop(turn);
            if sent.is_err() || !more {
                return Ok(());
            }
            listed += 1;
            let ((id, at), newest) = oldest.zip(newest).ok_or_else(|| {
                ProviderError::Response("an empty listing page says it has more".into())
            })?;
            let slack = listed >= SLACK_AFTER_PAGES
                && listing.api.budget().waiting() <= SLACK_WAITING;
            // The page held a page's worth over `[at, newest]`.
            let parts = rest_of_window((span.0, newest + 1), at, &id, slack);
            if parts.is_empty() {
                after = Some(id);
                continue;
            }
            return futures::future::try_join_all(
                parts
                    .into_iter()
                    .map(|part| list_span(listing, part, priority)),
            )
            .await
            .map(drop);
        }
    })
}

/// How to list what remains of a span from `from` once a page of movements created in
/// `[at, to)` ended with `after`, created at `at` (Stripe lists newest first): nothing (page
/// after page, as it is) unless the rest holds at least two parts' worth of pages by the page's
/// density, or the page fell within one second (at least a page a second: the rest is cut into
/// its seconds, or into [`DENSE_PARTS`] parts when it holds more, each cut again as its own
/// pages show; a second's pages come one after another, so even one second before `at` is
/// listed beside the rest of `at`); then the rest of second `at` after `after`, and
/// `[from, at)` cut into parts of whole seconds, about [`PAGES_PER_PART`] pages each (at most
/// [`PARTS_MAX`]). When the budget has `slack` (the listing is ending), a rest of at least two
/// pages is cut as a dense one is, into at most [`DENSE_PARTS`] parts.
fn rest_of_window((from, to): (i64, i64), at: i64, after: &str, slack: bool) -> Vec<Part> {
    let rest = at - from;
    if rest <= 0 {
        return Vec::new();
    }
    let first = (to - at).max(1);
    let pages = (rest + first - 1) / first;
    let (count, least) = match first {
        1 => (rest.min(DENSE_PARTS), 1),
        _ if slack => (pages.min(DENSE_PARTS), 2),
        _ => ((pages + PAGES_PER_PART - 1) / PAGES_PER_PART, 2),
    };
    let count = count.min(PARTS_MAX).min(rest);
    if count < least {
        return Vec::new();
    }
    let mut parts = vec![Part {
        span: (at, at + 1),
        after: Some(after.to_owned()),
    }];
    parts.extend((0..count).map(|i| Part {
        span: (from + rest * i / count, from + rest * (i + 1) / count),
        after: None,
    }));
    parts
}

mod draft;

pub(super) use draft::draft_listed;
use draft::{draft, fetch};

#[cfg(test)]
mod tests;
