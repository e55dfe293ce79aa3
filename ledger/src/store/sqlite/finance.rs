//! Finance reads on SQLite (see the PostgreSQL module). Sums are taken over `amount_minor`,
//! exact integers, and scaled back by each currency's exponent.

use std::collections::HashMap;

use chrono::NaiveDate;
use rust_decimal::Decimal;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::SqliteStore;
use crate::finance::{
    BalanceQuery, BalanceRow, CARRIED_DETAIL, EntryView, JournalCursor, JournalFilter, JournalPage,
    LineView, OpenReceivable, PayoutSummary, ReceivableRow, Reconciliation, ReconciliationItem,
    balance_effect, exact, next_hour, reconcile,
};
use crate::store::StoreError;
use crate::store::driver::{FinanceReads, FinanceRows};

impl crate::store::driver::FinanceRows for SqliteStore {
    async fn attach_lines(&self, entries: &mut [EntryView]) -> Result<(), StoreError> {
        let ids: Vec<i64> = entries.iter().map(|e| e.id).collect();
        let ids = serde_json::to_string(&ids).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let rows: Vec<(i64, i32, String, String, String)> = sqlx::query_as(
            "SELECT entry_id, line_no, account, currency, amount FROM journal_lines
             WHERE entry_id IN (SELECT value FROM json_each(?1)) ORDER BY entry_id, line_no",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        let mut by_entry: HashMap<i64, Vec<LineView>> = HashMap::with_capacity(entries.len());
        for (entry_id, line_no, account, currency, amount) in rows {
            by_entry.entry(entry_id).or_default().push(LineView {
                line_no,
                account,
                currency,
                amount,
            });
        }
        for entry in entries {
            entry.lines = by_entry.remove(&entry.id).unwrap_or_default();
        }
        Ok(())
    }

    async fn balances(&self, query: BalanceQuery) -> Result<Vec<BalanceRow>, StoreError> {
        // From the balances kept by day, less (as recorded at a moment) the rows kept for the
        // hours after the moment's hour and the lines recorded after it within its hour, found
        // by their recording time: one statement, one snapshot.
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT account, currency, sum(amount_minor) FROM (
                 SELECT account, currency, amount_minor FROM balance_deltas
                 WHERE ?1 IS NULL OR effective_date <= ?1
                 UNION ALL
                 SELECT account, currency, -amount_minor FROM recorded_balance_deltas
                 WHERE ?3 IS NOT NULL AND recorded_hour >= substr(?3, 1, 13)
                   AND (?1 IS NULL OR effective_date <= ?1)
                 UNION ALL
                 SELECT l.account, l.currency, -l.amount_minor
                 FROM journal_entries je JOIN journal_lines l ON l.entry_id = je.id
                 WHERE ?2 IS NOT NULL AND je.recorded_at > ?2 AND je.recorded_at < ?3
                   AND (?1 IS NULL OR je.effective_date <= ?1)
             ) AS kept
             GROUP BY account, currency HAVING sum(amount_minor) <> 0
             ORDER BY account, currency",
        )
        .bind(query.as_of)
        .bind(query.recorded_at)
        .bind(query.recorded_at.map(next_hour))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(account, currency, minor)| BalanceRow {
                balance: exact(major(minor, &currency), &currency),
                account,
                currency,
            })
            .collect())
    }

    /// Nothing to fold: one writer at a time keeps a row per account, currency and day.
    async fn compact_balances(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    async fn open_receivables(
        &self,
        accounts: &[String],
        since_on_or_before: NaiveDate,
        limit: u32,
    ) -> Result<Vec<OpenReceivable>, StoreError> {
        let accounts =
            serde_json::to_string(accounts).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let rows: Vec<ReceivableRow<i64>> = sqlx::query_as(
            "SELECT source, movement_id, account, currency, amount_minor, since, reference
                 FROM receivable_deltas
                 WHERE account IN (SELECT value FROM json_each(?1)) AND since <= ?2
                 ORDER BY since, source, movement_id, currency
                 LIMIT ?3",
        )
        .bind(&accounts)
        .bind(since_on_or_before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(source, capture, account, currency, minor, since, reference)| {
                    let amount = major(minor, &currency);
                    OpenReceivable::from_row((
                        source, capture, account, currency, amount, since, reference,
                    ))
                },
            )
            .collect())
    }
}

crate::store::finance_reads::finance_reads!(SqliteStore, SqliteRow);

/// Minor units back to major units with the currency's exponent.
fn major(minor: i64, currency: &str) -> Decimal {
    let exponent = crate::money::Currency::parse(currency)
        .map(crate::money::Currency::exponent)
        .unwrap_or(0);
    Decimal::new(minor, exponent)
}
crate::store::sessions::session_rows!(SqliteStore);
crate::store::retention::retention_rows!(SqliteStore, sqlx::Sqlite);
crate::store::pauses::pause_rows!(
    SqliteStore,
    sqlx::Sqlite,
    "Jobs",
    chrono::Utc::now().timestamp()
);
crate::store::search::event_search!(
    SqliteStore,
    sqlx::Sqlite,
    "",
    "EXPLAIN QUERY PLAN ",
    " AND e.id IN (",
    ")"
);

impl crate::store::corrections::CorrectionRows for SqliteStore {
    /// Under the write lock: `None` when its key is taken or its original already reversed.
    async fn write_entry(
        tx: &mut Self::Tx,
        entry: &crate::store::corrections::CorrectionEntry<'_>,
    ) -> Result<Option<i64>, StoreError> {
        let o = entry.original;
        let (taken, fingerprint): (bool, String) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM journal_entries WHERE source_key = ?1
                            OR (?2 IS NOT NULL AND reverses_entry_id = ?2)),
                    (SELECT request_fingerprint FROM journal_entries WHERE id = ?3)",
        )
        .bind(&entry.draft.source_key)
        .bind(entry.reverses)
        .bind(o.id)
        .fetch_one(&mut **tx)
        .await?;
        if taken {
            return Ok(None);
        }
        let row = super::posting::EntryRow {
            event_id: o.event_id,
            source: &o.source,
            kind: &o.kind,
            movement_id: &o.movement_id,
            payout_id: None,
            reference: o.reference.as_deref(),
            fingerprint: &fingerprint,
            draft: entry.draft,
            reverses: entry.reverses,
            details: Some(entry.details.clone()),
        };
        super::posting::insert_entry(&mut *tx, &row)
            .await
            .map(Some)
            .map_err(|error| match error {
                crate::post_error::PostError::Store(error) => error,
                other => StoreError::Corrupt(other.to_string()),
            })
    }

    async fn record_correction(
        tx: &mut Self::Tx,
        entry_id: i64,
        reversal: i64,
        correction: Option<i64>,
        decision: &crate::review::Decision,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO journal_corrections (at, actor, reason, entry_id, reversal_entry_id, correction_entry_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
        )
        .bind(chrono::Utc::now())
        .bind(&decision.actor)
        .bind(&decision.reason)
        .bind(entry_id)
        .bind(reversal)
        .bind(correction)
        .fetch_one(&mut **tx)
        .await?)
    }
}
