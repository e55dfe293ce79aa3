//! Reads and audited decisions on SQLite (see the PostgreSQL module for the contract); every
//! decision runs under the database write lock.

use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};

use super::jobs::{enqueue_fresh_jobs, set_event_status};
use super::{SqliteStore, now};
use crate::ids::EventId;
use crate::record::EventStatus;
use crate::review::{
    AttemptView, AuditView, ConflictDetail, ConflictState, ConflictView, DeadLetterDetail,
    DeadLetterFilter, DeadLetterState, DeadLetterSummary, Decided, Decision, DecisionError,
    EventView, Page, PageRequest, Step, conflict_step, dead_letter_step,
};
use crate::state::{StateMachine, Transition};
use crate::store::StoreError;

use crate::store::rows::{CONFLICT_COLUMNS, DEAD_LETTER_COLUMNS, EVENT_COLUMNS};

impl SqliteStore {
    pub(in crate::store) async fn event(
        &self,
        id: EventId,
    ) -> Result<Option<EventView>, StoreError> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM settlement_events e WHERE e.id = ?1");
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
            "SELECT {EVENT_COLUMNS} FROM settlement_events e WHERE e.source = ?1 AND e.external_id = ?2"
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
             WHERE (?1IS NULL OR d.state = ?1) AND (?2IS NULL OR e.source = ?2)
               AND (?3IS NULL OR e.kind = ?3) AND (?4IS NULL OR d.error_class = ?4)
               AND (?5IS NULL OR d.error_code = ?5) AND (?6IS NULL OR d.abandoned_at < ?6)
               AND (?7IS NULL OR d.abandoned_at > ?7) AND (?8IS NULL OR d.id < ?8)
             ORDER BY d.id DESC LIMIT ?9"
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
             WHERE d.id = ?1"
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
             FROM job_attempts WHERE event_id = ?1 ORDER BY id",
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

    pub(in crate::store) async fn requeue_dead_letter(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        let mut tx = self.write().await?;
        let (state, event_id) = lock_dead_letter(&mut tx, id).await?;
        let Step::Apply(transition) = dead_letter_step(id, state, DeadLetterState::Requeued)?
        else {
            if let Some(newer) = open_dead_letter_of(&mut tx, event_id).await? {
                return Err(DecisionError::AlreadyDecided(format!(
                    "dead letter {id} was requeued and failed again as dead letter {newer}; act on {newer}"
                )));
            }
            return Ok(unchanged(id, event_id, state));
        };
        let event = EventId::new(event_id);
        set_event_status(
            &mut tx,
            event,
            EventStatus::Abandoned.transition(EventStatus::Recorded)?,
            None,
        )
        .await?;
        enqueue_fresh_jobs(&mut tx, &[event_id]).await?;
        let job_id: String =
            sqlx::query_scalar("SELECT job_id FROM settlement_events WHERE id = ?1")
                .bind(event_id)
                .fetch_one(&mut *tx)
                .await?;
        decide_dead_letter(&mut tx, id, transition, decision, Some(&job_id)).await?;
        audit(
            &mut tx,
            decision,
            "dead_letter.requeue",
            ("dead_letter", id),
            event_id,
            transition.from(),
            transition.to(),
        )
        .await?;
        tx.commit().await?;
        self.jobs_inserted.notify_waiters();
        Ok(Decided {
            subject_id: id,
            event_id,
            changed: true,
            state: transition.to().as_str().into(),
            job_id: Some(job_id),
        })
    }

    pub(in crate::store) async fn discard_dead_letter(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        decision.require_reason()?;
        let mut tx = self.write().await?;
        let (state, event_id) = lock_dead_letter(&mut tx, id).await?;
        let Step::Apply(transition) = dead_letter_step(id, state, DeadLetterState::Discarded)?
        else {
            return Ok(unchanged(id, event_id, state));
        };
        set_event_status(
            &mut tx,
            EventId::new(event_id),
            EventStatus::Abandoned.transition(EventStatus::Discarded)?,
            None,
        )
        .await?;
        decide_dead_letter(&mut tx, id, transition, decision, None).await?;
        audit(
            &mut tx,
            decision,
            "dead_letter.discard",
            ("dead_letter", id),
            event_id,
            transition.from(),
            transition.to(),
        )
        .await?;
        tx.commit().await?;
        Ok(Decided {
            subject_id: id,
            event_id,
            changed: true,
            state: transition.to().as_str().into(),
            job_id: None,
        })
    }

