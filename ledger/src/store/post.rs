//! Posting a job's event, written once for both backends over [`PostingRows`]: an event's own
//! facts (one entry) or the movements its job resolved through the provider's API (an entry per
//! movement), one job in its own transaction or a group in one (group commit), each job answered
//! as if it were posted alone. What to write is decided here, in `store::prepare`,
//! `store::movements` and `crate::posting`; the backends read and write rows and decide nothing.

use std::collections::HashMap;

use tracing::debug;

use crate::event::Kind;
use crate::job::{AttemptOutcome, JobRef, Posted};
use crate::post_error::PostError;
use crate::posting::{self, Line, PostingRules};
use crate::resolved::MovementEntry;
use crate::state::EventStatus;
use crate::state::{StateMachine, Transition};
use crate::store::StoreError;
use crate::store::failures::FailureRows;
use crate::store::movements::{Existing, Plan, ResolvedPost, lookup_keys, paid_out_by, plan};
use crate::store::prepare::{EventRow, Prepared, Ready, prepare};

/// The rows a posting reads and writes. Every method but [`PostingRows::begin_posting`] runs in
/// the caller's transaction; an `Err` from any of them leaves that transaction to be abandoned.
pub(super) trait PostingRows: FailureRows {
    /// Begins a posting transaction; waiting longer than `lock_timeout_ms` for a row lock fails
    /// it, where the backend has row locks.
    async fn begin_posting(&self, lock_timeout_ms: u64) -> Result<Self::Tx, StoreError>;

    /// Reads the events, locked against other writers, taking their locks in id order.
    async fn lock_events(tx: &mut Self::Tx, ids: &[i64]) -> Result<Vec<EventRow>, StoreError>;

    /// Reads the events, locked against changes but shared with other readers that lock them
    /// the same way (the chunks of one job posting side by side), in id order.
    async fn share_events(tx: &mut Self::Tx, ids: &[i64]) -> Result<Vec<EventRow>, StoreError>;

    /// The entry under a source key: its id and request fingerprint.
    async fn entry_by_key(
        tx: &mut Self::Tx,
        key: &str,
    ) -> Result<Option<(i64, String)>, StoreError>;

    /// The source key of the entry that reverses `entry_id`, if one does.
    async fn reversing_key(tx: &mut Self::Tx, entry_id: i64) -> Result<Option<String>, StoreError>;

    /// An entry's lines, in order.
    async fn entry_lines(tx: &mut Self::Tx, entry_id: i64) -> Result<Vec<Line>, PostError>;

