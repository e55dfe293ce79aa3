//! Reading rows into views: written once, expanded for each backend's row type.

pub(crate) const EVENT_COLUMNS: &str = "e.id, e.source, e.external_id, e.status, e.kind, e.movement_id, e.fingerprint,
    e.facts, e.validation_error, e.payload, e.payload_erased_by, e.job_id, e.posted_entry_id, e.received_at, e.status_changed_at";

pub(crate) const DEAD_LETTER_COLUMNS: &str = "d.id, d.event_id, e.source, e.external_id, e.kind, d.state, d.error_class,
    d.error_code, d.last_error, d.attempts, d.abandoned_at, d.decided_at, d.decided_by, d.decision_reason";

pub(crate) const CONFLICT_COLUMNS: &str = "c.id, c.event_id, e.source, e.external_id, c.state, c.deliveries,
    c.first_seen_at, c.last_seen_at, c.fingerprint, c.facts, c.validation_error, c.payload, c.payload_erased_by, c.resolved_at,
    c.resolved_by, c.resolution_reason";

/// Defines `event_view`, `dead_letter_summary`, `attempt_view`, `audit_view` and `conflict_view`
/// over `$row` (the backends' columns have the same names and decode to the same types).
macro_rules! view_rows {
    ($row:ty) => {
        /// A state column, as its state machine's enum (a label settle never writes is an error).
        fn state_of<S: $crate::state::StateMachine>(
            row: &$row,
            column: &str,
        ) -> Result<S, sqlx::Error> {
            let text: String = row.try_get(column)?;
            S::parse(&text).ok_or_else(|| sqlx::Error::ColumnDecode {
                index: column.into(),
                source: format!("{} state {text:?} is not one settle writes", S::MACHINE).into(),
            })
        }

        fn event_view(row: &$row) -> Result<EventView, sqlx::Error> {
            Ok(EventView {
                id: row.try_get("id")?,
                source: row.try_get("source")?,
                external_id: row.try_get("external_id")?,
                status: state_of(row, "status")?,
                kind: row.try_get("kind")?,
                movement_id: row.try_get("movement_id")?,
                fingerprint: row.try_get("fingerprint")?,
                facts: row.try_get("facts")?,
                validation_error: row.try_get("validation_error")?,
                payload_erased_by: row.try_get("payload_erased_by")?,
                payload: match row.try_get::<Option<i64>, _>("payload_erased_by")? {
                    Some(_) => None,
                    None => Some(row.try_get("payload")?),
                },
                job_id: row.try_get("job_id")?,
                posted_entry_id: row.try_get("posted_entry_id")?,
                received_at: row.try_get("received_at")?,
                status_changed_at: row.try_get("status_changed_at")?,
            })
        }

        fn dead_letter_summary(row: &$row) -> Result<DeadLetterSummary, sqlx::Error> {
            Ok(DeadLetterSummary {
                id: row.try_get("id")?,
                event_id: row.try_get("event_id")?,
                source: row.try_get("source")?,
                external_id: row.try_get("external_id")?,
                kind: row.try_get("kind")?,
                state: state_of(row, "state")?,
                error_class: {
                    let class: String = row.try_get("error_class")?;
                    $crate::job::ErrorClass::parse(&class).ok_or_else(|| {
                        sqlx::Error::ColumnDecode {
                            index: "error_class".into(),
                            source: format!("error class {class:?} is not one settle writes")
                                .into(),
                        }
                    })?
                },
                error_code: row.try_get("error_code")?,
                last_error: row.try_get("last_error")?,
                attempts: row.try_get("attempts")?,
                abandoned_at: row.try_get("abandoned_at")?,
                decided_at: row.try_get("decided_at")?,
                decided_by: row.try_get("decided_by")?,
                decision_reason: row.try_get("decision_reason")?,
            })
        }

        fn attempt_view(row: &$row) -> Result<AttemptView, sqlx::Error> {
            Ok(AttemptView {
                job_id: row.try_get("job_id")?,
                attempt: row.try_get("attempt")?,
                worker: row.try_get("worker")?,
                started_at: row.try_get("started_at")?,
                finished_at: row.try_get("finished_at")?,
                outcome: match row.try_get::<Option<String>, _>("outcome")? {
                    None => None,
                    Some(text) => {
                        Some($crate::job::AttemptOutcome::parse(&text).ok_or_else(|| {
                            sqlx::Error::ColumnDecode {
                                index: "outcome".into(),
                                source: format!(
                                    "attempt outcome {text:?} is not one settle writes"
                                )
                                .into(),
                            }
                        })?)
                    }
                },
                error_code: row.try_get("error_code")?,
                error: row.try_get("error")?,
            })
        }

        fn audit_view(row: &$row) -> Result<AuditView, sqlx::Error> {
            Ok(AuditView {
                id: row.try_get("id")?,
                at: row.try_get("at")?,
                actor: row.try_get("actor")?,
                action: row.try_get("action")?,
                reason: row.try_get("reason")?,
                subject_type: row.try_get("subject_type")?,
                subject_id: row.try_get("subject_id")?,
                event_id: row.try_get("event_id")?,
                before_state: row.try_get("before_state")?,
                after_state: row.try_get("after_state")?,
            })
        }

        fn conflict_view(row: &$row) -> Result<ConflictView, sqlx::Error> {
            Ok(ConflictView {
                id: row.try_get("id")?,
                event_id: row.try_get("event_id")?,
                source: row.try_get("source")?,
                external_id: row.try_get("external_id")?,
                state: state_of(row, "state")?,
                deliveries: row.try_get("deliveries")?,
                first_seen_at: row.try_get("first_seen_at")?,
                last_seen_at: row.try_get("last_seen_at")?,
                fingerprint: row.try_get("fingerprint")?,
                facts: row.try_get("facts")?,
                validation_error: row.try_get("validation_error")?,
                payload_erased_by: row.try_get("payload_erased_by")?,
                payload: match row.try_get::<Option<i64>, _>("payload_erased_by")? {
                    Some(_) => None,
                    None => Some(row.try_get("payload")?),
                },
                resolved_at: row.try_get("resolved_at")?,
                resolved_by: row.try_get("resolved_by")?,
                resolution_reason: row.try_get("resolution_reason")?,
            })
        }
    };
}

pub(crate) use view_rows;
