//! Posting resolved movements on SQLite: the same decisions as on PostgreSQL
//! (`store::movements::plan`), in the write transaction, where no other writer can race.

use std::collections::HashMap;

use sqlx::Row;
use sqlx::sqlite::SqliteConnection;
use tracing::debug;

use super::jobs::{EntryRow, complete_job, finish_attempt, insert_entry, set_event_status};
use super::{SqliteStore, now};
use crate::job::{AttemptOutcome, PostError, Posted};
use crate::record::EventStatus;
use crate::state::StateMachine;
use crate::store::StoreError;
use crate::store::movements::{Existing, Plan, ResolvedPost, alias_legacy, lookup_keys, plan};

impl SqliteStore {
    /// The source and stored facts of each event (`None` for an event recorded invalid).
    pub(in crate::store) async fn facts_of(
        &self,
        events: &[crate::ids::EventId],
    ) -> Result<HashMap<i64, (String, Option<serde_json::Value>)>, StoreError> {
        let ids: Vec<i64> = events.iter().map(|e| e.get()).collect();
        let rows: Vec<(i64, String, Option<serde_json::Value>)> = sqlx::query_as(
            "SELECT id, source, facts FROM settlement_events WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_default())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, source, facts)| (id, (source, facts)))
            .collect())
    }

    pub(in crate::store) async fn post_resolved(
        &self,
        post: &ResolvedPost<'_>,
    ) -> Result<Posted, PostError> {
        let mut tx = self.write().await?;
        // Any error leaves the transaction to roll back: nothing of this job is kept.
        let posted = post_resolved_in(&mut tx, post).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(posted)
    }

    /// Several jobs in one write transaction, each in a savepoint of its own (one refused for
    /// its own reason writes nothing); if the database fails anywhere, each is posted alone.
    pub(in crate::store) async fn post_resolved_many(
        &self,
        posts: &[ResolvedPost<'_>],
    ) -> Vec<Result<Posted, PostError>> {
        if posts.len() > 1 {
            match self.post_resolved_together(posts).await {
                Ok(results) => return results,
                Err(error) => {
                    debug!(%error, jobs = posts.len(), "group of resolved postings failed; posting one by one")
                }
            }
        }
        let mut results = Vec::with_capacity(posts.len());
        for post in posts {
            results.push(self.post_resolved(post).await);
        }
        results
    }

    async fn post_resolved_together(
        &self,
        posts: &[ResolvedPost<'_>],
    ) -> Result<Vec<Result<Posted, PostError>>, StoreError> {
        let mut tx = self.write().await?;
        let mut results = Vec::with_capacity(posts.len());
        for post in posts {
            let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
            match post_resolved_in(&mut savepoint, post).await {
                Ok(posted) => {
                    savepoint.commit().await?;
                    results.push(Ok(posted));
                }
                Err(PostError::Store(error)) => return Err(error),
                Err(refused) => {
                    savepoint.rollback().await?;
                    results.push(Err(refused));
                }
            }
        }
        tx.commit().await?;
        Ok(results)
    }
}

/// One job's resolved posting in the caller's write transaction. On an error some of it may be
/// written: the caller rolls back.
async fn post_resolved_in(
    conn: &mut SqliteConnection,
    post: &ResolvedPost<'_>,
) -> Result<Posted, PostError> {
    let row = sqlx::query(
        "SELECT status, job_id, facts, received_at FROM settlement_events WHERE id = ?1",
    )
    .bind(post.job.event_id.get())
    .fetch_optional(&mut *conn)
    .await
    .map_err(StoreError::from)?;
    let event = match &row {
        Some(row) => Some((
            row.try_get::<String, _>("status")
                .map_err(StoreError::from)?,
            row.try_get::<String, _>("job_id")
                .map_err(StoreError::from)?,
            row.try_get::<Option<serde_json::Value>, _>("facts")
                .map_err(StoreError::from)?,
            row.try_get::<chrono::DateTime<chrono::Utc>, _>("received_at")
                .map_err(StoreError::from)?,
        )),
        None => None,
    };
    let keys: Vec<&str> = post
        .resolved
        .entries
        .iter()
        .map(|e| e.movement.source_key())
        .collect();
    let mut existing =
        existing_entries(&mut *conn, &lookup_keys(std::slice::from_ref(post))).await?;
    alias_legacy(std::slice::from_ref(post), &mut existing);
    let status = event
        .as_ref()
        .map(|(status, job, facts, _)| (status.as_str(), job.as_str(), facts.as_ref()));
    let Plan {
        mut results,
        settled,
        ready,
        to_write,
        counts,
    } = plan(std::slice::from_ref(post), &[status], &existing);
    if !settled.is_empty() {
        finish_attempt(
            &mut *conn,
            post.job,
            post.attempt,
            AttemptOutcome::Settled,
            None,
        )
        .await?;
        complete_job(&mut *conn, &post.job.job_id).await?;
    }
    let (Some(&(written, found)), Some((_, _, _, received_at))) = (counts.first(), &event) else {
        return results.pop().flatten().unwrap_or_else(|| {
            Err(StoreError::Corrupt("a posting without an answer".into()).into())
        });
    };
    debug_assert_eq!(ready, [0]);
    let mut entries: HashMap<&str, i64> = existing
        .iter()
        .map(|(key, e)| (key.as_str(), e.entry_id))
        .collect();
    for (event_id, entry) in &to_write {
        let m = &entry.movement;
        let details = m.details().to_string();
        let fingerprint = m.fingerprint().to_hex();
        let id = insert_entry(
            &mut *conn,
            &EntryRow {
                event_id: *event_id,
                source: m.source_key().split('/').next().unwrap_or_default(),
                kind: m.kind().as_str(),
                movement_id: m.id().as_str(),
                payout_id: m.payout_id().map(|p| p.as_str()),
                reference: m.reference().map(|r| r.as_str()),
                fingerprint: &fingerprint,
                draft: &entry.draft,
                reverses: None,
                details: Some(details),
            },
        )
        .await?;
        entries.insert(m.source_key(), id);
    }
    let ids: Vec<i64> = keys
        .iter()
        .filter_map(|k| entries.get(k).copied())
        .collect();
    if let Some(payout) = &post.resolved.payout {
        for (key, id) in keys.iter().zip(&ids) {
            sqlx::query(
                "INSERT INTO payout_items (entry_id, source, payout_id, event_id, tied_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (entry_id) DO NOTHING",
            )
            .bind(id)
            .bind(key.split('/').next().unwrap_or_default())
            .bind(payout.as_str())
            .bind(post.job.event_id.get())
            .bind(now())
            .execute(&mut *conn)
            .await
            .map_err(StoreError::from)?;
        }
    }
    set_event_status(
        &mut *conn,
        post.job.event_id,
        EventStatus::Recorded.transition(EventStatus::Posted)?,
        ids.first().copied(),
    )
    .await?;
    finish_attempt(
        &mut *conn,
        post.job,
        post.attempt,
        AttemptOutcome::Posted,
        None,
    )
    .await?;
    complete_job(&mut *conn, &post.job.job_id).await?;
    Ok(Posted::Movements {
        written,
        existing: found,
        received_at: *received_at,
    })
}

async fn existing_entries(
    conn: &mut SqliteConnection,
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
        .fetch_optional(&mut *conn)
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