    /// For events the transaction holds locked and saw `recorded`, each at most once: writes
    /// each entry and its lines, makes the `posted` move (pointing each event at its entry),
    /// ends each attempt `posted` and deletes each job's queue row. A posting whose source key is
    /// taken (by an earlier entry, or an earlier posting of the same call) writes nothing.
    /// Answers the new entries' ids by event id.
    async fn insert_postings(
        tx: &mut Self::Tx,
        postings: &[Posting<'_>],
        posted: Transition<EventStatus>,
    ) -> Result<HashMap<i64, i64>, PostError>;

    /// For events whose entries are already written: makes the `posted` move (pointing each at
    /// its entry), ends each attempt `posted` and deletes each job's queue row. Answers how many
    /// events made the move.
    async fn mark_posted(
        tx: &mut Self::Tx,
        marks: &[Mark<'_>],
        posted: Transition<EventStatus>,
    ) -> Result<u64, StoreError>;

    /// The job's event no longer waits for it: its queue row goes.
    async fn complete_job(tx: &mut Self::Tx, job_id: &str) -> Result<(), StoreError>;

    /// The entries already posted under `keys`, with the payout each is tied to.
    async fn existing_entries(
        tx: &mut Self::Tx,
        keys: &[&str],
    ) -> Result<HashMap<String, Existing>, StoreError>;

    /// Writes each movement's entry and lines, in the order given. Answers the ids of the
    /// entries written by source key; a source key taken meanwhile writes nothing.
    async fn insert_movement_entries(
        tx: &mut Self::Tx,
        to_write: &[(i64, &MovementEntry)],
    ) -> Result<HashMap<String, i64>, StoreError>;

    /// Ties entries to payouts, each entry at most once, in the order given. Answers how many
    /// were found tied to a different payout than asked.
    async fn tie_entries(tx: &mut Self::Tx, ties: &[Tie<'_>]) -> Result<u64, StoreError>;
}

/// A new entry for an event, as one posting writes it.
pub(super) struct Posting<'a> {
    pub(super) job: &'a JobRef,
    pub(super) attempt: u32,
    pub(super) ready: &'a Ready,
    /// The entry this one reverses (a payout failure's).
    pub(super) reverses: Option<i64>,
}

/// An event posted to an entry already written, and the attempt that posted it.
pub(super) struct Mark<'a> {
    pub(super) job: &'a JobRef,
    pub(super) attempt: u32,
    /// The entry the event points at (`None` for an event that resolved to no movement).
    pub(super) entry_id: Option<i64>,
}

/// An entry tied to the payout that paid it out.
pub(super) struct Tie<'a> {
    pub(super) entry_id: i64,
    pub(super) source: &'a str,
    pub(super) payout_id: &'a str,
    pub(super) event_id: i64,
}

/// How posting one locked event ended, with the transaction still usable. (An `Err` beside it
/// means the database failed and the transaction must be abandoned.)
enum Locked {
    Posted(Posted),
    /// Refused for the event's own reason; nothing was written.
    Refused(PostError),
}

/// The move every posting makes.
fn posted_move() -> Result<Transition<EventStatus>, StoreError> {
    EventStatus::Recorded.transition(EventStatus::Posted)
}

fn missing_event(job: &JobRef) -> PostError {
    PostError::CorruptEvent(format!("event {} does not exist", job.event_id))
}

/// A group shares one transaction only when no event is in it twice (a job delivered twice at
/// once runs on its own, where the event's lock orders the two).
pub(super) fn distinct_events<'a>(jobs: impl Iterator<Item = &'a JobRef>) -> bool {
    let mut seen = std::collections::HashSet::new();
    jobs.into_iter().all(|job| seen.insert(job.event_id.get()))
}

/// Runs `group` over all the items in one transaction if it can, else each item alone with
/// `alone`, so one item's trouble is only its own. Postings and attempt starts both go through
/// it; a group whose answer must not be tried again alone says so by answering `Ok` with each
/// item's error.
macro_rules! group_or_alone {
    ($items:expr, $jobs:expr, $what:literal, $group:expr, |$item:ident| $alone:expr) => {{
        let items = $items;
        if items.len() > 1 && distinct_events($jobs) {
            match $group.await {
                Ok(results) => return results,
                Err(error) => debug!(%error, jobs = items.len(), concat!("group ", $what, " failed; one by one")),
            }
        }
        let mut results = Vec::with_capacity(items.len());
        for $item in items {
            results.push($alone.await);
        }
        results
    }};
}
pub(super) use group_or_alone;

/// Posts one job's event in its own transaction.
pub(super) async fn post<B: PostingRows>(
    backend: &B,
    job: &JobRef,
    attempt: u32,
    rules: &PostingRules,
    lock_timeout_ms: u64,
) -> Result<Posted, PostError> {
    let mut tx = backend.begin_posting(lock_timeout_ms).await?;
    let Some(row) = B::lock_events(&mut tx, &[job.event_id.get()]).await?.pop() else {
        return Err(missing_event(job));
    };
    match post_locked::<B>(&mut tx, job, attempt, &row, rules).await? {
        Locked::Posted(posted) => {
            backend.commit(tx).await?;
            Ok(posted)
        }
        Locked::Refused(error) => Err(error),
    }
}

/// Posts several jobs' events in one transaction (one commit for all), each exactly as [`post`]
/// would: a job refused for its own reason (invalid facts, a replay conflict, a dependency not
/// posted yet) writes nothing and does not stop the others. If the database fails anywhere in
/// the group, nothing of it is kept and each job is posted in its own transaction instead.
pub(super) async fn post_many<B: PostingRows>(
    backend: &B,
    posts: &[(JobRef, u32)],
    rules: &PostingRules,
    lock_timeout_ms: u64,
) -> Vec<Result<Posted, PostError>> {
    group_or_alone!(
        posts,
        posts.iter().map(|(job, _)| job),
        "posting",
        post_together(backend, posts, rules, lock_timeout_ms),
        |post_one| post(backend, &post_one.0, post_one.1, rules, lock_timeout_ms)
    )
}

