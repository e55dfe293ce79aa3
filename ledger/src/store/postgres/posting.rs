//! The posting primitives on PostgreSQL: the group's new entries, lines, `posted` moves, attempt
//! ends and queue-row deletes written by one set-based statement per `STATEMENT_BYTES_MAX` of
//! parameters (what to write is decided in `store::post`).

use std::collections::HashMap;

use rust_decimal::Decimal;
use sqlx::postgres::PgConnection;

use super::PgStore;
use super::jobs::{begin_with_lock_timeout, complete_job, lock_events};
use super::movements::{existing_entries, insert_entries, mark_posted, tie_entries};
use crate::job::AttemptOutcome;
use crate::post_error::PostError;
use crate::posting::Line;
use crate::resolved::MovementEntry;
use crate::state::EventStatus;
use crate::state::{StateMachine, Transition};
use crate::store::movements::Existing;
use crate::store::post::{Mark, Posting, PostingRows, Tie, stored_line};
use crate::store::prepare::EventRow;
use crate::store::{STATEMENT_BYTES_MAX, StoreError, split_by_bytes};

/// About what a posting adds to its statement's parameters (a little more than it does, in
/// binary array encoding: about 430 bytes for a charge with three lines).
fn posting_bytes(posting: &Posting<'_>) -> usize {
    // Each value's length prefix and the fixed-size ones, then per line likewise.
    const FIELDS: usize = 13 * 8;
    const LINE: usize = 5 * 8 + 16;
    let texts = [
        posting.job.job_id.as_str(),
        posting.ready.draft.source_key.as_str(),
        posting.ready.source.as_str(),
        posting.ready.event.kind().as_str(),
        posting.ready.event.movement_id().as_str(),
        posting.ready.event.payout_id().map_or("", |id| id.as_str()),
        posting.ready.event.reference().map_or("", |r| r.as_str()),
        posting.ready.fingerprint.as_str(),
        posting.ready.draft.description.as_str(),
    ];
    let lines: usize = posting
        .ready
        .draft
        .lines
        .iter()
        .map(|line| line.account.len() + LINE)
        .sum();
    texts.iter().map(|t| t.len()).sum::<usize>() + FIELDS + lines
}

/// `PostingRows::insert_postings`: in as few statements as `STATEMENT_BYTES_MAX` allows.
pub(super) async fn insert_postings(
    conn: &mut PgConnection,
    postings: &[Posting<'_>],
    posted_move: Transition<EventStatus>,
) -> Result<HashMap<i64, i64>, PostError> {
    let sizes: Vec<usize> = postings.iter().map(posting_bytes).collect();
    let mut entries = HashMap::with_capacity(postings.len());
    for run in split_by_bytes(&sizes, STATEMENT_BYTES_MAX) {
        entries.extend(insert_postings_in_one_statement(conn, &postings[run], posted_move).await?);
    }
    Ok(entries)
}

async fn insert_postings_in_one_statement(
    conn: &mut PgConnection,
    postings: &[Posting<'_>],
    posted_move: Transition<EventStatus>,
) -> Result<HashMap<i64, i64>, PostError> {
    if postings.is_empty() {
        return Ok(HashMap::new());
    }
    let event_ids: Vec<i64> = postings.iter().map(|p| p.job.event_id.get()).collect();
    let job_ids: Vec<&str> = postings.iter().map(|p| p.job.job_id.as_str()).collect();
    let source_keys: Vec<&str> = postings
        .iter()
        .map(|p| p.ready.draft.source_key.as_str())
        .collect();
    let sources: Vec<&str> = postings.iter().map(|p| p.ready.source.as_str()).collect();
    let kinds: Vec<&str> = postings
        .iter()
        .map(|p| p.ready.event.kind().as_str())
        .collect();
    let movement_ids: Vec<&str> = postings
        .iter()
        .map(|p| p.ready.event.movement_id().as_str())
        .collect();
    let fingerprints: Vec<&str> = postings
        .iter()
        .map(|p| p.ready.fingerprint.as_str())
        .collect();
    let descriptions: Vec<&str> = postings
        .iter()
        .map(|p| p.ready.draft.description.as_str())
        .collect();
    let attempts: Vec<i32> = postings.iter().map(|p| p.attempt as i32).collect();
    let payout_ids: Vec<Option<&str>> = postings
        .iter()
        .map(|p| p.ready.event.payout_id().map(|id| id.as_str()))
        .collect();
    let references: Vec<Option<&str>> = postings
        .iter()
        .map(|p| p.ready.event.reference().map(|r| r.as_str()))
        .collect();
    let dates: Vec<chrono::NaiveDate> = postings
        .iter()
        .map(|p| p.ready.draft.effective_date)
        .collect();
    let reverses: Vec<Option<i64>> = postings.iter().map(|p| p.reverses).collect();
    let lines = postings.iter().flat_map(|p| {
        p.ready
            .draft
            .lines
            .iter()
            .zip(1..)
            .map(move |(l, n)| (p, l, n))
    });
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
                .ready
                .event
                .payout_id()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            detail: "that payout's entry is already reversed".into(),
        };
    }
    PostError::Store(error.into())
}

