//! Finance reads: the journal (paged, filtered), balances, payout reconciliation.

use std::collections::HashMap;

use chrono::NaiveDate;
use rust_decimal::Decimal;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgStore;
use crate::finance::{
    BalanceQuery, BalanceRow, CARRIED_DETAIL, EntryView, JournalCursor, JournalFilter, JournalPage,
    LineView, OpenReceivable, PayoutSummary, ReceivableRow, Reconciliation, ReconciliationItem,
    balance_effect, exact, next_hour, reconcile,
};
use crate::store::StoreError;
use crate::store::driver::{FinanceReads, FinanceRows};

impl crate::store::driver::FinanceRows for PgStore {
    async fn attach_lines(&self, entries: &mut [EntryView]) -> Result<(), StoreError> {
        let ids: Vec<i64> = entries.iter().map(|e| e.id).collect();
        let rows: Vec<(i64, i32, String, String, Decimal)> = sqlx::query_as(
            "SELECT entry_id, line_no, account, currency, amount FROM journal_lines
             WHERE entry_id = ANY($1) ORDER BY entry_id, line_no",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        let mut by_entry: HashMap<i64, Vec<LineView>> = HashMap::with_capacity(entries.len());
        for (entry_id, line_no, account, currency, amount) in rows {
            let amount = exact(amount, &currency);
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
        // by their recording time: one statement, one snapshot. It reads a few thousand rows at
        // most, fewer than starting parallel workers for them costs (they doubled its time).
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET LOCAL max_parallel_workers_per_gather = 0")
            .execute(&mut *tx)
            .await?;
        let rows: Vec<(String, String, Decimal)> = sqlx::query_as(
            "SELECT account, currency, sum(amount) FROM (
                 SELECT account, currency, amount FROM balance_deltas
                 WHERE $1::date IS NULL OR effective_date <= $1
                 UNION ALL
                 SELECT account, currency, -amount FROM recorded_balance_deltas
                 WHERE $3::timestamptz IS NOT NULL AND recorded_hour >= $3
                   AND ($1::date IS NULL OR effective_date <= $1)
                 UNION ALL
                 SELECT l.account, l.currency, -l.amount
                 FROM journal_entries je JOIN journal_lines l ON l.entry_id = je.id
                 WHERE $2::timestamptz IS NOT NULL AND je.recorded_at > $2 AND je.recorded_at < $3
                   AND ($1::date IS NULL OR je.effective_date <= $1)
             ) AS kept
             GROUP BY account, currency HAVING sum(amount) <> 0
             ORDER BY account, currency",
        )
        .bind(query.as_of)
        .bind(query.recorded_at)
        .bind(query.recorded_at.map(next_hour))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .map(|(account, currency, balance)| BalanceRow {
                balance: exact(balance, &currency),
                account,
                currency,
            })
            .collect())
    }

    /// Folds the balances kept by day into a row per account, currency and day, those kept by
    /// recorded hour into a row per account, currency, day and hour (the last day's hours), and
    /// the open receivables kept into a row per movement (none once cleared); answers how many
    /// rows it folded.
    async fn compact_balances(&self) -> Result<u64, StoreError> {
        let folded: i64 = sqlx::query_scalar(
            "SELECT balance_deltas_compact() + recorded_balance_deltas_compact()
                    + receivable_deltas_compact()",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(folded).unwrap_or_default())
    }

    async fn open_receivables(
        &self,
        accounts: &[String],
        since_on_or_before: NaiveDate,
        limit: u32,
    ) -> Result<Vec<OpenReceivable>, StoreError> {
        let rows: Vec<ReceivableRow<Decimal>> = sqlx::query_as(
            "SELECT source, movement_id, account, currency, sum(amount), min(since), max(reference)
                 FROM receivable_deltas
                 WHERE account = ANY($1)
                 GROUP BY source, movement_id, account, currency
                 HAVING sum(amount) <> 0 AND min(since) <= $2
                 ORDER BY min(since), source, movement_id, currency
                 LIMIT $3",
        )
        .bind(accounts)
        .bind(since_on_or_before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(OpenReceivable::from_row).collect())
    }
}

crate::store::finance_reads::finance_reads!(PgStore, PgRow);
crate::store::sessions::session_rows!(PgStore);
crate::store::retention::retention_rows!(PgStore, sqlx::Postgres);
crate::store::pauses::pause_rows!(PgStore, sqlx::Postgres, "apalis.jobs", chrono::Utc::now());
crate::store::search::event_search!(
    PgStore,
    sqlx::Postgres,
    " COLLATE \"C\"",
    "EXPLAIN ",
    " AND e.id = ANY(ARRAY(",
    "))"
);

impl crate::store::corrections::CorrectionRows for PgStore {
    /// The entry and its lines in one statement, so the balance check sees them together.
    async fn write_entry(
        tx: &mut Self::Tx,
        entry: &crate::store::corrections::CorrectionEntry<'_>,
    ) -> Result<Option<i64>, StoreError> {
        let o = entry.original;
        let lines = &entry.draft.lines;
        let line_nos: Vec<i32> = (1..=lines.len() as i32).collect();
        let accounts: Vec<&str> = lines.iter().map(|l| l.account.as_str()).collect();
        let currencies: Vec<&str> = lines.iter().map(|l| l.currency.code()).collect();
        let amounts: Vec<Decimal> = lines.iter().map(|l| l.amount).collect();
        Ok(sqlx::query_scalar(
            "WITH entry AS (
                 INSERT INTO journal_entries (source_key, event_id, source, kind, movement_id, payout_id, reference,
                                              request_fingerprint, effective_date, description, reverses_entry_id, details)
                 SELECT $1, o.event_id, o.source, o.kind, o.movement_id, NULL, o.reference,
                        o.request_fingerprint, $3, $4, $5, $6::jsonb
                 FROM journal_entries o WHERE o.id = $2
                 ON CONFLICT DO NOTHING
                 RETURNING id
             ), lines AS (
                 INSERT INTO journal_lines (entry_id, line_no, account, currency, amount)
                 SELECT entry.id, l.line_no, l.account, l.currency, l.amount
                 FROM entry, unnest($7::int[], $8::text[], $9::text[], $10::numeric[])
                      AS l(line_no, account, currency, amount)
             )
             SELECT id FROM entry",
        )
        .bind(&entry.draft.source_key)
        .bind(o.id)
        .bind(entry.draft.effective_date)
        .bind(&entry.draft.description)
        .bind(entry.reverses)
        .bind(&entry.details)
        .bind(&line_nos)
        .bind(&accounts)
        .bind(&currencies)
        .bind(&amounts)
        .fetch_optional(&mut **tx)
        .await?)
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
             VALUES (now(), $1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(&decision.actor)
        .bind(&decision.reason)
        .bind(entry_id)
        .bind(reversal)
        .bind(correction)
        .fetch_one(&mut **tx)
        .await?)
    }
}