/// The group's transaction: the events locked at once, every new entry written by one call of
/// [`PostingRows::insert_postings`], then one by one what needs more than that (an event settled
/// already, a payout failure's reversal, a source key already taken), in the group's order.
async fn post_together<B: PostingRows>(
    backend: &B,
    posts: &[(JobRef, u32)],
    rules: &PostingRules,
    lock_timeout_ms: u64,
) -> Result<Vec<Result<Posted, PostError>>, PostError> {
    let mut tx = backend.begin_posting(lock_timeout_ms).await?;
    let ids: Vec<i64> = posts.iter().map(|(job, _)| job.event_id.get()).collect();
    let rows: HashMap<i64, EventRow> = B::lock_events(&mut tx, &ids)
        .await?
        .into_iter()
        .map(|row| (row.id, row))
        .collect();
    let mut results: Vec<Option<Result<Posted, PostError>>> =
        (0..posts.len()).map(|_| None).collect();
    let mut fresh = Vec::new();
    let mut one_by_one = Vec::new();
    for (i, (job, _)) in posts.iter().enumerate() {
        let Some(row) = rows.get(&job.event_id.get()) else {
            results[i] = Some(Err(missing_event(job)));
            continue;
        };
        match prepare(job, row, rules) {
            Prepared::Refused(error) => results[i] = Some(Err(error)),
            Prepared::Ready(ready) if ready.event.kind() != Kind::PayoutFailed => {
                match ready.balanced() {
                    Ok(()) => fresh.push((i, ready)),
                    Err(error) => results[i] = Some(Err(error)),
                }
            }
            Prepared::Ready(_) | Prepared::Settled => one_by_one.push(i),
        }
    }
    let postings: Vec<Posting<'_>> = fresh
        .iter()
        .map(|(i, ready)| Posting {
            job: &posts[*i].0,
            attempt: posts[*i].1,
            ready,
            reverses: None,
        })
        .collect();
    let entries = B::insert_postings(&mut tx, &postings, posted_move()?).await?;
    for (i, ready) in &fresh {
        match entries.get(&posts[*i].0.event_id.get()) {
            Some(&entry_id) => {
                results[*i] = Some(Ok(Posted::New {
                    entry_id,
                    received_at: ready.received_at,
                }))
            }
            None => one_by_one.push(*i),
        }
    }
    one_by_one.sort_unstable();
    for i in one_by_one {
        let (job, attempt) = &posts[i];
        let row = &rows[&job.event_id.get()];
        results[i] = Some(
            match post_locked::<B>(&mut tx, job, *attempt, row, rules).await? {
                Locked::Posted(posted) => Ok(posted),
                Locked::Refused(error) => Err(error),
            },
        );
    }
    if results.iter().any(Option::is_none) {
        // Every job must have its own answer in its own place, or none is given.
        return Err(
            StoreError::Corrupt("a group posting left a job without an answer".into()).into(),
        );
    }
    backend.commit(tx).await?;
    Ok(results.into_iter().flatten().collect())
}

/// The posting of one event whose row the caller's transaction holds locked: settled already,
/// invalid, a new entry, a replay of the same entry, or a replay conflict.
async fn post_locked<B: PostingRows>(
    tx: &mut B::Tx,
    job: &JobRef,
    attempt: u32,
    row: &EventRow,
    rules: &PostingRules,
) -> Result<Locked, PostError> {
    let mut ready = match prepare(job, row, rules) {
        Prepared::Settled => {
            B::finish_attempt(tx, job, attempt, AttemptOutcome::Settled, None).await?;
            B::complete_job(tx, &job.job_id).await?;
            return Ok(Locked::Posted(Posted::AlreadySettled));
        }
        Prepared::Refused(error) => return Ok(Locked::Refused(error)),
        Prepared::Ready(ready) => ready,
    };
    let reverses = if ready.event.kind() == Kind::PayoutFailed {
        match reverse_payout::<B>(tx, &mut ready).await {
            Ok(paid_id) => Some(paid_id),
            Err(PostError::Store(error)) => return Err(PostError::Store(error)),
            Err(refused) => return Ok(Locked::Refused(refused)),
        }
    } else {
        None
    };
    if let Err(refused) = ready.balanced() {
        return Ok(Locked::Refused(refused));
    }
    let posting = Posting {
        job,
        attempt,
        ready: &ready,
        reverses,
    };
    let entries = B::insert_postings(tx, &[posting], posted_move()?).await?;
    if let Some(&entry_id) = entries.get(&job.event_id.get()) {
        return Ok(Locked::Posted(Posted::New {
            entry_id,
            received_at: ready.received_at,
        }));
    }
    // The source key is taken: the same facts replayed, or a conflicting replay.
    let Some((entry_id, stored)) = B::entry_by_key(tx, &ready.draft.source_key).await? else {
        return Err(StoreError::Corrupt(format!(
            "posting {} wrote nothing, yet no entry has its source key",
            ready.draft.source_key
        ))
        .into());
    };
    if let Err(conflict) =
        posting::replay_or_conflict(&stored, &ready.fingerprint, &ready.draft.source_key)
    {
        return Ok(Locked::Refused(conflict));
    }
    let mark = Mark {
        job,
        attempt,
        entry_id: Some(entry_id),
    };
    let posted = posted_move()?;
    if B::mark_posted(tx, &[mark], posted).await? != 1 {
        return Err(posted.stale().into());
    }
    Ok(Locked::Posted(Posted::Replayed {
        entry_id,
        received_at: ready.received_at,
    }))
}

