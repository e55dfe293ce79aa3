//! The finance reads whose SQL both backends run (`$N` parameters, no casts): the journal page,
//! payout reconciliation and the payout listing, expanded into each store by `finance_reads!`.
//! Each backend keeps what it sums its own way: an entry's lines (`attach_lines`) and balances.

use std::sync::LazyLock;

/// Implements `driver::FinanceReads` for `$store` (over its own `FinanceRows::attach_lines`),
/// with its helpers `payout_summary` and `payout_counts`, and `effect` and `entry_view` over
/// `$row`.
macro_rules! finance_reads {
    ($store:ty, $row:ty) => {
        impl $store {
            /// A payout's summary computed from its reconciliation, and kept (`payout_summaries`,
            /// read back while what it was computed from is what the journal holds: the same
            /// counts, `before`, of the rows it read, which are never updated or deleted) when
            /// nothing was written for the payout while it was computed. Keeping is an
            /// optimisation: a listing that may not write (a read-only connection) still answers.
            async fn payout_summary(
                &self,
                payout_id: &str,
                before: (i64, i64, i64),
            ) -> Result<Option<PayoutSummary>, StoreError> {
                let Some(reconciliation) = self.reconciliation(payout_id).await? else {
                    return Ok(None);
                };
                let summary = PayoutSummary::from(&reconciliation);
                if self.payout_counts(payout_id).await? == before {
                    let (entries, items, reversals) = before;
                    let text = serde_json::to_string(&summary)
                        .map_err(|e| StoreError::Corrupt(format!("a payout summary: {e}")))?;
                    let kept = sqlx::query(
                        "INSERT INTO payout_summaries (payout_id, entries, items, reversals, version, summary)
                         VALUES ($1, $2, $3, $4, $5, $6)
                         ON CONFLICT (payout_id) DO UPDATE SET entries = excluded.entries,
                             items = excluded.items, reversals = excluded.reversals,
                             version = excluded.version, summary = excluded.summary",
                    )
                    .bind(payout_id)
                    .bind(entries)
                    .bind(items)
                    .bind(reversals)
                    .bind(crate::finance::PAYOUT_SUMMARY_VERSION)
                    .bind(text)
                    .execute(&self.pool)
                    .await;
                    if let Err(error) = kept {
                        tracing::debug!(payout_id, %error, "a payout's summary was not kept");
                    }
                }
                Ok(Some(summary))
            }


            /// How many entries carry `payout_id`, how many are tied to it, and how many
            /// reversals its payout entries have: what its reconciliation reads, counted.
            async fn payout_counts(&self, payout_id: &str) -> Result<(i64, i64, i64), StoreError> {
                Ok(sqlx::query_as(crate::store::finance_reads::PAYOUT_COUNTS.as_str())
                    .bind(payout_id)
                    .fetch_one(&self.pool)
                    .await?)
            }
        }

        impl crate::store::driver::FinanceReads for $store {
            async fn journal(
                &self,
                filter: &JournalFilter,
                after: Option<JournalCursor>,
                limit: u32,
            ) -> Result<JournalPage, StoreError> {
                let (after_cursor, order) = match filter.newest_first {
                    false => (">", "ASC"),
                    true => ("<", "DESC"),
                };
                // Only the two fixed orders are put into the text; every value is bound.
                let sql = format!(
                    "SELECT je.id, je.effective_date, je.recorded_at, je.source, je.kind, je.movement_id, je.payout_id,
                            je.reference, je.description, je.event_id, je.reverses_entry_id, je.details,
                            (SELECT r.id FROM journal_entries r WHERE r.reverses_entry_id = je.id) AS reversed_by_entry_id
                     FROM journal_entries je
                     WHERE ($1 IS NULL OR je.effective_date >= $1) AND ($2 IS NULL OR je.effective_date <= $2)
                       AND ($3 IS NULL OR EXISTS (SELECT 1 FROM journal_lines l WHERE l.entry_id = je.id AND l.account = $3))
                       AND ($4 IS NULL OR EXISTS (SELECT 1 FROM journal_lines l WHERE l.entry_id = je.id AND l.currency = $4))
                       AND ($5 IS NULL OR je.source = $5) AND ($6 IS NULL OR je.kind = $6)
                       AND ($7 IS NULL OR je.reference = $7) AND ($8 IS NULL OR je.payout_id = $8)
                       AND ($9 IS NULL OR (je.effective_date, je.id) {after_cursor} ($9, $10))
                     ORDER BY je.effective_date {order}, je.id {order}
                     LIMIT $11"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(filter.from)
                .bind(filter.to)
                .bind(filter.account.as_deref())
                .bind(filter.currency.as_deref())
                .bind(filter.source.as_deref())
                .bind(filter.kind.as_deref())
                .bind(filter.reference.as_deref())
                .bind(filter.payout_id.as_deref())
                .bind(after.map(|c| c.effective_date))
                .bind(after.map(|c| c.id).unwrap_or_default())
                .bind(i64::from(limit) + 1)
                .fetch_all(&self.pool)
                .await?;
                let mut items = rows.iter().map(entry_view).collect::<Result<Vec<_>, _>>()?;
                let more = items.len() > limit as usize;
                items.truncate(limit as usize);
                self.attach_lines(&mut items).await?;
                let next_cursor = if more {
                    items.last().map(|e| e.cursor().to_string())
                } else {
                    None
                };
                Ok(JournalPage { items, next_cursor })
            }

            /// One entry with its lines.
            async fn entry(
                &self,
                id: i64,
            ) -> Result<Option<EntryView>, StoreError> {
                let row = sqlx::query(
                    "SELECT je.id, je.effective_date, je.recorded_at, je.source, je.kind, je.movement_id, je.payout_id,
                            je.reference, je.description, je.event_id, je.reverses_entry_id, je.details,
                            (SELECT r.id FROM journal_entries r WHERE r.reverses_entry_id = je.id) AS reversed_by_entry_id
                     FROM journal_entries je WHERE je.id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                let Some(row) = row else {
                    return Ok(None);
                };
                let mut entries = [entry_view(&row)?];
                self.attach_lines(&mut entries).await?;
                let [entry] = entries;
                Ok(Some(entry))
            }

            /// The correction made of `entry_id`, if any.
            async fn correction_of_entry(
                &self,
                entry_id: i64,
            ) -> Result<Option<crate::store::corrections::PastCorrection>, StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, actor, reason, reversal_entry_id, correction_entry_id
                     FROM journal_corrections WHERE entry_id = $1",
                )
                .bind(entry_id)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn reconciliation(
                &self,
                payout_id: &str,
            ) -> Result<Option<Reconciliation>, StoreError> {
                let payout_rows = sqlx::query(
                    "SELECT je.id, e.facts, je.details,
                            EXISTS (SELECT 1 FROM journal_entries r WHERE r.reverses_entry_id = je.id)
                            OR EXISTS (SELECT 1 FROM journal_entries f
                                       WHERE f.kind = 'payout_failed' AND f.payout_id = $1) AS reversed
                     FROM journal_entries je JOIN settlement_events e ON e.id = je.event_id
                     WHERE je.kind = 'payout_paid' AND je.payout_id = $1 ORDER BY je.id",
                )
                .bind(payout_id)
                .fetch_all(&self.pool)
                .await?;
                // One payout entry per currency the payout paid in.
                let mut payouts = Vec::with_capacity(payout_rows.len());
                for row in &payout_rows {
                    let (effect, currency) = effect(row)?;
                    payouts.push((
                        row.try_get("id")?,
                        -effect,
                        currency,
                        row.try_get("reversed")?,
                    ));
                }
                // The payout's items: entries carrying its id (other than the payout itself and its
                // failure), and entries its provider listed as paid out by it. Two branches, each
                // on its own index (an `OR` of the two would walk every entry); disjoint, since the
                // second takes only entries not carrying the id, and an entry is listed by one
                // payout at most.
                let rows = sqlx::query(
                    "SELECT je.id AS id, je.kind, je.movement_id, je.effective_date AS effective_date,
                            e.facts, je.details
                     FROM journal_entries je JOIN settlement_events e ON e.id = je.event_id
                     WHERE je.payout_id = $1 AND je.kind NOT IN ('payout_paid', 'payout_failed')
                     UNION ALL
                     SELECT je.id, je.kind, je.movement_id, je.effective_date, e.facts, je.details
                     FROM payout_items pi JOIN journal_entries je ON je.id = pi.entry_id
                     JOIN settlement_events e ON e.id = je.event_id
                     WHERE pi.payout_id = $1 AND je.payout_id IS DISTINCT FROM $1
                     ORDER BY effective_date, id",
                )
                .bind(payout_id)
                .fetch_all(&self.pool)
                .await?;
                if payouts.is_empty() && rows.is_empty() {
                    return Ok(None);
                }
                let mut items = Vec::with_capacity(rows.len());
                for row in &rows {
                    let (net, currency) = effect(row)?;
                    let effective_date: NaiveDate = row.try_get("effective_date")?;
                    let item = ReconciliationItem {
                        entry_id: row.try_get("id")?,
                        kind: row.try_get("kind")?,
                        movement_id: row.try_get("movement_id")?,
                        effective_date,
                        net: exact(net, &currency),
                    };
                    let details: Option<serde_json::Value> = row.try_get("details")?;
                    let carried = details
                        .as_ref()
                        .and_then(|d| d.get(CARRIED_DETAIL))
                        .and_then(serde_json::Value::as_bool)
                        .unwrap_or(false);
                    items.push((item, net, currency, carried));
                }
                Ok(Some(reconcile(payout_id, payouts, items)))
            }

            async fn payouts(
                &self,
                after: Option<&str>,
                limit: u32,
            ) -> Result<Vec<PayoutSummary>, StoreError> {
                // The page's ids, their counts and their summaries kept under those counts; a
                // payout without one is reconciled (and its summary kept).
                let rows: Vec<(String, i64, i64, i64, Option<i64>, Option<String>)> =
                    sqlx::query_as(crate::store::finance_reads::PAYOUTS_PAGE.as_str())
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                let mut summaries = Vec::with_capacity(rows.len());
                for (id, entries, items, reversals, version, kept) in rows {
                    let kept = kept
                        .filter(|_| version == Some(crate::finance::PAYOUT_SUMMARY_VERSION))
                        .and_then(|text| serde_json::from_str::<PayoutSummary>(&text).ok());
                    let summary = match kept {
                        Some(kept) => Some(kept),
                        None => self.payout_summary(&id, (entries, items, reversals)).await?,
                    };
                    summaries.extend(summary);
                }
                Ok(summaries)
            }

            /// Each kept payout summary the listing would use (its counts are the journal's
            /// now, its version this one's) that differs from its payout's reconciliation, named:
            /// `settle verify`'s `payout_summaries_equal_their_reconciliation`.
            async fn payout_summaries_differing(&self) -> Result<Vec<String>, StoreError> {
                let kept: Vec<(String, i64, i64, i64, String)> = sqlx::query_as(
                    "SELECT payout_id, entries, items, reversals, summary FROM payout_summaries
                     WHERE version = $1 ORDER BY payout_id",
                )
                .bind(crate::finance::PAYOUT_SUMMARY_VERSION)
                .fetch_all(&self.pool)
                .await?;
                let mut differing = Vec::new();
                for (payout_id, entries, items, reversals, summary) in kept {
                    if self.payout_counts(&payout_id).await? != (entries, items, reversals) {
                        continue;
                    }
                    let computed = self
                        .reconciliation(&payout_id)
                        .await?
                        .map(|r| PayoutSummary::from(&r));
                    let kept = serde_json::from_str::<PayoutSummary>(&summary).ok();
                    if kept.is_some() && kept != computed {
                        let status = |s: &Option<PayoutSummary>| {
                            s.as_ref().map_or("none".to_owned(), |s| format!("{:?}", s.status))
                        };
                        differing.push(format!(
                            "payout {payout_id}: kept {}, reconciled {}",
                            status(&kept),
                            status(&computed)
                        ));
                    }
                }
                Ok(differing)
            }
        }

        /// What an entry did to the provider balance, and in which currency.
        fn effect(row: &$row) -> Result<(Decimal, String), StoreError> {
            let facts: Option<serde_json::Value> = row.try_get("facts")?;
            let details: Option<serde_json::Value> = row.try_get("details")?;
            balance_effect(details.as_ref(), facts.as_ref()).map_err(StoreError::Corrupt)
        }

        fn entry_view(row: &$row) -> Result<EntryView, sqlx::Error> {
            Ok(EntryView {
                id: row.try_get("id")?,
                effective_date: row.try_get("effective_date")?,
                recorded_at: row.try_get("recorded_at")?,
                source: row.try_get("source")?,
                kind: row.try_get("kind")?,
                movement_id: row.try_get("movement_id")?,
                payout_id: row.try_get("payout_id")?,
                reference: row.try_get("reference")?,
                description: row.try_get("description")?,
                event_id: row.try_get("event_id")?,
                reverses_entry_id: row.try_get("reverses_entry_id")?,
                reversed_by_entry_id: row.try_get("reversed_by_entry_id")?,
                details: row.try_get("details")?,
                lines: Vec::new(),
            })
        }
    };
}

pub(crate) use finance_reads;

/// The next `$2` payout ids after `$1` in each of the two indexes, each found by one step
/// through its index from the last (a `DISTINCT` or `UNION` over the items would read every item
/// of every payout), each with the counts of the rows its reconciliation reads and its summary
/// kept under the same counts: one statement for a page of the payouts listing.
pub(super) static PAYOUTS_PAGE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE
             items(payout_id, n) AS (
                 SELECT (SELECT min(payout_id) FROM payout_items
                         WHERE payout_id > coalesce($1, '')), 1
                 UNION ALL
                 SELECT (SELECT min(p.payout_id) FROM payout_items p
                         WHERE p.payout_id > items.payout_id), n + 1
                 FROM items WHERE items.payout_id IS NOT NULL AND n < $2),
             entries(payout_id, n) AS (
                 SELECT (SELECT min(payout_id) FROM journal_entries
                         WHERE payout_id > coalesce($1, '')), 1
                 UNION ALL
                 SELECT (SELECT min(e.payout_id) FROM journal_entries e
                         WHERE e.payout_id > entries.payout_id), n + 1
                 FROM entries WHERE entries.payout_id IS NOT NULL AND n < $2),
             ids(payout_id) AS (
                 SELECT payout_id FROM items WHERE payout_id IS NOT NULL
                 UNION
                 SELECT payout_id FROM entries WHERE payout_id IS NOT NULL
                 ORDER BY payout_id LIMIT $2),
             counted(payout_id, entries, items, reversals) AS (
                 SELECT payout_id, {} FROM ids)
         SELECT c.payout_id, c.entries, c.items, c.reversals, k.version, k.summary
         FROM counted c LEFT JOIN payout_summaries k
             ON k.payout_id = c.payout_id AND k.entries = c.entries AND k.items = c.items
            AND k.reversals = c.reversals
         ORDER BY c.payout_id",
        payout_counts("ids.payout_id")
    )
});

/// A payout's counts (`$1`: its id).
pub(super) static PAYOUT_COUNTS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {}", payout_counts("$1")));

/// How many entries carry a payout's id, how many are tied to it, and how many reversals its
/// payout entries have: what its reconciliation reads, counted (no such row is ever updated or
/// deleted, so equal counts mean the same rows), as three columns (`id`: a parameter or a
/// column).
fn payout_counts(id: &str) -> String {
    format!(
        "(SELECT count(*) FROM journal_entries WHERE payout_id = {id}),
         (SELECT count(*) FROM payout_items WHERE payout_id = {id}),
         (SELECT count(*) FROM journal_entries p
          JOIN journal_entries r ON r.reverses_entry_id = p.id
          WHERE p.payout_id = {id} AND p.kind = 'payout_paid')"
    )
}
