//! Event search: only the conditions a filter sets, each one an index can answer, newest first
//! by id with an id cursor (so a page never repeats or skips an event, however many arrive
//! meanwhile). The SQL is built once for both backends by `event_search!`; they differ only in
//! how an external id prefix is compared as bytes (`COLLATE "C"` on PostgreSQL) and how a set of
//! ids found in another table is made to drive the lookup.

/// Implements `driver::EventSearch` for `$store` over `$db`; `$bytes` makes a text
/// comparison bytewise; `$explain` is the backend's EXPLAIN; `$ids_open` .. `$ids_close` wrap a
/// subquery of event ids so that the database looks those events up by id (PostgreSQL
/// evaluates `ARRAY(...)` once and probes the primary key; SQLite plans `IN (...)` that way).
macro_rules! event_search {
    ($store:ty, $db:ty, $bytes:literal, $explain:literal, $ids_open:literal, $ids_close:literal) => {
        impl $store {
            fn search_query(
                filter: &crate::review::EventFilter,
                before: Option<i64>,
                limit: i64,
                explain: bool,
            ) -> sqlx::QueryBuilder<$db> {
                let mut q = sqlx::QueryBuilder::new(if explain { $explain } else { "" });
                q.push(
                    "SELECT e.id, e.source, e.external_id, e.status, e.kind, e.movement_id, e.received_at,
                            e.posted_entry_id, d.id AS dead_letter_id, d.error_class, d.error_code
                     FROM settlement_events e",
                );
                q.push(
                    " LEFT JOIN dead_letters d ON d.event_id = e.id AND d.state = 'open'
                     WHERE 1 = 1",
                );
                // Filters answered from another table drive the search: the few events they
                // name are looked up by id, never the whole table walked to test each one.
                if let Some(reference) = &filter.reference {
                    q.push($ids_open)
                        .push("SELECT je.event_id FROM journal_entries je WHERE je.reference = ")
                        .push_bind(reference.clone())
                        .push(" UNION SELECT e2.id FROM journal_entries je2 JOIN settlement_events e2 ON e2.posted_entry_id = je2.id WHERE je2.reference = ")
                        .push_bind(reference.clone())
                        .push($ids_close);
                }
                if let Some(payout) = &filter.payout_id {
                    q.push($ids_open)
                        .push("SELECT je.event_id FROM journal_entries je WHERE je.payout_id = ")
                        .push_bind(payout.clone())
                        .push(" UNION SELECT pi.event_id FROM payout_items pi WHERE pi.payout_id = ")
                        .push_bind(payout.clone())
                        .push(" UNION SELECT e2.id FROM journal_entries je2 JOIN settlement_events e2 ON e2.posted_entry_id = je2.id WHERE je2.payout_id = ")
                        .push_bind(payout.clone())
                        .push($ids_close);
                }
                if let Some(class) = &filter.error_class {
                    q.push($ids_open)
                        .push("SELECT dc.event_id FROM dead_letters dc WHERE dc.error_class = ")
                        .push_bind(class.clone())
                        .push($ids_close);
                }
                if let Some(code) = &filter.error_code {
                    q.push($ids_open)
                        .push("SELECT dd.event_id FROM dead_letters dd WHERE dd.error_code = ")
                        .push_bind(code.clone())
                        .push($ids_close);
                }
                if let Some(source) = &filter.source {
                    q.push(" AND e.source = ").push_bind(source.clone());
                }
                if let Some(id) = &filter.external_id {
                    // Compared as bytes too, so the prefix's index answers it without the
                    // source (equality is the same under either comparison).
                    q.push(concat!(" AND e.external_id", $bytes, " = "))
                        .push_bind(id.clone());
                }
                if let Some(prefix) = &filter.external_id_prefix {
                    q.push(concat!(" AND e.external_id", $bytes, " >= "))
                        .push_bind(prefix.clone())
                        .push(concat!(" AND e.external_id", $bytes, " < "))
                        .push_bind(format!("{prefix}\u{10FFFF}"));
                }
                if let Some(kind) = &filter.kind {
                    q.push(" AND e.kind = ").push_bind(kind.clone());
                }
                if let Some(status) = &filter.status {
                    q.push(" AND e.status = ").push_bind(status.clone());
                }
                if let Some(movement) = &filter.movement_id {
                    q.push(" AND e.movement_id = ").push_bind(movement.clone());
                }
                if let Some(from) = filter.received_from {
                    q.push(" AND e.received_at >= ").push_bind(from);
                }
                if let Some(to) = filter.received_to {
                    q.push(" AND e.received_at < ").push_bind(to);
                }
                if let Some(before) = before {
                    q.push(" AND e.id < ").push_bind(before);
                }
                q.push(" ORDER BY e.id DESC LIMIT ").push_bind(limit);
                q
            }
        }

        impl crate::store::driver::EventSearch for $store {
            async fn search_events(
                &self,
                filter: &crate::review::EventFilter,
                page: crate::review::PageRequest,
            ) -> Result<crate::review::Page<crate::review::EventSummary>, crate::store::StoreError>
            {
                use sqlx::Row;
                let limit = i64::from(page.limit);
                let rows = Self::search_query(filter, page.cursor, limit + 1, false)
                    .build()
                    .fetch_all(&self.pool)
                    .await?;
                let mut items = Vec::with_capacity(rows.len());
                for row in &rows {
                    items.push(crate::review::EventSummary {
                        id: row.try_get("id")?,
                        source: row.try_get("source")?,
                        external_id: row.try_get("external_id")?,
                        status: row.try_get("status")?,
                        kind: row.try_get("kind")?,
                        movement_id: row.try_get("movement_id")?,
                        received_at: row.try_get("received_at")?,
                        posted_entry_id: row.try_get("posted_entry_id")?,
                        dead_letter_id: row.try_get("dead_letter_id")?,
                        error_class: row.try_get("error_class")?,
                        error_code: row.try_get("error_code")?,
                    });
                }
                let more = items.len() > page.limit as usize;
                items.truncate(page.limit as usize);
                let next_cursor = if more { items.last().map(|e| e.id) } else { None };
                Ok(crate::review::Page { items, next_cursor })
            }

            /// The plan the database makes for a search (its EXPLAIN, one line per row).
            async fn search_plan(
                &self,
                filter: &crate::review::EventFilter,
            ) -> Result<String, crate::store::StoreError> {
                use sqlx::Row;
                let rows = Self::search_query(filter, None, 51, true)
                    .build()
                    .fetch_all(&self.pool)
                    .await?;
                let mut lines = Vec::with_capacity(rows.len());
                for row in &rows {
                    let column = row.columns().len() - 1;
                    lines.push(row.try_get::<String, _>(column)?);
                }
                Ok(lines.join("\n"))
            }
        }
    };
}

pub(crate) use event_search;
