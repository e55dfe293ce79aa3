//! The posting transaction of one event or a group: prepare the entry from the locked event
//! (replay or conflict against what is stored, a payout failure's reversal), then write the
//! group's entries, lines, attempt ends and queue rows in one statement.

use rust_decimal::Decimal;
use sqlx::postgres::PgConnection;

use super::jobs::{complete_job, finish_attempt, set_event_status};
use crate::event::{Kind, SettlementEvent};
use crate::ids::SourceName;
use crate::job::{AttemptOutcome, JobRef, PostError, Posted};
use crate::money::Currency;
use crate::posting::{self, EntryDraft, Line, PostingRules};
use crate::record::EventStatus;
use crate::state::StateMachine;
use crate::store::prepare::{EventRow, Prepared, Ready, prepare};
use crate::store::{STATEMENT_BYTES_MAX, StoreError, split_by_bytes};

/// How posting one locked event ended, with the transaction still usable. (An `Err` beside it
/// means the database failed and the transaction must be abandoned.)
pub(super) enum Locked {
    Posted(Posted),
    /// Refused for the event's own reason; nothing was written.
    Refused(PostError),
}

impl Ready {
    pub(super) fn posting<'a>(
        &'a self,
        job: &'a JobRef,
        attempt: u32,
        reverses: Option<i64>,
    ) -> Posting<'a> {
        Posting {
            job,
            attempt,
            source: &self.source,
            event: &self.event,
            draft: &self.draft,
            fingerprint: &self.fingerprint,
            reverses,
        }
    }
}

/// The posting of one event whose row the caller's transaction holds locked: settled already,
/// invalid, a new entry, a replay of the same entry, or a replay conflict.
pub(super) async fn post_locked(
    tx: &mut PgConnection,
    job: &JobRef,
    attempt: u32,
    row: &EventRow,
    rules: &PostingRules,
) -> Result<Locked, PostError> {
    let mut ready = match prepare(job, row, rules) {
        Prepared::Settled => {
            finish_attempt(tx, job, attempt, AttemptOutcome::Settled, None).await?;
            complete_job(tx, &job.job_id).await?;
            return Ok(Locked::Posted(Posted::AlreadySettled));
        }
        Prepared::Refused(error) => return Ok(Locked::Refused(error)),
        Prepared::Ready(ready) => ready,
    };
    let reverses = if ready.event.kind() == Kind::PayoutFailed {
        match reverse_payout(tx, &ready.source, &ready.event, &mut ready.draft).await {
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
    // Any error here came from the database (the transaction is aborted).
    let entries = insert_postings(tx, &[ready.posting(job, attempt, reverses)]).await?;
    if let Some(&entry_id) = entries.get(&job.event_id.get()) {
        return Ok(Locked::Posted(Posted::New {
            entry_id,
            received_at: ready.received_at,
        }));
    }
    // The source key is taken: the same facts replayed (or a conflicting replay).
    let (entry_id, stored): (i64, String) =
        sqlx::query_as("SELECT id, request_fingerprint FROM journal_entries WHERE source_key = $1")
            .bind(&ready.draft.source_key)
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::from)?;
    if let Err(conflict) =
        posting::replay_or_conflict(&stored, &ready.fingerprint, &ready.draft.source_key)
    {
        return Ok(Locked::Refused(conflict));
    }
    set_event_status(
        tx,
        job.event_id,
        EventStatus::Recorded.transition(EventStatus::Posted)?,
        Some(entry_id),
    )
    .await?;
    finish_attempt(tx, job, attempt, AttemptOutcome::Posted, None).await?;
    complete_job(tx, &job.job_id).await?;
    Ok(Locked::Posted(Posted::Replayed {
        entry_id,
        received_at: ready.received_at,
    }))
}

/// `payout_failed` posts the reversal of its payout's `payout_paid` entry, line for line.
/// Returns the reversed entry's id; replaces the draft's lines with the reversal's.
async fn reverse_payout(
    conn: &mut PgConnection,
    source: &SourceName,
    event: &SettlementEvent,
    draft: &mut EntryDraft,
) -> Result<i64, PostError> {
    let payout_id = event
        .payout_id()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let paid_key = posting::source_key(source, Kind::PayoutPaid, &payout_id);
    let paid: Option<i64> =
        sqlx::query_scalar("SELECT id FROM journal_entries WHERE source_key = $1")
            .bind(&paid_key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::from)?;
    let Some(paid_id) = paid else {
        return Err(PostError::DependencyNotReady { payout_id });
    };
    let rows: Vec<(String, String, Decimal)> = sqlx::query_as(
        "SELECT account, currency, amount FROM journal_lines WHERE entry_id = $1 ORDER BY line_no",
    )
    .bind(paid_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    let mut paid_lines = Vec::with_capacity(rows.len());
    for (account, currency, amount) in rows {
        let currency =
            Currency::parse(&currency).map_err(|e| PostError::CorruptEvent(e.to_string()))?;
        paid_lines.push(Line {
            account,
            currency,
            amount,
        });
    }
    let reversal = posting::reverse_payout(&payout_id, &paid_lines, draft, event.currency())?;
    draft.lines = reversal;
    Ok(paid_id)
}

/// A new entry for an event, as one posting writes it.
pub(super) struct Posting<'a> {
    job: &'a JobRef,
    attempt: u32,
    source: &'a SourceName,
    event: &'a SettlementEvent,
    draft: &'a EntryDraft,
    fingerprint: &'a str,
    reverses: Option<i64>,
}

impl Posting<'_> {
    /// About what this posting adds to its statement's parameters (a little more than it does,
    /// in binary array encoding: about 430 bytes for a charge with three lines).
    fn bytes(&self) -> usize {
        // Each value's length prefix and the fixed-size ones, then per line likewise.
        const FIELDS: usize = 13 * 8;
        const LINE: usize = 5 * 8 + 16;
        let texts = [
            self.job.job_id.as_str(),
            self.draft.source_key.as_str(),
            self.source.as_str(),
            self.event.kind().as_str(),
            self.event.movement_id().as_str(),
            self.event.payout_id().map_or("", |id| id.as_str()),
            self.event.reference().map_or("", |r| r.as_str()),
            self.fingerprint,
            self.draft.description.as_str(),
        ];
        let lines: usize = self
            .draft
            .lines
            .iter()
            .map(|line| line.account.len() + LINE)
            .sum();
        texts.iter().map(|t| t.len()).sum::<usize>() + FIELDS + lines
    }
}