/// `payout_failed` posts the reversal of its payout's `payout_paid` entry, line for line, once:
/// replaces the draft's lines with the reversal's and answers the reversed entry's id. The
/// payout not posted yet, or its entry reversed by another event, refuses it.
async fn reverse_payout<B: PostingRows>(
    tx: &mut B::Tx,
    ready: &mut Ready,
) -> Result<i64, PostError> {
    let payout_id = ready
        .event
        .payout_id()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let paid_key = posting::source_key(&ready.source, Kind::PayoutPaid, &payout_id);
    let Some((paid_id, _)) = B::entry_by_key(tx, &paid_key).await? else {
        return Err(PostError::DependencyNotReady { payout_id });
    };
    if let Some(reversed_by) = B::reversing_key(tx, paid_id).await?
        && reversed_by != ready.draft.source_key
    {
        return Err(PostError::ReversalMismatch {
            payout_id,
            detail: "that payout's entry is already reversed".into(),
        });
    }
    let paid_lines = B::entry_lines(tx, paid_id).await?;
    ready.draft.lines = posting::reverse_payout(
        &payout_id,
        &paid_lines,
        &ready.draft,
        ready.event.currency(),
    )?;
    Ok(paid_id)
}

/// Posts one job's resolved movements in its own transaction. A movement posted by another
/// transaction while this one ran is compared in a second try, before anything is written.
pub(super) async fn post_resolved<B: PostingRows>(
    backend: &B,
    post: &ResolvedPost<'_>,
    lock_timeout_ms: u64,
) -> Result<Posted, PostError> {
    for _ in 0..2 {
        match post_resolved_together(backend, std::slice::from_ref(post), lock_timeout_ms).await {
            Err(PostError::Store(StoreError::Raced)) => continue,
            Err(error) => return Err(error),
            Ok(mut results) => return results.pop().unwrap_or(Err(missing_event(post.job))),
        }
    }
    Err(StoreError::Raced.into())
}

