//! Finance reads: the journal (paged, filtered), balances, payout reconciliation.

use std::collections::HashMap;

use chrono::NaiveDate;
use rust_decimal::Decimal;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgStore;
use crate::finance::{
    BalanceQuery, BalanceRow, EntryView, JournalCursor, JournalFilter, JournalPage, LineView,
    OpenReceivable, PayoutSummary, ReceivableRow, Reconciliation, ReconciliationItem,
    balance_effect, exact, reconcile,
};
use crate::store::StoreError;

impl PgStore {
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

    pub(in crate::store) async fn balances(
        &self,
        query: BalanceQuery,
    ) -> Result<Vec<BalanceRow>, StoreError> {
        let rows: Vec<(String, String, Decimal)> = sqlx::query_as(
            "SELECT l.account, l.currency, sum(l.amount) FROM journal_lines l
             JOIN journal_entries je ON je.id = l.entry_id
             WHERE ($1::date IS NULL OR je.effective_date <= $1)
               AND ($2::timestamptz IS NULL OR je.recorded_at <= $2)
             GROUP BY l.account, l.currency HAVING sum(l.amount) <> 0
             ORDER BY l.account, l.currency",
        )
        .bind(query.as_of)
        .bind(query.recorded_at)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(account, currency, balance)| BalanceRow {
                balance: exact(balance, &currency),
                account,
                currency,
            })
            .collect())
    }

    pub(in crate::store) async fn open_receivables(
        &self,
        accounts: &[String],
        since_on_or_before: NaiveDate,
        limit: u32,
    ) -> Result<Vec<OpenReceivable>, StoreError> {
        let rows: Vec<ReceivableRow<Decimal>> = sqlx::query_as(
            "SELECT je.source, je.movement_id, l.account, l.currency, sum(l.amount),
                        min(je.effective_date), max(je.reference)
                 FROM journal_lines l JOIN journal_entries je ON je.id = l.entry_id
                 WHERE l.account = ANY($1)
                 GROUP BY je.source, je.movement_id, l.account, l.currency
                 HAVING sum(l.amount) <> 0 AND min(je.effective_date) <= $2
                 ORDER BY min(je.effective_date), je.source, je.movement_id, l.currency
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