/// For events whose rows the caller's transaction holds locked (still recorded, each at most
/// once): inserts each entry and its lines, points each event at its entry as posted, finishes
/// each attempt as posted, and deletes each job's queue row, in as few statements as
/// `STATEMENT_BYTES_MAX` allows. A posting whose source key is taken (by an earlier entry, or by
/// an earlier posting of the same call) writes nothing at all. Answers the new entries' ids by
/// event id.
pub(super) async fn insert_postings(
    conn: &mut PgConnection,
    postings: &[Posting<'_>],
) -> Result<std::collections::HashMap<i64, i64>, PostError> {
    let sizes: Vec<usize> = postings.iter().map(Posting::bytes).collect();
    let mut entries = std::collections::HashMap::with_capacity(postings.len());
    for run in split_by_bytes(&sizes, STATEMENT_BYTES_MAX) {
        entries.extend(insert_postings_in_one_statement(conn, &postings[run]).await?);
    }
    Ok(entries)
}

async fn insert_postings_in_one_statement(
    conn: &mut PgConnection,
    postings: &[Posting<'_>],
) -> Result<std::collections::HashMap<i64, i64>, PostError> {
    if postings.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    // Every event of the statement moves recorded -> posted.
    let posted_move = EventStatus::Recorded.transition(EventStatus::Posted)?;
    let event_ids: Vec<i64> = postings.iter().map(|p| p.job.event_id.get()).collect();
    let job_ids: Vec<&str> = postings.iter().map(|p| p.job.job_id.as_str()).collect();
    let source_keys: Vec<&str> = postings
        .iter()
        .map(|p| p.draft.source_key.as_str())
        .collect();
    let sources: Vec<&str> = postings.iter().map(|p| p.source.as_str()).collect();
    let kinds: Vec<&str> = postings.iter().map(|p| p.event.kind().as_str()).collect();
    let movement_ids: Vec<&str> = postings
        .iter()
        .map(|p| p.event.movement_id().as_str())
        .collect();
    let fingerprints: Vec<&str> = postings.iter().map(|p| p.fingerprint).collect();
    let descriptions: Vec<&str> = postings
        .iter()
        .map(|p| p.draft.description.as_str())
        .collect();
    let attempts: Vec<i32> = postings.iter().map(|p| p.attempt as i32).collect();
    let payout_ids: Vec<Option<&str>> = postings
        .iter()
        .map(|p| p.event.payout_id().map(|id| id.as_str()))
        .collect();
    let references: Vec<Option<&str>> = postings
        .iter()
        .map(|p| p.event.reference().map(|r| r.as_str()))
        .collect();
    let dates: Vec<chrono::NaiveDate> = postings.iter().map(|p| p.draft.effective_date).collect();
    let reverses: Vec<Option<i64>> = postings.iter().map(|p| p.reverses).collect();
    let lines = postings
        .iter()
        .flat_map(|p| p.draft.lines.iter().zip(1..).map(move |(l, n)| (p, l, n)));
    let (mut line_events, mut line_nos, mut accounts, mut currencies, mut amounts) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (posting, line, line_no) in lines {
        line_events.push(posting.job.event_id.get());
        line_nos.push(line_no);
        accounts.push(line.account.as_str());
        currencies.push(line.currency.code());
        amounts.push(line.amount);
    }
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
        "WITH input AS (
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                                  $11::date[], $12::text[], $13::bigint[])
                 WITH ORDINALITY AS i(event_id, job_id, attempt, source_key, source, kind, movement_id,
                                      payout_id, reference, fingerprint, effective_date, description,
                                      reverses, ord)
         ), entry AS (
             INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id, payout_id, reference,
                                          request_fingerprint, effective_date, description, reverses_entry_id)
             SELECT source_key, event_id, source, kind, movement_id, payout_id, reference,
                    fingerprint, effective_date, description, reverses
             FROM input ORDER BY ord
             ON CONFLICT (source_key) DO NOTHING
             RETURNING id, event_id
         ), posting AS (
             SELECT entry.id AS entry_id, input.* FROM entry JOIN input USING (event_id)
         ), lines AS (
             INSERT INTO journal_lines (entry_id, line_no, account, currency, amount)
             SELECT posting.entry_id, line.line_no, line.account, line.currency, line.amount
             FROM unnest($14::bigint[], $15::int[], $16::text[], $17::text[], $18::numeric[])
                  AS line(event_id, line_no, account, currency, amount)
             JOIN posting USING (event_id)
         ), posted AS (
             UPDATE settlement_events e
             SET status = $19, status_changed_at = now(), posted_entry_id = posting.entry_id
             FROM posting WHERE e.id = posting.event_id AND e.status = $20
             RETURNING e.id
         ), finished AS (
             UPDATE job_attempts a SET finished_at = now(), outcome = $21
             FROM posting WHERE a.job_id = posting.job_id AND a.attempt = posting.attempt
         ), done AS (
             DELETE FROM apalis.jobs j USING posting WHERE j.id = posting.job_id
         )
         SELECT event_id, entry_id, (SELECT count(*) FROM posted) FROM posting",
    )
    .bind(&event_ids)
    .bind(&job_ids)
    .bind(&attempts)
    .bind(&source_keys)
    .bind(&sources)
    .bind(&kinds)
    .bind(&movement_ids)
    .bind(&payout_ids)
    .bind(&references)
    .bind(&fingerprints)
    .bind(&dates)
    .bind(&descriptions)
    .bind(&reverses)
    .bind(&line_events)
    .bind(&line_nos)
    .bind(&accounts)
    .bind(&currencies)
    .bind(&amounts)
    .bind(posted_move.to().label())
    .bind(posted_move.from().label())
    .bind(AttemptOutcome::Posted.as_str())
    .fetch_all(&mut *conn)
    .await
    .map_err(|error| reversal_conflict(error, postings))?;
    // The caller holds each event's lock and saw it recorded: this cannot happen.
    if rows
        .first()
        .is_some_and(|&(_, _, posted)| posted != rows.len() as i64)
    {
        return Err(posted_move.stale().into());
    }
    Ok(rows
        .into_iter()
        .map(|(event, entry, _)| (event, entry))
        .collect())
}

/// A second reversal of the same payout entry violates `journal_entries_reversed_once`: that is
/// the reversing posting's own refusal (reversals are posted one at a time).
fn reversal_conflict(error: sqlx::Error, postings: &[Posting<'_>]) -> PostError {
    if let sqlx::Error::Database(db) = &error
        && db.constraint() == Some("journal_entries_reversed_once")
        && let Some(reversal) = postings.iter().find(|p| p.reverses.is_some())
    {
        return PostError::ReversalMismatch {
            payout_id: reversal
                .event
                .payout_id()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            detail: "that payout's entry is already reversed".into(),
        };
    }
    PostError::Store(error.into())
}