/// [`post_resolved`] for several jobs in one transaction, each answered as if alone; if the
/// group cannot be answered that way (a database failure, a movement posted by another
/// transaction meanwhile), each is posted on its own instead.
pub(super) async fn post_resolved_many<B: PostingRows>(
    backend: &B,
    posts: &[ResolvedPost<'_>],
    lock_timeout_ms: u64,
) -> Vec<Result<Posted, PostError>> {
    group_or_alone!(
        posts,
        posts.iter().map(|p| p.job),
        "of resolved postings",
        post_resolved_together(backend, posts, lock_timeout_ms),
        |post_one| post_resolved(backend, post_one, lock_timeout_ms)
    )
}

/// The events locked, what is posted under their movements' keys read, the group planned
/// (`store::movements::plan`), then the new entries written, the entries tied to their payout
/// and the events marked posted.
async fn post_resolved_together<B: PostingRows>(
    backend: &B,
    posts: &[ResolvedPost<'_>],
    lock_timeout_ms: u64,
) -> Result<Vec<Result<Posted, PostError>>, PostError> {
    let mut tx = backend.begin_posting(lock_timeout_ms).await?;
    let ids: Vec<i64> = posts.iter().map(|p| p.job.event_id.get()).collect();
    // Chunks that are not their job's last change nothing of their events: they share the
    // events' locks, so a job's chunks post side by side; the last takes its event's alone.
    let rows = match posts.iter().all(|p| p.resolved.partial) {
        true => B::share_events(&mut tx, &ids).await?,
        false => B::lock_events(&mut tx, &ids).await?,
    };
    let rows: HashMap<i64, EventRow> = rows.into_iter().map(|row| (row.id, row)).collect();
    let existing = B::existing_entries(&mut tx, &lookup_keys(posts)).await?;
    let statuses: Vec<Option<(&str, &str, Option<&serde_json::Value>)>> = posts
        .iter()
        .map(|p| {
            rows.get(&p.job.event_id.get())
                .map(|r| (r.status.as_str(), r.job_id.as_str(), r.facts.as_ref()))
        })
        .collect();
    let Plan {
        mut results,
        settled,
        ready,
        mut to_write,
        counts,
    } = plan(posts, &statuses, &existing);
    for &i in &settled {
        let post = &posts[i];
        B::finish_attempt(
            &mut tx,
            post.job,
            post.attempt,
            AttemptOutcome::Settled,
            None,
        )
        .await?;
        B::complete_job(&mut tx, &post.job.job_id).await?;
    }
    // In key order, as every writer takes them: two groups sharing keys never wait on each
    // other in a cycle.
    to_write.sort_by(|a, b| a.1.movement.source_key().cmp(b.1.movement.source_key()));
    let written = B::insert_movement_entries(&mut tx, &to_write).await?;
    if written.len() != to_write.len() {
        // Another transaction posted one of these movements meanwhile: its facts must be
        // compared before anything is kept.
        return Err(StoreError::Raced.into());
    }
    let mut entries: HashMap<&str, i64> = existing
        .iter()
        .map(|(key, e)| (key.as_str(), e.entry_id))
        .collect();
    entries.extend(written.iter().map(|(key, &id)| (key.as_str(), id)));
    let mut ties = Vec::new();
    let mut marks = Vec::with_capacity(ready.len());
    for &i in &ready {
        let post = &posts[i];
        let ids: Vec<i64> = post
            .resolved
            .entries
            .iter()
            .filter_map(|e| entries.get(e.movement.source_key()).copied())
            .collect();
        for (entry, &entry_id) in post.resolved.entries.iter().zip(&ids) {
            if let Some(payout_id) = paid_out_by(post, entry) {
                ties.push(Tie {
                    entry_id,
                    source: source_of(entry.movement.source_key()),
                    payout_id,
                    event_id: post.job.event_id.get(),
                });
            }
        }
        if !post.resolved.partial {
            marks.push(Mark {
                job: post.job,
                attempt: post.attempt,
                entry_id: ids.first().copied(),
            });
        }
    }
    // In entry order, for the same reason as the entries' keys.
    ties.sort_unstable_by_key(|t| t.entry_id);
    ties.dedup_by_key(|t| t.entry_id);
    if !ties.is_empty() && B::tie_entries(&mut tx, &ties).await? > 0 {
        // Tied to another payout by another transaction meanwhile.
        return Err(StoreError::Raced.into());
    }
    let posted = posted_move()?;
    if B::mark_posted(&mut tx, &marks, posted).await? != marks.len() as u64 {
        // The transaction holds each event's lock and saw it recorded: this cannot happen.
        return Err(posted.stale().into());
    }
    for (&i, &(written, existing)) in ready.iter().zip(&counts) {
        results[i] = Some(Ok(Posted::Movements {
            written,
            existing,
            received_at: rows[&posts[i].job.event_id.get()].received_at,
        }));
    }
    if results.iter().any(Option::is_none) {
        return Err(StoreError::Corrupt(
            "a group of resolved postings left a job without an answer".into(),
        )
        .into());
    }
    backend.commit(tx).await?;
    Ok(results.into_iter().flatten().collect())
}

/// A journal line as stored (`entry_lines`), its currency checked.
pub(super) fn stored_line(
    account: String,
    currency: &str,
    amount: rust_decimal::Decimal,
) -> Result<Line, PostError> {
    Ok(Line {
        account,
        currency: crate::money::Currency::parse(currency)
            .map_err(|e| PostError::CorruptEvent(e.to_string()))?,
        amount,
    })
}

/// The source a source key belongs to (its first segment).
pub(super) fn source_of(source_key: &str) -> &str {
    source_key.split('/').next().unwrap_or(source_key)
}