impl PostingRows for PgStore {
    async fn begin_posting(&self, lock_timeout_ms: u64) -> Result<Self::Tx, StoreError> {
        begin_with_lock_timeout(&self.pool, lock_timeout_ms).await
    }

    async fn lock_events(tx: &mut Self::Tx, ids: &[i64]) -> Result<Vec<EventRow>, StoreError> {
        lock_events(tx, ids).await
    }

    async fn share_events(tx: &mut Self::Tx, ids: &[i64]) -> Result<Vec<EventRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, source, status, job_id, facts, validation_error, received_at
             FROM settlement_events WHERE id = ANY($1) ORDER BY id FOR SHARE",
        )
        .bind(ids)
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn entry_by_key(
        tx: &mut Self::Tx,
        key: &str,
    ) -> Result<Option<(i64, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, request_fingerprint FROM journal_entries WHERE source_key = $1",
        )
        .bind(key)
        .fetch_optional(&mut **tx)
        .await?)
    }

    async fn reversing_key(tx: &mut Self::Tx, entry_id: i64) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT source_key FROM journal_entries WHERE reverses_entry_id = $1",
        )
        .bind(entry_id)
        .fetch_optional(&mut **tx)
        .await?)
    }

    async fn entry_lines(tx: &mut Self::Tx, entry_id: i64) -> Result<Vec<Line>, PostError> {
        let rows: Vec<(String, String, Decimal)> = sqlx::query_as(
            "SELECT account, currency, amount FROM journal_lines WHERE entry_id = $1 ORDER BY line_no",
        )
        .bind(entry_id)
        .fetch_all(&mut **tx)
        .await
        .map_err(StoreError::from)?;
        rows.into_iter()
            .map(|(account, currency, amount)| stored_line(account, &currency, amount))
            .collect()
    }

    async fn insert_postings(
        tx: &mut Self::Tx,
        postings: &[Posting<'_>],
        posted: Transition<EventStatus>,
    ) -> Result<HashMap<i64, i64>, PostError> {
        insert_postings(tx, postings, posted).await
    }

    async fn mark_posted(
        tx: &mut Self::Tx,
        marks: &[Mark<'_>],
        posted: Transition<EventStatus>,
    ) -> Result<u64, StoreError> {
        mark_posted(tx, marks, posted).await
    }

    async fn complete_job(tx: &mut Self::Tx, job_id: &str) -> Result<(), StoreError> {
        complete_job(tx, job_id).await
    }

    async fn existing_entries(
        tx: &mut Self::Tx,
        keys: &[&str],
    ) -> Result<HashMap<String, Existing>, StoreError> {
        existing_entries(tx, keys).await
    }

    async fn insert_movement_entries(
        tx: &mut Self::Tx,
        to_write: &[(i64, &MovementEntry)],
    ) -> Result<HashMap<String, i64>, StoreError> {
        insert_entries(tx, to_write).await
    }

    async fn tie_entries(tx: &mut Self::Tx, ties: &[Tie<'_>]) -> Result<u64, StoreError> {
        tie_entries(tx, ties).await
    }
}
