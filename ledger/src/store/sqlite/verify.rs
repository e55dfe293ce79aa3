//! `settle verify` on SQLite: the same invariants as on PostgreSQL.

use super::SqliteStore;
use crate::job::POST_SETTLEMENT_QUEUE;
use crate::store::{Check, Gauges, StoreError};

const CHECKS: &[(&str, &str, &str)] = &[
    (
        "event_accounted_for",
        "every event has exactly one of: posted (its entry, or for an event resolved through the provider's API its movements' entries, none when it named none yet), an open dead letter, a discard, a live job",
        "SELECT 'event ' || e.id || ' (' || e.status || ')' FROM settlement_events e
         LEFT JOIN Jobs j ON j.id = e.job_id
         WHERE NOT CASE e.status
             WHEN 'posted' THEN (e.posted_entry_id IS NOT NULL OR json_extract(e.facts, '$.stripe') IS NOT NULL)
                 AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'open')
             WHEN 'abandoned' THEN (SELECT count(*) FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'open') = 1
             WHEN 'discarded' THEN e.posted_entry_id IS NULL
                 AND EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'discarded')
             WHEN 'recorded' THEN e.posted_entry_id IS NULL
                 AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'open')
                 AND (j.status IN ('Pending', 'Queued', 'Running')
                      OR (j.status = 'Failed' AND j.attempts < j.max_attempts))
             ELSE 0 END
         ORDER BY e.id",
    ),
    (
        "dead_letter_open_only_for_abandoned",
        "an open dead letter belongs to an abandoned event",
        "SELECT 'dead letter ' || d.id || ' (event ' || e.id || ' is ' || e.status || ')'
         FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
         WHERE d.state = 'open' AND e.status <> 'abandoned' ORDER BY d.id",
    ),
    (
        "dead_letter_decisions_audited",
        "nothing in the dead letter changed state except by an audited ops action",
        "SELECT 'dead letter ' || d.id || ' (' || d.state || ')' FROM dead_letters d
         WHERE d.state <> 'open' AND NOT EXISTS (
             SELECT 1 FROM audit_log a WHERE a.subject_type = 'dead_letter' AND a.subject_id = d.id
               AND a.after_state = d.state)
         ORDER BY d.id",
    ),
    (
        "source_key_unique",
        "no two entries share a source key",
        "SELECT 'source key ' || source_key FROM journal_entries GROUP BY source_key HAVING count(*) > 1",
    ),
    (
        "one_entry_per_event",
        "no event posting its own facts has two entries",
        "SELECT 'event ' || event_id FROM journal_entries WHERE details IS NULL
         GROUP BY event_id HAVING count(*) > 1",
    ),
    (
        "posted_entry_matches_event",
        "a posted event's entry is the entry of its own money movement (or one of the provider movements it resolved to)",
        "SELECT 'event ' || e.id || ' -> entry ' || je.id FROM settlement_events e
         JOIN journal_entries je ON je.id = e.posted_entry_id
         WHERE je.source <> e.source
            OR CASE WHEN json_extract(e.facts, '$.stripe') IS NOT NULL THEN false
                    ELSE je.details IS NOT NULL OR je.kind <> e.kind OR je.movement_id <> e.movement_id END
         ORDER BY e.id",
    ),
    (
        "payout_item_of_its_source",
        "an entry is tied only to a payout of its own source",
        "SELECT 'entry ' || pi.entry_id || ' (payout ' || pi.payout_id || ')' FROM payout_items pi
         JOIN journal_entries je ON je.id = pi.entry_id WHERE je.source <> pi.source ORDER BY pi.entry_id",
    ),
    (
        "entry_balanced",
        "every entry has at least two lines and balances per currency",
        "SELECT 'entry ' || je.id FROM journal_entries je
         WHERE (SELECT count(*) FROM journal_lines l WHERE l.entry_id = je.id) < 2
            OR EXISTS (SELECT 1 FROM journal_lines l WHERE l.entry_id = je.id
                       GROUP BY l.currency HAVING sum(l.amount_minor) <> 0)
         ORDER BY je.id",
    ),
    (
        "journal_immutable",
        "the triggers that refuse UPDATE and DELETE on the journal, events and audit log are in place",
        "SELECT 'trigger ' || t.value || ' missing' FROM json_each(json_array(
             'journal_entries_no_update', 'journal_entries_no_delete', 'journal_lines_no_update',
             'journal_lines_no_delete', 'journal_entries_balanced', 'journal_lines_before_their_entry',
             'settlement_events_immutable', 'settlement_events_no_delete', 'audit_log_no_update',
             'audit_log_no_delete', 'payout_items_no_update', 'payout_items_no_delete')) AS t
         WHERE NOT EXISTS (SELECT 1 FROM sqlite_master m WHERE m.type = 'trigger' AND m.name = t.value)",
    ),
];

const SAMPLES_MAX: usize = 10;

impl SqliteStore {
    pub(in crate::store) async fn verify(&self) -> Result<Vec<Check>, StoreError> {
        let mut checks = Vec::with_capacity(CHECKS.len());
        for (name, description, query) in CHECKS {
            let rows: Vec<String> = sqlx::query_scalar(*query).fetch_all(&self.pool).await?;
            checks.push(Check {
                name,
                description,
                violations: rows.len() as u64,
                samples: rows.into_iter().take(SAMPLES_MAX).collect(),
            });
        }
        Ok(checks)
    }
}

impl SqliteStore {
    pub(in crate::store) async fn gauges(&self) -> Result<Gauges, StoreError> {
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
        .bind(crate::job::ProviderError::Auth { status: 401 }.code())
        .fetch_all(&self.pool)
        .await?;
        Ok(Gauges {
            queue_depth,
            oldest_pending_age_secs,
            open_conflicts,
            open_dead_letters,
            provider_auth,
        })
    }
}

type DayCounts = Vec<(String, i64)>;

impl SqliteStore {
    /// Events received and entries written per UTC day since `since` (timestamps are UTC text).
    pub(in crate::store) async fn activity(
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
