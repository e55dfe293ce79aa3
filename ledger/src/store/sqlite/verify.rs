//! `settle verify` and the gauges on SQLite (the checks are in `store::verify`).

use super::SqliteStore;
use crate::job::POST_SETTLEMENT_QUEUE;
use crate::store::driver::DayCounts;
use crate::store::verify::CHECKS;
use crate::store::{Check, Gauges, StoreError};

impl crate::store::driver::Health for SqliteStore {
    async fn verify(&self) -> Result<Vec<Check>, StoreError> {
        let mut checks = Vec::with_capacity(CHECKS.len());
        for check in CHECKS {
            let started = std::time::Instant::now();
            let rows: Vec<String> = sqlx::query_scalar(check.sqlite)
                .fetch_all(&self.pool)
                .await?;
            checks.push(check.outcome(rows, started.elapsed()));
        }
        Ok(checks)
    }

    async fn gauges(&self) -> Result<Gauges, StoreError> {
        let (queue_depth, oldest_pending_age_secs, open_conflicts): (i64, i64, i64) = sqlx::query_as(
            "SELECT
                 (SELECT count(*) FROM Jobs WHERE job_type = ?1
                    AND (status IN ('Pending', 'Queued', 'Running') OR (status = 'Failed' AND attempts < max_attempts))),
                 (SELECT coalesce(CAST(strftime('%s', 'now') AS INTEGER) - min(run_at), 0) FROM Jobs
                    WHERE job_type = ?1 AND status = 'Pending' AND run_at <= CAST(strftime('%s', 'now') AS INTEGER)),
                 (SELECT count(*) FROM event_conflicts WHERE state = 'open')",
        )
        .bind(POST_SETTLEMENT_QUEUE)
        .fetch_one(&self.pool)
        .await?;
        let open_dead_letters: Vec<(String, i64)> = sqlx::query_as(
            "SELECT error_class, count(*) FROM dead_letters WHERE state = 'open' GROUP BY error_class ORDER BY error_class",
        )
        .fetch_all(&self.pool)
        .await?;
        // Open dead letters whose provider refused the configured key, by source.
        let provider_auth: Vec<(String, i64)> = sqlx::query_as(
            "SELECT e.source, count(*) FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
             WHERE d.state = 'open' AND d.error_code = ?1 GROUP BY e.source ORDER BY e.source",
        )
        .bind(crate::post_error::ProviderError::Auth { status: 401 }.code())
        .fetch_all(&self.pool)
        .await?;
        // Entries booked to a suspense account, by account (the partial index finds them).
        let suspense: Vec<(String, i64)> = sqlx::query_as(
            "SELECT account, count(DISTINCT entry_id) FROM journal_lines
             WHERE account LIKE 'suspense:%' GROUP BY account ORDER BY account",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(Gauges {
            queue_depth,
            oldest_pending_age_secs,
            open_conflicts,
            open_dead_letters,
            provider_auth,
            suspense,
        })
    }

    /// Events received and entries written per UTC day since `since` (timestamps are UTC text).
    async fn activity(
        &self,
        since: chrono::NaiveDate,
    ) -> Result<(DayCounts, DayCounts), StoreError> {
        let since = since.to_string();
        let events = sqlx::query_as(
            "SELECT substr(received_at, 1, 10), count(*) FROM settlement_events WHERE received_at >= ?1 GROUP BY 1",
        )
        .bind(&since)
        .fetch_all(&self.pool)
        .await?;
        let entries = sqlx::query_as(
            "SELECT substr(recorded_at, 1, 10), count(*) FROM journal_entries WHERE recorded_at >= ?1 GROUP BY 1",
        )
        .bind(&since)
        .fetch_all(&self.pool)
        .await?;
        Ok((events, entries))
    }
}
