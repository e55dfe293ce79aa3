//! Ops and finance reads of events, dead letters, conflicts and the audit log; the audited
//! decisions on dead letters and conflicts.

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgStore;
use super::jobs::{enqueue_fresh_jobs, set_event_status};
use crate::ids::EventId;
use crate::record::EventStatus;
use crate::review::{
    AttemptView, AuditView, ConflictDetail, ConflictState, ConflictView, DeadLetterDetail,
    DeadLetterFilter, DeadLetterState, DeadLetterSummary, Decision, EventView, Page, PageRequest,
};
use crate::state::{StateMachine, Transition};
use crate::store::StoreError;
use crate::store::decide::DecisionRows;

use crate::store::rows::{CONFLICT_COLUMNS, DEAD_LETTER_COLUMNS, EVENT_COLUMNS};

impl PgStore {
    pub(in crate::store) async fn event(
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

    pub(in crate::store) async fn event_by_key(
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

    pub(in crate::store) async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        page: PageRequest,
    ) -> Result<Page<DeadLetterSummary>, StoreError> {
        let sql = format!(
            "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
             WHERE ($1::text IS NULL OR d.state = $1) AND ($2::text IS NULL OR e.source = $2)
               AND ($3::text IS NULL OR e.kind = $3) AND ($4::text IS NULL OR d.error_class = $4)
               AND ($5::text IS NULL OR d.error_code = $5) AND ($6::timestamptz IS NULL OR d.abandoned_at < $6)
               AND ($7::timestamptz IS NULL OR d.abandoned_at > $7) AND ($8::bigint IS NULL OR d.id < $8)
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
        Ok(paged(items, page.limit, |d| d.id))
    }

    pub(in crate::store) async fn dead_letter(
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
        let attempts = sqlx::query(
            "SELECT job_id, attempt, worker, started_at, finished_at, outcome, error_code, error
             FROM job_attempts WHERE event_id = $1 ORDER BY id",
        )
        .bind(event_id.get())
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(attempt_view)
        .collect::<Result<Vec<_>, _>>()?;
        let audit = self.audit_for_event(event_id.get()).await?;
        Ok(Some(DeadLetterDetail {
            dead_letter,
            event,
            attempts,
            audit,
        }))
    }

    pub(in crate::store) async fn conflicts(
        &self,
        state: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<ConflictView>, StoreError> {
        let sql = format!(
            "SELECT {CONFLICT_COLUMNS} FROM event_conflicts c JOIN settlement_events e ON e.id = c.event_id
             WHERE ($1::text IS NULL OR c.state = $1) AND ($2::bigint IS NULL OR c.id < $2)
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
        Ok(paged(items, page.limit, |c| c.id))
    }

    pub(in crate::store) async fn conflict(
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

/// Keeps `limit` items and, when there were more, the cursor of the last one kept.
fn paged<T>(mut items: Vec<T>, limit: u32, id: impl Fn(&T) -> i64) -> Page<T> {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next_cursor = if more { items.last().map(id) } else { None };
    Page { items, next_cursor }
}

impl DecisionRows for PgStore {
    type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

    async fn begin_decision(&self) -> Result<Self::Tx, StoreError> {
        Ok(self.pool.begin().await?)
    }

    async fn commit_decision(&self, tx: Self::Tx) -> Result<(), StoreError> {
        Ok(tx.commit().await?)
    }

    async fn lock_dead_letter(
        tx: &mut Self::Tx,
        id: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        let row: Option<(String, i64)> =
            sqlx::query_as("SELECT state, event_id FROM dead_letters WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?;
        if let Some((_, event_id)) = row {
            // The event row is locked too: a worker or another action touching it waits.
            sqlx::query("SELECT 1 FROM settlement_events WHERE id = $1 FOR UPDATE")
                .bind(event_id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(row)
    }

    async fn open_dead_letter_of(
        tx: &mut Self::Tx,
        event_id: i64,
    ) -> Result<Option<i64>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT id FROM dead_letters WHERE event_id = $1 AND state = $2")
                .bind(event_id)
                .bind(DeadLetterState::Open.label())
                .fetch_optional(&mut **tx)
                .await?,
        )
    }

    async fn set_event_status(
        tx: &mut Self::Tx,
        event_id: i64,
        transition: Transition<EventStatus>,
    ) -> Result<(), StoreError> {
        set_event_status(tx, EventId::new(event_id), transition, None).await
    }

    async fn give_fresh_job(tx: &mut Self::Tx, event_id: i64) -> Result<String, StoreError> {
        enqueue_fresh_jobs(tx, &[event_id]).await?;
        Ok(
            sqlx::query_scalar("SELECT job_id FROM settlement_events WHERE id = $1")
                .bind(event_id)
                .fetch_one(&mut **tx)
                .await?,
        )
    }

    async fn write_dead_letter(
        tx: &mut Self::Tx,
        id: i64,
        transition: Transition<DeadLetterState>,
        decision: &Decision,
        requeued_job_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE dead_letters SET state = $3, decided_at = now(), decided_by = $4,
                 decision_reason = $5, requeued_job_id = $6
             WHERE id = $1 AND state = $2",
        )
        .bind(id)
        .bind(transition.from().label())
        .bind(transition.to().label())
        .bind(&decision.actor)
        .bind(&decision.reason)
        .bind(requeued_job_id)
        .execute(&mut **tx)
        .await?;
        match done.rows_affected() {
            1 => Ok(()),
            _ => Err(transition.stale()),
        }
    }

    async fn lock_conflict(
        tx: &mut Self::Tx,
        id: i64,
    ) -> Result<Option<(String, i64)>, StoreError> {
        Ok(
            sqlx::query_as("SELECT state, event_id FROM event_conflicts WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?,
        )
    }

    async fn write_conflict(
        tx: &mut Self::Tx,
        id: i64,
        transition: Transition<ConflictState>,
        decision: &Decision,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE event_conflicts SET state = $3, resolved_at = now(), resolved_by = $4,
                 resolution_reason = $5
             WHERE id = $1 AND state = $2",
        )
        .bind(id)
        .bind(transition.from().label())
        .bind(transition.to().label())
        .bind(&decision.actor)
        .bind(&decision.reason)
        .execute(&mut **tx)
        .await?;
        match done.rows_affected() {
            1 => Ok(()),
            _ => Err(transition.stale()),
        }
    }

    async fn audit(
        tx: &mut Self::Tx,
        decision: &Decision,
        action: &str,
        (subject_type, subject_id): (&str, i64),
        event_id: i64,
        (before, after): (&str, &str),
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO audit_log (actor, action, reason, subject_type, subject_id, event_id,
                                    before_state, after_state)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&decision.actor)
        .bind(action)
        .bind(&decision.reason)
        .bind(subject_type)
        .bind(subject_id)
        .bind(event_id)
        .bind(before)
        .bind(after)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

crate::store::rows::view_rows!(PgRow);
