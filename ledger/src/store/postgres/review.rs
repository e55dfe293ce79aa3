//! Events, dead letters, conflicts and the audit log on PostgreSQL: the shared reads
//! (`store::review_reads`) and the rows the shared decisions (`store::decide`) read and write.

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgStore;
use super::jobs::{enqueue_fresh_jobs, set_event_status};
use crate::ids::EventId;
use crate::review::{
    AttemptView, AuditView, ConflictDetail, ConflictState, ConflictView, DeadLetterDetail,
    DeadLetterFilter, DeadLetterState, DeadLetterSummary, Decision, EventView, Page, PageRequest,
};
use crate::state::EventStatus;
use crate::state::{StateMachine, Transition};
use crate::store::StoreError;
use crate::store::decide::DecisionRows;
use crate::store::driver::Retention;

use crate::store::rows::{CONFLICT_COLUMNS, DEAD_LETTER_COLUMNS, EVENT_COLUMNS};

crate::store::review_reads::review_reads!(PgStore);

impl DecisionRows for PgStore {
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
