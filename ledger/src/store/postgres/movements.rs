//! The primitives of posting resolved movements on PostgreSQL (what to write is decided in
//! `store::post` and `store::movements`): entries written by their source keys in set-based
//! statements, their ties to payouts, and the events marked posted.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;

use super::PgStore;
use crate::job::AttemptOutcome;
use crate::resolved::MovementEntry;
use crate::state::EventStatus;
use crate::state::{StateMachine, Transition};
use crate::store::movements::Existing;
use crate::store::post::{Mark, Tie, source_of};
use crate::store::{STATEMENT_BYTES_MAX, StoreError, split_by_bytes};

impl crate::store::driver::Fleet for PgStore {
    async fn grant_roles(&self) -> Result<(), StoreError> {
        self.grant(true).await
    }

    async fn keep_worker_alive(&self, name: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE apalis.workers SET last_seen = now() WHERE id = $1 AND worker_type = $2",
        )
        .bind(name)
        .bind(crate::job::POST_SETTLEMENT_QUEUE)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn live_workers(
        &self,
        window: std::time::Duration,
        own_prefix: &str,
    ) -> Result<u32, StoreError> {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM apalis.workers
             WHERE worker_type = $1 AND last_seen > now() - $2 * interval '1 millisecond'
               AND NOT starts_with(id, $3)",
        )
        .bind(crate::job::POST_SETTLEMENT_QUEUE)
        .bind(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
        .bind(own_prefix)
        .fetch_one(&self.pool)
        .await?;
        Ok(u32::try_from(others).unwrap_or(u32::MAX).saturating_add(1))
    }
}

/// `PostingRows::existing_entries`.
pub(super) async fn existing_entries(
    conn: &mut PgConnection,
    keys: &[&str],
) -> Result<HashMap<String, Existing>, StoreError> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(String, i64, String, Option<String>)> = sqlx::query_as(
        "SELECT je.source_key, je.id, je.request_fingerprint, pi.payout_id
         FROM journal_entries je LEFT JOIN payout_items pi ON pi.entry_id = je.id
         WHERE je.source_key = ANY($1)",
    )
    .bind(keys)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(key, entry_id, fingerprint, payout)| {
            (
                key,
                Existing {
                    entry_id,
                    fingerprint,
                    payout,
                },
            )
        })
        .collect())
}

/// `PostingRows::insert_movement_entries`: one statement per run of `STATEMENT_BYTES_MAX`, so
/// the balance check sees every entry with its lines.
pub(super) async fn insert_entries(
    conn: &mut PgConnection,
    to_write: &[(i64, &MovementEntry)],
) -> Result<HashMap<String, i64>, StoreError> {
    let sizes: Vec<usize> = to_write.iter().map(|(_, e)| entry_bytes(e)).collect();
    let mut written = HashMap::with_capacity(to_write.len());
    for run in split_by_bytes(&sizes, STATEMENT_BYTES_MAX) {
        written.extend(insert_entries_in_one_statement(conn, &to_write[run]).await?);
    }
    Ok(written)
}

/// About what one entry adds to its statement's parameters.
fn entry_bytes(entry: &MovementEntry) -> usize {
    const FIELDS: usize = 11 * 8;
    const LINE: usize = 5 * 8 + 16;
    let m = &entry.movement;
    let texts = [
        m.source_key().len() * 2,
        m.id().as_str().len(),
        m.reference().map_or(0, |r| r.as_str().len()),
        entry.draft.description.len(),
        m.details().to_string().len(),
        64 + 32,
    ];
    let lines: usize = entry
        .draft
        .lines
        .iter()
        .map(|l| l.account.len() + m.source_key().len() + LINE)
        .sum();
    texts.iter().sum::<usize>() + FIELDS + lines
}

async fn insert_entries_in_one_statement(
    conn: &mut PgConnection,
    to_write: &[(i64, &MovementEntry)],
) -> Result<Vec<(String, i64)>, StoreError> {
    if to_write.is_empty() {
        return Ok(Vec::new());
    }
    let mut columns = EntryColumns::default();
    for (event_id, entry) in to_write {
        columns.push(*event_id, entry);
    }
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "WITH input AS (
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::date[], $10::text[],
                                  $11::text[])
                 WITH ORDINALITY AS i(event_id, source_key, source, kind, movement_id, payout_id,
                                      reference, fingerprint, effective_date, description,
                                      details, ord)
         ), entry AS (
             INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id, payout_id,
                                          reference, request_fingerprint, effective_date,
                                          description, details)
             SELECT source_key, event_id, source, kind, movement_id, payout_id, reference,
                    fingerprint, effective_date, description, details::jsonb
             FROM input ORDER BY ord
             ON CONFLICT (source_key) DO NOTHING
             RETURNING id, source_key
         ), lines AS (
             INSERT INTO journal_lines (entry_id, line_no, account, currency, amount)
             SELECT entry.id, line.line_no, line.account, line.currency, line.amount
             FROM unnest($12::text[], $13::int[], $14::text[], $15::text[], $16::numeric[])
                  AS line(source_key, line_no, account, currency, amount)
             JOIN entry USING (source_key)
         )
         SELECT source_key, id FROM entry",
    )
    .bind(&columns.event_ids)
    .bind(&columns.source_keys)
    .bind(&columns.sources)
    .bind(&columns.kinds)
    .bind(&columns.movement_ids)
    .bind(&columns.payout_ids)
    .bind(&columns.references)
    .bind(&columns.fingerprints)
    .bind(&columns.dates)
    .bind(&columns.descriptions)
    .bind(&columns.details)
    .bind(&columns.line_keys)
    .bind(&columns.line_nos)
    .bind(&columns.accounts)
    .bind(&columns.currencies)
    .bind(&columns.amounts)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows)
}

