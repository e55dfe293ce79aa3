//! The posting primitives on SQLite (what to write is decided in `store::post`): every posting
//! transaction holds the database's write lock, which is what PostgreSQL's row locks give there,
//! so the rows are read and written one statement at a time.

use std::collections::HashMap;

use rust_decimal::Decimal;
use sqlx::sqlite::SqliteConnection;

use super::jobs::{complete_job, finish_attempt, set_event_status};
use super::{SqliteStore, now};
use crate::job::AttemptOutcome;
use crate::post_error::PostError;
use crate::posting::{EntryDraft, Line};
use crate::resolved::MovementEntry;
use crate::state::EventStatus;
use crate::state::Transition;
use crate::store::StoreError;
use crate::store::movements::Existing;
use crate::store::post::{Mark, Posting, PostingRows, Tie, source_of, stored_line};
use crate::store::prepare::EventRow;

impl PostingRows for SqliteStore {
    /// Waiting for the write lock is bounded by the busy timeout, not `lock_timeout_ms`.
    async fn begin_posting(&self, _lock_timeout_ms: u64) -> Result<Self::Tx, StoreError> {
        self.write().await
    }

    async fn lock_events(tx: &mut Self::Tx, ids: &[i64]) -> Result<Vec<EventRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, source, status, job_id, facts, validation_error, received_at
             FROM settlement_events WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id",
        )
        .bind(serde_json::to_string(ids).unwrap_or_default())
        .fetch_all(&mut **tx)
        .await?)
    }

    /// SQLite has one writer at a time: the write transaction is the lock.
    async fn share_events(tx: &mut Self::Tx, ids: &[i64]) -> Result<Vec<EventRow>, StoreError> {
        Self::lock_events(tx, ids).await
    }

    async fn entry_by_key(
        tx: &mut Self::Tx,
        key: &str,
    ) -> Result<Option<(i64, String)>, StoreError> {
        entry_by_key(tx, key).await
    }

    async fn reversing_key(tx: &mut Self::Tx, entry_id: i64) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT source_key FROM journal_entries WHERE reverses_entry_id = ?1",
        )
        .bind(entry_id)
        .fetch_optional(&mut **tx)
        .await?)
    }

    async fn entry_lines(tx: &mut Self::Tx, entry_id: i64) -> Result<Vec<Line>, PostError> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT account, currency, amount FROM journal_lines WHERE entry_id = ?1 ORDER BY line_no",
        )
        .bind(entry_id)
        .fetch_all(&mut **tx)
        .await
        .map_err(StoreError::from)?;
        rows.into_iter()
            .map(|(account, currency, amount)| {
                let amount = amount
                    .parse()
                    .map_err(|_| PostError::CorruptEvent(format!("amount {amount:?}")))?;
                stored_line(account, &currency, amount)
            })
            .collect()
    }

    async fn insert_postings(
        tx: &mut Self::Tx,
        postings: &[Posting<'_>],
        posted: Transition<EventStatus>,
    ) -> Result<HashMap<i64, i64>, PostError> {
        let mut entries = HashMap::with_capacity(postings.len());
        for posting in postings {
            let ready = posting.ready;
            if entry_by_key(tx, &ready.draft.source_key).await?.is_some() {
                continue;
            }
            let entry_id = insert_entry(
                tx,
                &EntryRow {
                    event_id: posting.job.event_id.get(),
                    source: ready.source.as_str(),
                    kind: ready.event.kind().as_str(),
                    movement_id: ready.event.movement_id().as_str(),
                    payout_id: ready.event.payout_id().map(|p| p.as_str()),
                    reference: ready.event.reference().map(|r| r.as_str()),
                    fingerprint: &ready.fingerprint,
                    draft: &ready.draft,
                    reverses: posting.reverses,
                    details: None,
                },
            )
            .await?;
            let mark = Mark {
                job: posting.job,
                attempt: posting.attempt,
                entry_id: Some(entry_id),
            };
            mark_one(tx, &mark, posted).await?;
            entries.insert(posting.job.event_id.get(), entry_id);
        }
        Ok(entries)
    }

    async fn mark_posted(
        tx: &mut Self::Tx,
        marks: &[Mark<'_>],
        posted: Transition<EventStatus>,
    ) -> Result<u64, StoreError> {
        for mark in marks {
            mark_one(tx, mark, posted).await?;
        }
        Ok(marks.len() as u64)
    }

    async fn complete_job(tx: &mut Self::Tx, job_id: &str) -> Result<(), StoreError> {
        complete_job(tx, job_id).await
    }

    async fn existing_entries(
        tx: &mut Self::Tx,
        keys: &[&str],
    ) -> Result<HashMap<String, Existing>, StoreError> {
        let mut existing = HashMap::with_capacity(keys.len());
        for key in keys {
            let row: Option<(i64, String, Option<String>)> = sqlx::query_as(
                "SELECT je.id, je.request_fingerprint, pi.payout_id
                 FROM journal_entries je LEFT JOIN payout_items pi ON pi.entry_id = je.id
                 WHERE je.source_key = ?1",
            )
            .bind(key)
            .fetch_optional(&mut **tx)
            .await?;
            if let Some((entry_id, fingerprint, payout)) = row {
                existing.insert(
                    (*key).to_owned(),
                    Existing {
                        entry_id,
                        fingerprint,
                        payout,
                    },
                );
            }
        }
        Ok(existing)
    }

    async fn insert_movement_entries(
        tx: &mut Self::Tx,
        to_write: &[(i64, &MovementEntry)],
    ) -> Result<HashMap<String, i64>, StoreError> {
        let mut written = HashMap::with_capacity(to_write.len());
        for (event_id, entry) in to_write {
            let m = &entry.movement;
            if written.contains_key(m.source_key())
                || entry_by_key(tx, m.source_key()).await?.is_some()
            {
                continue;
            }
            let fingerprint = m.fingerprint().to_hex();
            let entry_id = insert_entry(
                tx,
                &EntryRow {
                    event_id: *event_id,
                    source: source_of(m.source_key()),
                    kind: m.kind().as_str(),
                    movement_id: m.id().as_str(),
                    payout_id: m.payout_id().map(|p| p.as_str()),
                    reference: m.reference().map(|r| r.as_str()),
                    fingerprint: &fingerprint,
                    draft: &entry.draft,
                    reverses: None,
                    details: Some(m.details().to_string()),
                },
            )
            .await
            .map_err(|error| match error {
                PostError::Store(error) => error,
                refused => StoreError::Corrupt(refused.to_string()),
            })?;
            written.insert(m.source_key().to_owned(), entry_id);
        }
        Ok(written)
    }

    async fn tie_entries(tx: &mut Self::Tx, ties: &[Tie<'_>]) -> Result<u64, StoreError> {
        let mut mismatched = 0;
        for tie in ties {
            sqlx::query(
                "INSERT INTO payout_items (entry_id, source, payout_id, event_id, tied_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (entry_id) DO NOTHING",
            )
            .bind(tie.entry_id)
            .bind(tie.source)
            .bind(tie.payout_id)
            .bind(tie.event_id)
            .bind(now())
            .execute(&mut **tx)
            .await?;
            let tied: Option<String> =
                sqlx::query_scalar("SELECT payout_id FROM payout_items WHERE entry_id = ?1")
                    .bind(tie.entry_id)
                    .fetch_optional(&mut **tx)
                    .await?;
            if tied.is_some_and(|payout| payout != tie.payout_id) {
                mismatched += 1;
            }
        }
        Ok(mismatched)
    }
}

async fn entry_by_key(
    conn: &mut SqliteConnection,
    key: &str,
) -> Result<Option<(i64, String)>, StoreError> {
    Ok(
        sqlx::query_as("SELECT id, request_fingerprint FROM journal_entries WHERE source_key = ?1")
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?,
    )
}

/// One event posted to its entry: the `posted` move, the attempt's end, the queue row gone.
async fn mark_one(
    conn: &mut SqliteConnection,
    mark: &Mark<'_>,
    posted: Transition<EventStatus>,
) -> Result<(), StoreError> {
    set_event_status(&mut *conn, mark.job.event_id, posted, mark.entry_id).await?;
    finish_attempt(
        &mut *conn,
        mark.job,
        mark.attempt,
        AttemptOutcome::Posted,
        None,
    )
    .await?;
    complete_job(conn, &mark.job.job_id).await
}

/// An entry as written: whose event wrote it, its movement and the drafted lines.
pub(super) struct EntryRow<'a> {
    pub(super) event_id: i64,
    pub(super) source: &'a str,
    pub(super) kind: &'a str,
    pub(super) movement_id: &'a str,
    pub(super) payout_id: Option<&'a str>,
    pub(super) reference: Option<&'a str>,
    pub(super) fingerprint: &'a str,
    pub(super) draft: &'a EntryDraft,
    pub(super) reverses: Option<i64>,
    /// What the provider reported about the movement (JSON), for movements resolved through its
    /// API.
    pub(super) details: Option<String>,
}

/// Writes the lines first, then the entry (its insert checks the lines balance).
pub(super) async fn insert_entry(
    conn: &mut SqliteConnection,
    entry: &EntryRow<'_>,
) -> Result<i64, PostError> {
    let entry_id: i64 = sqlx::query_scalar(
        "SELECT max(coalesce((SELECT max(id) FROM journal_entries), 0),
                    coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'journal_entries'), 0)) + 1",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    for (i, line) in entry.draft.lines.iter().enumerate() {
        sqlx::query(
            "INSERT INTO journal_lines (entry_id, line_no, account, currency, amount, amount_minor)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(entry_id)
        .bind(i as i64 + 1)
        .bind(&line.account)
        .bind(line.currency.code())
        .bind(exact_text(line))
        .bind(minor_units(line)?)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::from)?;
    }
    sqlx::query(
        "INSERT INTO journal_entries (id, source_key, event_id, source, kind, movement_id, payout_id, reference,
                                      request_fingerprint, effective_date, description, reverses_entry_id,
                                      recorded_at, details)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )
    .bind(entry_id)
    .bind(&entry.draft.source_key)
    .bind(entry.event_id)
    .bind(entry.source)
    .bind(entry.kind)
    .bind(entry.movement_id)
    .bind(entry.payout_id)
    .bind(entry.reference)
    .bind(entry.fingerprint)
    .bind(entry.draft.effective_date)
    .bind(&entry.draft.description)
    .bind(entry.reverses)
    .bind(now())
    .bind(entry.details.as_deref())
    .execute(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    Ok(entry_id)
}

fn exact_text(line: &Line) -> String {
    let mut amount = line.amount;
    amount.rescale(line.currency.exponent());
    amount.to_string()
}

/// The line's amount in its currency's minor units, exactly (or a corrupt-entry error).
fn minor_units(line: &Line) -> Result<i64, PostError> {
    let mut scaled = line.amount * Decimal::from(10i64.pow(line.currency.exponent()));
    scaled = scaled.normalize();
    if scaled.scale() != 0 {
        return Err(PostError::Unbalanced(format!(
            "{} is finer than {}",
            line.amount, line.currency
        )));
    }
    scaled
        .to_string()
        .parse()
        .map_err(|_| PostError::Unbalanced(format!("{} is out of range", line.amount)))
}