    pub(in crate::store) async fn conflicts(
        &self,
        state: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<ConflictView>, StoreError> {
        let sql = format!(
            "SELECT {CONFLICT_COLUMNS} FROM event_conflicts c JOIN settlement_events e ON e.id = c.event_id
             WHERE (?1IS NULL OR c.state = ?1) AND (?2IS NULL OR c.id < ?2)
             ORDER BY c.id DESC LIMIT ?3"
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
             WHERE c.id = ?1"
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
             FROM audit_log WHERE subject_type = 'conflict' AND subject_id = ?1 ORDER BY id",
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

    pub(in crate::store) async fn resolve_conflict(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        decision.require_reason()?;
        let mut tx = self.write().await?;
        let row: Option<(String, i64)> =
            sqlx::query_as("SELECT state, event_id FROM event_conflicts WHERE id = ?1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let (state, event_id) = row.ok_or(DecisionError::NotFound("conflict"))?;
        let state = ConflictState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("conflict {id} has state {state:?}")))?;
        let Step::Apply(transition) = conflict_step(id, state, ConflictState::Resolved)? else {
            return Ok(Decided {
                subject_id: id,
                event_id,
                changed: false,
                state: state.as_str().into(),
                job_id: None,
            });
        };
        let done = sqlx::query(
            "UPDATE event_conflicts SET state = ?5, resolved_at = ?4, resolved_by = ?2,
                 resolution_reason = ?3
             WHERE id = ?1 AND state = ?6",
        )
        .bind(id)
        .bind(&decision.actor)
        .bind(&decision.reason)
        .bind(now())
        .bind(transition.to().label())
        .bind(transition.from().label())
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(transition.stale().into());
        }
        insert_audit(
            &mut tx,
            decision,
            "conflict.resolve",
            ("conflict", id),
            event_id,
            (transition.from().label(), transition.to().label()),
        )
        .await?;
        tx.commit().await?;
        Ok(Decided {
            subject_id: id,
            event_id,
            changed: true,
            state: transition.to().as_str().into(),
            job_id: None,
        })
    }

    async fn audit_for_event(&self, event_id: i64) -> Result<Vec<AuditView>, StoreError> {
        Ok(sqlx::query(
            "SELECT id, at, actor, action, reason, subject_type, subject_id, event_id, before_state, after_state
             FROM audit_log WHERE event_id = ?1 ORDER BY id",
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

fn unchanged(id: i64, event_id: i64, state: DeadLetterState) -> Decided {
    Decided {
        subject_id: id,
        event_id,
        changed: false,
        state: state.as_str().into(),
        job_id: None,
    }
}

async fn lock_dead_letter(
    conn: &mut SqliteConnection,
    id: i64,
) -> Result<(DeadLetterState, i64), DecisionError> {
    let row: Option<(String, i64)> =
        sqlx::query_as("SELECT state, event_id FROM dead_letters WHERE id = ?1")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    let (state, event_id) = row.ok_or(DecisionError::NotFound("dead letter"))?;
    let state = DeadLetterState::parse(&state)
        .ok_or_else(|| StoreError::Corrupt(format!("dead letter {id} has state {state:?}")))?;
    Ok((state, event_id))
}

async fn open_dead_letter_of(
    conn: &mut SqliteConnection,
    event_id: i64,
) -> Result<Option<i64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT id FROM dead_letters WHERE event_id = ?1 AND state = 'open'")
            .bind(event_id)
            .fetch_optional(&mut *conn)
            .await?,
    )
}

/// Writes a dead-letter decision (a move made by `StateMachine::transition`): refused when the
/// dead letter is no longer in the move's `from` state.
async fn decide_dead_letter(
    conn: &mut SqliteConnection,
    id: i64,
    transition: Transition<DeadLetterState>,
    decision: &Decision,
    requeued_job_id: Option<&str>,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE dead_letters SET state = ?3, decided_at = ?7, decided_by = ?4, decision_reason = ?5,
             requeued_job_id = ?6
         WHERE id = ?1 AND state = ?2",
    )
    .bind(id)
    .bind(transition.from().label())
    .bind(transition.to().label())
    .bind(&decision.actor)
    .bind(&decision.reason)
    .bind(requeued_job_id)
    .bind(now())
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(transition.stale())
    }
}

async fn audit(
    conn: &mut SqliteConnection,
    decision: &Decision,
    action: &str,
    subject: (&str, i64),
    event_id: i64,
    before: DeadLetterState,
    after: DeadLetterState,
) -> Result<(), StoreError> {
    insert_audit(
        conn,
        decision,
        action,
        subject,
        event_id,
        (before.as_str(), after.as_str()),
    )
    .await
}

async fn insert_audit(
    conn: &mut SqliteConnection,
    decision: &Decision,
    action: &str,
    (subject_type, subject_id): (&str, i64),
    event_id: i64,
    (before, after): (&str, &str),
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO audit_log (actor, action, reason, subject_type, subject_id, event_id, before_state, after_state, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .bind(&decision.actor)
    .bind(action)
    .bind(&decision.reason)
    .bind(subject_type)
    .bind(subject_id)
    .bind(event_id)
    .bind(before)
    .bind(after)
    .bind(now())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

crate::store::rows::view_rows!(SqliteRow);
