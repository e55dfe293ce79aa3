//! Pausing a source: its deliveries are still verified, recorded and acknowledged, but no attempt
//! of its events starts (the start rule answers `Paused` and the job is handed back untouched).
//! Each pause is a `source_pauses` row, kept for ever with who paused and resumed it and why: its
//! own audit trail. Resuming makes the source's waiting jobs due at once, so the backlog drains
//! without waiting for their next look. The SQL is the same on both backends but for the queue's
//! table and its time column, expanded into each store by `pause_rows!`.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// One pause of a source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SourcePause {
    pub id: i64,
    pub source: String,
    pub paused_at: DateTime<Utc>,
    pub paused_by: String,
    pub pause_reason: String,
    /// When it was resumed (absent: the source is paused now).
    pub resumed_at: Option<DateTime<Utc>>,
    pub resumed_by: Option<String>,
    pub resume_reason: Option<String>,
}

/// Who pauses a source whose provider refused its API key: settle itself, so that the source's
/// events wait for the key to be fixed instead of each going to the dead letter.
pub const PROVIDER_AUTH_ACTOR: &str = "settle";
/// How the reason of such a pause begins (the error code), which tells it from a person's.
pub const PROVIDER_AUTH_REASON: &str = "provider_auth: ";

impl SourcePause {
    /// The pause settle made when the source's provider refused its API key.
    pub fn is_provider_auth(&self) -> bool {
        self.paused_by == PROVIDER_AUTH_ACTOR && self.pause_reason.starts_with(PROVIDER_AUTH_REASON)
    }
}

/// The decision that pauses a source whose provider refused its key, saying what was refused.
pub fn provider_auth_pause(detail: &str) -> crate::review::Decision {
    crate::review::Decision {
        actor: PROVIDER_AUTH_ACTOR.to_owned(),
        reason: format!(
            "{PROVIDER_AUTH_REASON}{detail}. Fix the key, restart the workers, then resume the source"
        ),
    }
}

/// What a pause or resume did: the pause concerned, and whether anything changed (pausing a
/// paused source or resuming a running one changes nothing and writes nothing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PauseChange {
    pub source: String,
    pub paused: bool,
    pub changed: bool,
    /// The pause in force (after pausing) or just ended (after resuming); absent when resuming a
    /// source that was not paused.
    pub pause: Option<SourcePause>,
    /// Jobs made due at once by a resume.
    pub jobs_released: u64,
}

pub(crate) const PAUSE_COLUMNS: &str =
    "id, source, paused_at, paused_by, pause_reason, resumed_at, resumed_by, resume_reason";

/// Implements `driver::Pauses` for `$store` over `$db`; `$jobs` is
/// the queue's table and `$due_now` the value of its `run_at` for "now".
macro_rules! pause_rows {
    ($store:ty, $db:ty, $jobs:literal, $due_now:expr) => {
        impl $store {
            fn pause_of(
                row: &<$db as sqlx::Database>::Row,
            ) -> Result<crate::store::pauses::SourcePause, sqlx::Error> {
                use sqlx::Row;
                Ok(crate::store::pauses::SourcePause {
                    id: row.try_get("id")?,
                    source: row.try_get("source")?,
                    paused_at: row.try_get("paused_at")?,
                    paused_by: row.try_get("paused_by")?,
                    pause_reason: row.try_get("pause_reason")?,
                    resumed_at: row.try_get("resumed_at")?,
                    resumed_by: row.try_get("resumed_by")?,
                    resume_reason: row.try_get("resume_reason")?,
                })
            }
        }

        impl crate::store::driver::Pauses for $store {
            /// Pauses `source` (already paused: nothing written).
            async fn pause_source(
                &self,
                source: &str,
                decision: &crate::review::Decision,
            ) -> Result<crate::store::pauses::PauseChange, crate::review::DecisionError> {
                use crate::store::pauses::PAUSE_COLUMNS;
                decision.require_reason()?;
                let mut tx = crate::store::transactions::Transactions::begin_write(self).await?;
                // Two people pausing at once: one insert wins on the unique index of pauses in
                // force; the other finds that pause and answers as a repeat.
                let sql = format!(
                    "INSERT INTO source_pauses (source, paused_at, paused_by, pause_reason)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (source) WHERE resumed_at IS NULL DO NOTHING
                     RETURNING {PAUSE_COLUMNS}"
                );
                let inserted = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(source)
                    .bind(chrono::Utc::now())
                    .bind(&decision.actor)
                    .bind(&decision.reason)
                    .fetch_optional(&mut *tx)
                    .await?;
                let (row, changed) = match inserted {
                    Some(row) => (row, true),
                    None => {
                        let sql = format!(
                            "SELECT {PAUSE_COLUMNS} FROM source_pauses WHERE source = $1 AND resumed_at IS NULL"
                        );
                        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                            .bind(source)
                            .fetch_one(&mut *tx)
                            .await?;
                        (row, false)
                    }
                };
                let pause = Self::pause_of(&row)?;
                crate::store::transactions::Transactions::commit(self, tx).await?;
                Ok(crate::store::pauses::PauseChange {
                    source: source.to_owned(),
                    paused: true,
                    changed,
                    pause: Some(pause),
                    jobs_released: 0,
                })
            }

            /// Resumes `source` (not paused: nothing written) and makes its waiting jobs due.
            async fn resume_source(
                &self,
                source: &str,
                decision: &crate::review::Decision,
            ) -> Result<crate::store::pauses::PauseChange, crate::review::DecisionError> {
                use crate::store::pauses::PAUSE_COLUMNS;
                decision.require_reason()?;
                let mut tx = crate::store::transactions::Transactions::begin_write(self).await?;
                let sql = format!(
                    "UPDATE source_pauses SET resumed_at = $2, resumed_by = $3, resume_reason = $4
                     WHERE source = $1 AND resumed_at IS NULL RETURNING {PAUSE_COLUMNS}"
                );
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(source)
                    .bind(chrono::Utc::now())
                    .bind(&decision.actor)
                    .bind(&decision.reason)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(row) = row else {
                    return Ok(crate::store::pauses::PauseChange {
                        source: source.to_owned(),
                        paused: false,
                        changed: false,
                        pause: None,
                        jobs_released: 0,
                    });
                };
                let pause = Self::pause_of(&row)?;
                let released = sqlx::query(concat!(
                    "UPDATE ",
                    $jobs,
                    " SET run_at = $2 WHERE status = 'Pending' AND run_at > $2 AND id IN
                       (SELECT job_id FROM settlement_events WHERE source = $1 AND status = 'recorded')"
                ))
                .bind(source)
                .bind($due_now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                crate::store::transactions::Transactions::commit(self, tx).await?;
                Ok(crate::store::pauses::PauseChange {
                    source: source.to_owned(),
                    paused: false,
                    changed: true,
                    pause: Some(pause),
                    jobs_released: released,
                })
            }

            /// Pauses newest first: those in force only, or every one (at most `limit`).
            async fn source_pauses(
                &self,
                in_force_only: bool,
                limit: u32,
            ) -> Result<Vec<crate::store::pauses::SourcePause>, crate::store::StoreError> {
                use crate::store::pauses::PAUSE_COLUMNS;
                let sql = format!(
                    "SELECT {PAUSE_COLUMNS} FROM source_pauses
                     WHERE ($1 = 0 OR resumed_at IS NULL) ORDER BY id DESC LIMIT $2"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(i32::from(in_force_only))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows
                    .iter()
                    .map(Self::pause_of)
                    .collect::<Result<Vec<_>, _>>()?)
            }
        }
    };
}

pub(crate) use pause_rows;
