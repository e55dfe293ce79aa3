//! The reads of events, dead letters, conflicts and the audit log, written once: their SQL is
//! the same on both backends (`$N` parameters, which SQLite reads too), and `review_reads!`
//! expands it into each backend's store, beside `rows::view_rows!`.

use crate::review::Page;

/// Keeps `limit` items and, when there were more, the cursor of the last one kept.
pub(crate) fn paged<T>(mut items: Vec<T>, limit: u32, id: impl Fn(&T) -> i64) -> Page<T> {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next_cursor = if more { items.last().map(id) } else { None };
    Page { items, next_cursor }
}

/// Implements `driver::ReviewReads` for `$store` (a backend's store with a `pool`, `view_rows!`
/// expanded beside), with its helpers `attempts_of` and `audit_for_event`.
macro_rules! review_reads {
    ($store:ty) => {
        impl $store {
            /// Every attempt of every job the event has had, in order.
            async fn attempts_of(
                &self,
                event_id: EventId,
            ) -> Result<Vec<crate::review::AttemptView>, StoreError> {
                Ok(sqlx::query(
                    "SELECT job_id, attempt, worker, started_at, finished_at, outcome, error_code, error
                     FROM job_attempts WHERE event_id = $1 ORDER BY id",
                )
                .bind(event_id.get())
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(attempt_view)
                .collect::<Result<Vec<_>, _>>()?)
            }

            async fn audit_for_event(&self, event_id: i64) -> Result<Vec<AuditView>, StoreError> {
                Ok(sqlx::query(
                    "SELECT id, at, actor, action, reason, subject_type, subject_id, event_id, before_state, after_state
                     FROM audit_log WHERE event_id = $1 ORDER BY id",
                )
                .bind(event_id)
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(audit_view)
                .collect::<Result<Vec<_>, _>>()?)
            }
        }

        impl crate::store::driver::ReviewReads for $store {
            async fn event(
                &self,
                id: EventId,
            ) -> Result<Option<EventView>, StoreError> {
                let sql = format!("SELECT {EVENT_COLUMNS} FROM settlement_events e WHERE e.id = $1");
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id.get())
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.as_ref().map(event_view).transpose()?)
            }

            async fn event_by_key(
                &self,
                source: &str,
                external_id: &str,
            ) -> Result<Option<EventView>, StoreError> {
                let sql = format!(
                    "SELECT {EVENT_COLUMNS} FROM settlement_events e WHERE e.source = $1 AND e.external_id = $2"
                );
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(source)
                    .bind(external_id)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.as_ref().map(event_view).transpose()?)
            }

            async fn dead_letters(
                &self,
                filter: &DeadLetterFilter,
                page: PageRequest,
            ) -> Result<Page<DeadLetterSummary>, StoreError> {
                let sql = format!(
                    "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
                     WHERE ($1 IS NULL OR d.state = $1) AND ($2 IS NULL OR e.source = $2)
                       AND ($3 IS NULL OR e.kind = $3) AND ($4 IS NULL OR d.error_class = $4)
                       AND ($5 IS NULL OR d.error_code = $5) AND ($6 IS NULL OR d.abandoned_at < $6)
                       AND ($7 IS NULL OR d.abandoned_at > $7) AND ($8 IS NULL OR d.id < $8)
                     ORDER BY d.id DESC LIMIT $9"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(filter.state.map(DeadLetterState::as_str))
                    .bind(filter.source.as_deref())
                    .bind(filter.kind.as_deref())
                    .bind(filter.error_class.map(|c| c.as_str()))
                    .bind(filter.error_code.as_deref())
                    .bind(filter.abandoned_before)
                    .bind(filter.abandoned_after)
                    .bind(page.cursor)
                    .bind(i64::from(page.limit) + 1)
                    .fetch_all(&self.pool)
                    .await?;
                let items = rows
                    .iter()
                    .map(dead_letter_summary)
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(crate::store::review_reads::paged(items, page.limit, |d| d.id))
            }

            async fn dead_letter(
                &self,
                id: i64,
            ) -> Result<Option<DeadLetterDetail>, StoreError> {
                let sql = format!(
                    "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
                     WHERE d.id = $1"
                );
                let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                let dead_letter = dead_letter_summary(&row)?;
                let event_id = EventId::new(dead_letter.event_id);
                let event = self
                    .event(event_id)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt(format!("dead letter {id} has no event")))?;
                let attempts = self.attempts_of(event_id).await?;
                let audit = self.audit_for_event(event_id.get()).await?;
                Ok(Some(DeadLetterDetail {
                    dead_letter,
                    event,
                    attempts,
                    audit,
                }))
            }

            async fn conflicts(
                &self,
                state: Option<&str>,
                page: PageRequest,
            ) -> Result<Page<ConflictView>, StoreError> {
                let sql = format!(
                    "SELECT {CONFLICT_COLUMNS} FROM event_conflicts c JOIN settlement_events e ON e.id = c.event_id
                     WHERE ($1 IS NULL OR c.state = $1) AND ($2 IS NULL OR c.id < $2)
                     ORDER BY c.id DESC LIMIT $3"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(state)
                    .bind(page.cursor)
                    .bind(i64::from(page.limit) + 1)
                    .fetch_all(&self.pool)
                    .await?;
                let items = rows
                    .iter()
                    .map(conflict_view)
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(crate::store::review_reads::paged(items, page.limit, |c| c.id))
            }

            async fn conflict(
                &self,
                id: i64,
            ) -> Result<Option<ConflictDetail>, StoreError> {
                let sql = format!(
                    "SELECT {CONFLICT_COLUMNS} FROM event_conflicts c JOIN settlement_events e ON e.id = c.event_id
                     WHERE c.id = $1"
                );
                let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                let conflict = conflict_view(&row)?;
                let original = self
                    .event(EventId::new(conflict.event_id))
                    .await?
                    .ok_or_else(|| StoreError::Corrupt(format!("conflict {id} has no event")))?;
                let audit = sqlx::query(
                    "SELECT id, at, actor, action, reason, subject_type, subject_id, event_id, before_state, after_state
                     FROM audit_log WHERE subject_type = 'conflict' AND subject_id = $1 ORDER BY id",
                )
                .bind(id)
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(audit_view)
                .collect::<Result<Vec<_>, _>>()?;
                Ok(Some(ConflictDetail {
                    conflict,
                    original,
                    audit,
                }))
            }

            async fn event_detail(
                &self,
                id: EventId,
            ) -> Result<Option<crate::review::EventDetail>, StoreError> {
                let Some(event) = self.event(id).await? else {
                    return Ok(None);
                };
                let erasure = match event.payload_erased_by {
                    Some(erasure) => self.payload_erasure(erasure).await?,
                    None => None,
                };
                let attempts = self.attempts_of(id).await?;
                let sql = format!(
                    "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
                     WHERE d.event_id = $1 ORDER BY d.id"
                );
                let dead_letters = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id.get())
                    .fetch_all(&self.pool)
                    .await?
                    .iter()
                    .map(dead_letter_summary)
                    .collect::<Result<Vec<_>, _>>()?;
                let sql = format!(
                    "SELECT {CONFLICT_COLUMNS} FROM event_conflicts c JOIN settlement_events e ON e.id = c.event_id
                     WHERE c.event_id = $1 ORDER BY c.id"
                );
                let conflicts = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id.get())
                    .fetch_all(&self.pool)
                    .await?
                    .iter()
                    .map(conflict_view)
                    .collect::<Result<Vec<_>, _>>()?;
                let entries: Vec<(i64, String, String, Option<String>, i64)> = sqlx::query_as(
                    "SELECT id, source_key, kind, reference, event_id FROM journal_entries
                     WHERE event_id = $1 OR id = $2 ORDER BY id",
                )
                .bind(id.get())
                .bind(event.posted_entry_id)
                .fetch_all(&self.pool)
                .await?;
                let entries = entries
                    .into_iter()
                    .map(|(entry, source_key, kind, reference, event_id)| crate::review::EntryRef {
                        id: entry,
                        source_key,
                        kind,
                        reference,
                        own: event_id == id.get(),
                    })
                    .collect();
                let audit = self.audit_for_event(id.get()).await?;
                Ok(Some(crate::review::EventDetail {
                    event,
                    erasure,
                    attempts,
                    dead_letters,
                    conflicts,
                    entries,
                    audit,
                }))
            }
        }
    };
}

pub(crate) use review_reads;