/// The statement's parameters, one array per column.
#[derive(Default)]
struct EntryColumns {
    event_ids: Vec<i64>,
    source_keys: Vec<String>,
    sources: Vec<String>,
    kinds: Vec<&'static str>,
    movement_ids: Vec<String>,
    payout_ids: Vec<Option<String>>,
    references: Vec<Option<String>>,
    fingerprints: Vec<String>,
    dates: Vec<chrono::NaiveDate>,
    descriptions: Vec<String>,
    details: Vec<String>,
    line_keys: Vec<String>,
    line_nos: Vec<i32>,
    accounts: Vec<String>,
    currencies: Vec<&'static str>,
    amounts: Vec<rust_decimal::Decimal>,
}

impl EntryColumns {
    fn push(&mut self, event_id: i64, entry: &MovementEntry) {
        let m = &entry.movement;
        self.event_ids.push(event_id);
        self.source_keys.push(m.source_key().to_owned());
        self.sources.push(source_of(m.source_key()).to_owned());
        self.kinds.push(m.kind().as_str());
        self.movement_ids.push(m.id().as_str().to_owned());
        self.payout_ids
            .push(m.payout_id().map(|p| p.as_str().to_owned()));
        self.references
            .push(m.reference().map(|r| r.as_str().to_owned()));
        self.fingerprints.push(m.fingerprint().to_hex());
        self.dates.push(entry.draft.effective_date);
        self.descriptions.push(entry.draft.description.clone());
        self.details.push(m.details().to_string());
        for (line, line_no) in entry.draft.lines.iter().zip(1..) {
            self.line_keys.push(m.source_key().to_owned());
            self.line_nos.push(line_no);
            self.accounts.push(line.account.clone());
            self.currencies.push(line.currency.code());
            self.amounts.push(line.amount);
        }
    }
}

/// `PostingRows::tie_entries`, in one statement.
pub(super) async fn tie_entries(
    conn: &mut PgConnection,
    ties: &[Tie<'_>],
) -> Result<u64, StoreError> {
    let entries: Vec<i64> = ties.iter().map(|t| t.entry_id).collect();
    let sources: Vec<&str> = ties.iter().map(|t| t.source).collect();
    let payouts: Vec<&str> = ties.iter().map(|t| t.payout_id).collect();
    let events: Vec<i64> = ties.iter().map(|t| t.event_id).collect();
    let mismatched: i64 = sqlx::query_scalar(
        "WITH tied AS (
             INSERT INTO payout_items (entry_id, source, payout_id, event_id)
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[])
             ON CONFLICT (entry_id) DO NOTHING
             RETURNING entry_id
         )
         SELECT count(*) FROM unnest($1::bigint[], $3::text[]) AS t(entry_id, payout_id)
         WHERE t.entry_id NOT IN (SELECT entry_id FROM tied)
           AND NOT EXISTS (SELECT 1 FROM payout_items pi
                           WHERE pi.entry_id = t.entry_id AND pi.payout_id = t.payout_id)",
    )
    .bind(&entries)
    .bind(&sources)
    .bind(&payouts)
    .bind(&events)
    .fetch_one(&mut *conn)
    .await?;
    Ok(u64::try_from(mismatched).unwrap_or(0))
}

/// `PostingRows::mark_posted`, in one statement.
pub(super) async fn mark_posted(
    conn: &mut PgConnection,
    marks: &[Mark<'_>],
    posted_move: Transition<EventStatus>,
) -> Result<u64, StoreError> {
    let events: Vec<i64> = marks.iter().map(|m| m.job.event_id.get()).collect();
    let entries: Vec<Option<i64>> = marks.iter().map(|m| m.entry_id).collect();
    let jobs: Vec<&str> = marks.iter().map(|m| m.job.job_id.as_str()).collect();
    let attempts: Vec<i32> = marks
        .iter()
        .map(|m| i32::try_from(m.attempt).unwrap_or(i32::MAX))
        .collect();
    let posted: i64 = sqlx::query_scalar(
        "WITH posted AS (
             UPDATE settlement_events e
             SET status = $5, status_changed_at = now(),
                 posted_entry_id = coalesce(p.entry_id, e.posted_entry_id)
             FROM unnest($1::bigint[], $2::bigint[]) AS p(event_id, entry_id)
             WHERE e.id = p.event_id AND e.status = $6
             RETURNING e.id
         ), finished AS (
             UPDATE job_attempts a SET finished_at = now(), outcome = $7
             FROM unnest($3::text[], $4::int[]) AS f(job_id, attempt)
             WHERE a.job_id = f.job_id AND a.attempt = f.attempt
         ), done AS (
             DELETE FROM apalis.jobs j USING unnest($3::text[]) AS d(job_id) WHERE j.id = d.job_id
         )
         SELECT count(*) FROM posted",
    )
    .bind(&events)
    .bind(&entries)
    .bind(&jobs)
    .bind(&attempts)
    .bind(posted_move.to().label())
    .bind(posted_move.from().label())
    .bind(AttemptOutcome::Posted.as_str())
    .fetch_one(&mut *conn)
    .await?;
    Ok(u64::try_from(posted).unwrap_or(0))
}
