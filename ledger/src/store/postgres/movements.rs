//! Posting what a job resolved its event to (provider movements, each one entry keyed by the
//! movement), for events whose webhook only names the money. The same transaction shape as the
//! posting of an event's own facts: the event locked, the entries written by their source keys,
//! the event marked posted, the attempt finished and the queue row deleted, all or nothing.

use std::collections::HashMap;

use sqlx::postgres::PgConnection;
use tracing::debug;

use super::PgStore;
use super::jobs::{
    begin_with_lock_timeout, complete_job, distinct_events, finish_attempt, lock_events,
    missing_event,
};
use crate::job::{AttemptOutcome, PostError, Posted};
use crate::movement::MovementEntry;
use crate::record::EventStatus;
use crate::state::StateMachine;
use crate::store::movements::{
    Existing, Plan, RACED, ResolvedPost, alias_legacy, lookup_keys, plan,
};
use crate::store::prepare::EventRow;
use crate::store::{STATEMENT_BYTES_MAX, StoreError, split_by_bytes};

impl PgStore {
    /// Posts one job's resolved movements in its own transaction. A movement posted by another
    /// transaction while this one ran is compared in a second try, before anything is written.
    pub(in crate::store) async fn post_resolved(
        &self,
        post: &ResolvedPost<'_>,
        lock_timeout_ms: u64,
    ) -> Result<Posted, PostError> {
        for _ in 0..2 {
            match self
                .post_resolved_together(std::slice::from_ref(post), lock_timeout_ms)
                .await
            {
                Err(PostError::Store(StoreError::Interrupted(RACED))) => continue,
                Err(error) => return Err(error),
                Ok(mut results) => return results.pop().unwrap_or(Err(missing_event(post.job))),
            }
        }
        Err(StoreError::Interrupted(RACED).into())
    }

    /// [`Self::post_resolved`] for several jobs in one transaction, each answered as if alone;
    /// if the group cannot be answered that way (a database failure, a movement posted by
    /// another transaction meanwhile), each is posted on its own instead.
    pub(in crate::store) async fn post_resolved_many(
        &self,
        posts: &[ResolvedPost<'_>],
        lock_timeout_ms: u64,
    ) -> Vec<Result<Posted, PostError>> {
        if posts.len() > 1 && distinct_events(posts.iter().map(|p| p.job)) {
            match self.post_resolved_together(posts, lock_timeout_ms).await {
                Ok(results) => return results,
                Err(error) => {
                    debug!(%error, jobs = posts.len(), "group of resolved postings failed; posting one by one")
                }
            }
        }
        let mut results = Vec::with_capacity(posts.len());
        for post in posts {
            results.push(self.post_resolved(post, lock_timeout_ms).await);
        }
        results
    }

    async fn post_resolved_together(
        &self,
        posts: &[ResolvedPost<'_>],
        lock_timeout_ms: u64,
    ) -> Result<Vec<Result<Posted, PostError>>, PostError> {
        let mut tx = begin_with_lock_timeout(&self.pool, lock_timeout_ms).await?;
        let ids: Vec<i64> = posts.iter().map(|p| p.job.event_id.get()).collect();
        let rows: HashMap<i64, EventRow> = lock_events(&mut tx, &ids)
            .await?
            .into_iter()
            .map(|row| (row.id, row))
            .collect();
        let keys = lookup_keys(posts);
        let mut existing = existing_entries(&mut tx, &keys).await?;
        alias_legacy(posts, &mut existing);
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
            to_write,
            counts,
        } = plan(posts, &statuses, &existing);
        for &i in &settled {
            finish_attempt(
                &mut tx,
                posts[i].job,
                posts[i].attempt,
                AttemptOutcome::Settled,
                None,
            )
            .await?;
            complete_job(&mut tx, &posts[i].job.job_id).await?;
        }
        let mut entries: HashMap<String, i64> = existing
            .iter()
            .map(|(k, e)| (k.clone(), e.entry_id))
            .collect();
        let written = insert_entries(&mut tx, &to_write).await?;
        if written.len() != to_write.len() {
            // Another transaction posted one of these movements meanwhile: its facts must be
            // compared before anything is kept.
            return Err(StoreError::Interrupted(RACED).into());
        }
        entries.extend(written);
        finish_postings(&mut tx, posts, &ready, &entries).await?;
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
        tx.commit().await.map_err(StoreError::from)?;
        Ok(results.into_iter().flatten().collect())
    }
}

impl PgStore {
    pub(in crate::store) async fn live_workers(
        &self,
        window: std::time::Duration,
    ) -> Result<u32, StoreError> {
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM apalis.workers
             WHERE worker_type = $1 AND last_seen > now() - $2 * interval '1 millisecond'",
        )
        .bind(crate::job::POST_SETTLEMENT_QUEUE)
        .bind(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
        .fetch_one(&self.pool)
        .await?;
        Ok(u32::try_from(count).unwrap_or(u32::MAX).max(1))
    }

    /// The source and stored facts of each event (`None` for an event recorded invalid).
    pub(in crate::store) async fn facts_of(
        &self,
        events: &[crate::ids::EventId],
    ) -> Result<HashMap<i64, (String, Option<serde_json::Value>)>, StoreError> {
        let ids: Vec<i64> = events.iter().map(|e| e.get()).collect();
        let rows: Vec<(i64, String, Option<serde_json::Value>)> =
            sqlx::query_as("SELECT id, source, facts FROM settlement_events WHERE id = ANY($1)")
                .bind(&ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(id, source, facts)| (id, (source, facts)))
            .collect())
    }
}

/// The entries already posted under `keys`, with the payout each is tied to.
async fn existing_entries(
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

/// Writes each movement's entry and lines (one statement per run of `STATEMENT_BYTES_MAX`, so
/// the balance check sees every entry with its lines). Answers the ids of the entries written;
/// a source key taken meanwhile by another transaction writes nothing and is left out.
async fn insert_entries(
    conn: &mut PgConnection,
    to_write: &[(i64, &MovementEntry)],
) -> Result<HashMap<String, i64>, StoreError> {
    // In key order, as every writer takes them: two groups sharing keys never wait on each
    // other in a cycle.
    let mut to_write = to_write.to_vec();
    to_write.sort_by(|a, b| a.1.movement.source_key().cmp(b.1.movement.source_key()));
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

/// The source a source key belongs to (its first segment).
fn source_of(source_key: &str) -> &str {
    source_key.split('/').next().unwrap_or(source_key)
}

/// Ties the listed entries to their payout, marks each event posted (pointing at its first
/// entry), finishes each attempt as posted and deletes each job's queue row. A tie another
/// transaction made meanwhile to a different payout is a race: nothing of the group is kept.
async fn finish_postings(
    conn: &mut PgConnection,
    posts: &[ResolvedPost<'_>],
    ready: &[usize],
    entries: &HashMap<String, i64>,
) -> Result<(), PostError> {
    // Every event posted here moves recorded -> posted.
    let posted_move = EventStatus::Recorded.transition(EventStatus::Posted)?;
    let (mut tie_entries, mut tie_sources, mut tie_payouts, mut tie_events) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut events, mut firsts, mut jobs, mut attempts) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &i in ready {
        let post = &posts[i];
        let event_id = post.job.event_id.get();
        let ids: Vec<i64> = post
            .resolved
            .entries
            .iter()
            .filter_map(|e| entries.get(e.movement.source_key()).copied())
            .collect();
        if let Some(payout) = &post.resolved.payout {
            for (entry, id) in post.resolved.entries.iter().zip(&ids) {
                tie_entries.push(*id);
                tie_sources.push(source_of(entry.movement.source_key()));
                tie_payouts.push(payout.as_str());
                tie_events.push(event_id);
            }
        }
        events.push(event_id);
        firsts.push(ids.first().copied());
        jobs.push(post.job.job_id.as_str());
        attempts.push(post.attempt as i32);
    }
    if !tie_entries.is_empty() {
        // In entry order, for the same reason as the entries' keys.
        let mut ties: Vec<(i64, &str, &str, i64)> = tie_entries
            .iter()
            .zip(&tie_sources)
            .zip(&tie_payouts)
            .zip(&tie_events)
            .map(|(((e, s), p), v)| (*e, *s, *p, *v))
            .collect();
        ties.sort_unstable_by_key(|t| t.0);
        ties.dedup_by_key(|t| t.0);
        tie_entries = ties.iter().map(|t| t.0).collect();
        tie_sources = ties.iter().map(|t| t.1).collect();
        tie_payouts = ties.iter().map(|t| t.2).collect();
        tie_events = ties.iter().map(|t| t.3).collect();
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
        .bind(&tie_entries)
        .bind(&tie_sources)
        .bind(&tie_payouts)
        .bind(&tie_events)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::from)?;
        if mismatched > 0 {
            return Err(StoreError::Interrupted(RACED).into());
        }
    }
    let posted: i64 = sqlx::query_scalar(
        "WITH posted AS (
             UPDATE settlement_events e
             SET status = $5, status_changed_at = now(), posted_entry_id = p.entry_id
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
    .bind(&firsts)
    .bind(&jobs)
    .bind(&attempts)
    .bind(posted_move.to().label())
    .bind(posted_move.from().label())
    .bind(AttemptOutcome::Posted.as_str())
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    // The caller holds each event's lock and saw it recorded: this cannot happen.
    if posted != events.len() as i64 {
        return Err(posted_move.stale().into());
    }
    Ok(())
}
