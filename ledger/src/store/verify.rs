//! `settle verify`: the invariants of ARCHITECTURE.md, Invariants, checked against what is
//! stored. Each check is named and described once, with its query for each backend (the same
//! text where the dialects agree).

use crate::store::Check;

/// A check: what it asserts, and a query listing the violating rows (as text) on each backend.
pub(super) struct CheckSql {
    pub name: &'static str,
    pub description: &'static str,
    pub postgres: &'static str,
    pub sqlite: &'static str,
}

/// How many violating rows a check lists by name.
const SAMPLES_MAX: usize = 10;

impl CheckSql {
    /// The check's outcome from the rows its query listed, and how long the query took.
    pub(super) fn outcome(&self, rows: Vec<String>, took: std::time::Duration) -> Check {
        Check {
            name: self.name,
            description: self.description,
            violations: rows.len() as u64,
            samples: rows.into_iter().take(SAMPLES_MAX).collect(),
            took_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

pub(super) const CHECKS: &[CheckSql] = &[
    CheckSql {
        name: "event_accounted_for",
        description: "every event has exactly one of: posted (its entry, or for an event resolved through its provider its movements' entries, none when it named none yet), an open dead letter, a discard, a live job",
        postgres: "SELECT 'event ' || e.id || ' (' || e.status || ')' FROM settlement_events e
         LEFT JOIN apalis.jobs j ON j.id = e.job_id
         WHERE NOT CASE e.status
             WHEN 'posted' THEN (e.posted_entry_id IS NOT NULL OR (e.facts IS NOT NULL AND NOT e.facts ? 'kind'))
                 AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'open')
             WHEN 'abandoned' THEN (SELECT count(*) FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'open') = 1
             WHEN 'discarded' THEN e.posted_entry_id IS NULL
                 AND EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'discarded')
             WHEN 'recorded' THEN e.posted_entry_id IS NULL
                 AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.id AND d.state = 'open')
                 AND (j.status IN ('Pending', 'Queued', 'Running')
                      OR (j.status = 'Failed' AND j.attempts < j.max_attempts))
             ELSE false END
         ORDER BY e.id",
        sqlite: "SELECT 'event ' || e.id || ' (' || e.status || ')' FROM settlement_events e
         LEFT JOIN Jobs j ON j.id = e.job_id
         WHERE NOT CASE e.status
             WHEN 'posted' THEN (e.posted_entry_id IS NOT NULL OR (e.facts IS NOT NULL AND json_extract(e.facts, '$.kind') IS NULL))
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
    },
    CheckSql {
        name: "dead_letter_open_only_for_abandoned",
        description: "an open dead letter belongs to an abandoned event",
        postgres: DEAD_LETTER_OPEN_ONLY_FOR_ABANDONED,
        sqlite: DEAD_LETTER_OPEN_ONLY_FOR_ABANDONED,
    },
    CheckSql {
        name: "dead_letter_decisions_audited",
        description: "nothing in the dead letter changed state except by an audited ops action",
        postgres: DEAD_LETTER_DECISIONS_AUDITED,
        sqlite: DEAD_LETTER_DECISIONS_AUDITED,
    },
    CheckSql {
        name: "source_key_unique",
        description: "no two entries share a source key",
        postgres: SOURCE_KEY_UNIQUE,
        sqlite: SOURCE_KEY_UNIQUE,
    },
    CheckSql {
        name: "one_entry_per_event",
        description: "no event posting its own facts has two entries",
        postgres: ONE_ENTRY_PER_EVENT,
        sqlite: ONE_ENTRY_PER_EVENT,
    },
    CheckSql {
        name: "posted_entry_matches_event",
        description: "a posted event's entry is the entry of its own money movement (or one of the provider movements it resolved to)",
        postgres: "SELECT 'event ' || e.id || ' -> entry ' || je.id FROM settlement_events e
         JOIN journal_entries je ON je.id = e.posted_entry_id
         WHERE je.source <> e.source
            OR CASE WHEN (e.facts IS NOT NULL AND NOT e.facts ? 'kind') THEN false
                    ELSE je.details IS NOT NULL OR je.kind <> e.kind OR je.movement_id <> e.movement_id END
         ORDER BY e.id",
        sqlite: "SELECT 'event ' || e.id || ' -> entry ' || je.id FROM settlement_events e
         JOIN journal_entries je ON je.id = e.posted_entry_id
         WHERE je.source <> e.source
            OR CASE WHEN (e.facts IS NOT NULL AND json_extract(e.facts, '$.kind') IS NULL) THEN false
                    ELSE je.details IS NOT NULL OR je.kind <> e.kind OR je.movement_id <> e.movement_id END
         ORDER BY e.id",
    },
    CheckSql {
        name: "payout_item_of_its_source",
        description: "an entry is tied only to a payout of its own source",
        postgres: PAYOUT_ITEM_OF_ITS_SOURCE,
        sqlite: PAYOUT_ITEM_OF_ITS_SOURCE,
    },
    CheckSql {
        name: "entry_balanced",
        description: "every entry has at least two lines and balances per currency",
        postgres: ENTRY_BALANCED_POSTGRES,
        sqlite: ENTRY_BALANCED_SQLITE,
    },
    CheckSql {
        name: "journal_immutable",
        description: "the triggers that keep the journal, its corrections, events, payload erasures, source pauses, payout items and audit log append-only and entries balanced are in place (and enabled)",
        postgres: "SELECT 'trigger ' || name || ' missing or disabled' FROM unnest(ARRAY[
             'journal_entries_immutable', 'journal_entries_no_truncate', 'journal_lines_immutable',
             'journal_lines_no_truncate', 'journal_entries_balanced', 'journal_lines_balanced',
             'settlement_events_guard', 'settlement_events_no_truncate', 'audit_log_immutable',
             'audit_log_no_truncate', 'payout_items_immutable', 'payout_items_no_truncate',
             'payload_erasures_immutable', 'payload_erasures_no_truncate', 'source_pauses_guard',
             'source_pauses_no_truncate', 'journal_corrections_immutable',
             'journal_corrections_no_truncate', 'journal_lines_to_kept_sums']) AS name
         WHERE NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgname = name AND t.tgenabled = 'O')",
        sqlite: "SELECT 'trigger ' || t.value || ' missing' FROM json_each(json_array(
             'journal_entries_no_update', 'journal_entries_no_delete', 'journal_lines_no_update',
             'journal_lines_no_delete', 'journal_entries_balanced', 'journal_lines_before_their_entry',
             'settlement_events_immutable', 'settlement_events_no_delete', 'audit_log_no_update',
             'audit_log_no_delete', 'payout_items_no_update', 'payout_items_no_delete',
             'settlement_events_payload_in_use', 'payload_erasures_no_update', 'payload_erasures_no_delete',
             'source_pauses_only_resumed', 'source_pauses_no_delete', 'journal_corrections_no_update',
             'journal_corrections_no_delete', 'journal_entries_to_balance_deltas',
             'journal_entries_to_receivable_deltas', 'journal_entries_to_recorded_balance_deltas')) AS t
         WHERE NOT EXISTS (SELECT 1 FROM sqlite_master m WHERE m.type = 'trigger' AND m.name = t.value)",
    },
    CheckSql {
        name: "balances_kept_equal_the_journal",
        description: "the balances kept by account, currency and effective date (what balance reads sum), and by the hour their lines were recorded (what balances as recorded at a moment subtract), equal the journal's lines",
        postgres: "WITH lines AS MATERIALIZED (
             SELECT l.account, l.currency, e.effective_date,
                    date_trunc('hour', e.recorded_at, 'UTC') AS recorded_hour, sum(l.amount) AS amount
             FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
             GROUP BY 1, 2, 3, 4)
         SELECT account || ' ' || currency || ' on ' || effective_date || ': off by ' || sum(amount)
         FROM (SELECT account, currency, effective_date, amount FROM lines
               UNION ALL
               SELECT account, currency, effective_date, -amount FROM balance_deltas) AS by_day
         GROUP BY account, currency, effective_date HAVING sum(amount) <> 0
         UNION ALL
         SELECT account || ' ' || currency || ' on ' || effective_date || ' recorded in hour '
                || to_char(recorded_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24') || ': off by ' || sum(amount)
         FROM (SELECT account, currency, effective_date, recorded_hour, amount FROM lines
               UNION ALL
               SELECT account, currency, effective_date, recorded_hour, -amount
               FROM recorded_balance_deltas) AS by_hour
         GROUP BY account, currency, effective_date, recorded_hour HAVING sum(amount) <> 0
         ORDER BY 1",
        sqlite: "WITH lines AS MATERIALIZED (
             SELECT l.account, l.currency, e.effective_date,
                    substr(e.recorded_at, 1, 13) AS recorded_hour, sum(l.amount_minor) AS amount_minor
             FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
             GROUP BY 1, 2, 3, 4)
         SELECT account || ' ' || currency || ' on ' || effective_date || ': off by ' || sum(amount_minor)
         FROM (SELECT account, currency, effective_date, amount_minor FROM lines
               UNION ALL
               SELECT account, currency, effective_date, -amount_minor FROM balance_deltas) AS by_day
         GROUP BY account, currency, effective_date HAVING sum(amount_minor) <> 0
         UNION ALL
         SELECT account || ' ' || currency || ' on ' || effective_date || ' recorded in hour '
                || recorded_hour || ': off by ' || sum(amount_minor)
         FROM (SELECT account, currency, effective_date, recorded_hour, amount_minor FROM lines
               UNION ALL
               SELECT account, currency, effective_date, recorded_hour, -amount_minor
               FROM recorded_balance_deltas) AS by_hour
         GROUP BY account, currency, effective_date, recorded_hour HAVING sum(amount_minor) <> 0
         ORDER BY 1",
    },
    CheckSql {
        name: "receivables_kept_equal_the_journal",
        description: "the open receivables kept by account, currency and movement (what receivable reads list) equal the journal's lines on receivables accounts",
        postgres: "SELECT account || ' ' || currency || ' ' || source || '/' || movement_id || ': off by ' || sum(amount)
         FROM (SELECT l.account, l.currency, e.source, e.movement_id, l.amount
               FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
               WHERE left(l.account, 12) = 'receivables:'
               UNION ALL
               SELECT account, currency, source, movement_id, -amount FROM receivable_deltas) AS both_sides
         GROUP BY account, currency, source, movement_id HAVING sum(amount) <> 0
         ORDER BY 1",
        sqlite: "SELECT account || ' ' || currency || ' ' || source || '/' || movement_id || ': off by ' || sum(amount_minor)
         FROM (SELECT l.account, l.currency, e.source, e.movement_id, l.amount_minor
               FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
               WHERE substr(l.account, 1, 12) = 'receivables:'
               UNION ALL
               SELECT account, currency, source, movement_id, -amount_minor FROM receivable_deltas) AS both_sides
         GROUP BY account, currency, source, movement_id HAVING sum(amount_minor) <> 0
         ORDER BY 1",
    },
    CheckSql {
        name: "runtime_roles_cannot_alter_the_journal",
        description: "no runtime role (settle_ingress, settle_worker, settle_console, or a role that is one) is a superuser, owns a table or function, may create in the schema, may update or delete an append-only row, may write the balances or receivables kept, or may truncate or add triggers to a guarded table (an SQLite file has one user)",
        postgres: RUNTIME_ROLES_CANNOT_ALTER_THE_JOURNAL,
        sqlite: "SELECT '' WHERE 0",
    },
];

/// The runtime roles and every role made a member of one (read from the memberships: a
/// superuser counts as a member of every role, but is flagged only when made one).
const RUNTIME_ROLES_CANNOT_ALTER_THE_JOURNAL: &str = "WITH RECURSIVE members(oid) AS (
             SELECT oid FROM pg_roles
             WHERE rolname IN ('settle_ingress', 'settle_worker', 'settle_console')
             UNION
             SELECT m.member FROM pg_auth_members m JOIN members ON m.roleid = members.oid),
         runtime AS (SELECT r.oid, r.rolname, r.rolsuper FROM pg_roles r JOIN members USING (oid)),
         append_only(rel) AS (VALUES ('journal_entries'), ('journal_lines'), ('journal_corrections'),
             ('audit_log'), ('payout_items'), ('payload_erasures')),
         guarded(rel) AS (SELECT rel FROM append_only UNION ALL VALUES ('settlement_events'), ('source_pauses')),
         schemas(oid) AS (SELECT oid FROM pg_namespace WHERE nspname IN ('public', 'apalis'))
         SELECT 'role ' || rolname || ' is a superuser' FROM runtime WHERE rolsuper
         UNION ALL
         SELECT 'role ' || r.rolname || ' may ' || p.privilege || ' ' || a.rel
           FROM runtime r CROSS JOIN append_only a CROSS JOIN (VALUES ('update'), ('delete')) p(privilege)
           WHERE NOT r.rolsuper AND has_table_privilege(r.oid, 'public.' || a.rel, p.privilege)
         UNION ALL
         SELECT 'role ' || r.rolname || ' may ' || p.privilege || ' ' || g.rel
           FROM runtime r CROSS JOIN guarded g CROSS JOIN (VALUES ('truncate'), ('trigger')) p(privilege)
           WHERE NOT r.rolsuper AND has_table_privilege(r.oid, 'public.' || g.rel, p.privilege)
         UNION ALL
         SELECT 'role ' || r.rolname || ' may ' || p.privilege || ' ' || k.rel
           FROM runtime r CROSS JOIN (VALUES ('balance_deltas'), ('recorded_balance_deltas'), ('receivable_deltas')) k(rel)
           CROSS JOIN (VALUES ('insert'), ('update'), ('delete')) p(privilege)
           WHERE NOT r.rolsuper AND has_table_privilege(r.oid, 'public.' || k.rel, p.privilege)
         UNION ALL
         SELECT 'role ' || r.rolname || ' owns ' || c.oid::regclass::text
           FROM runtime r JOIN pg_class c ON pg_has_role(r.oid, c.relowner, 'USAGE')
           WHERE NOT r.rolsuper AND c.relnamespace IN (SELECT oid FROM schemas)
         UNION ALL
         SELECT 'role ' || r.rolname || ' owns function ' || p.oid::regprocedure::text
           FROM runtime r JOIN pg_proc p ON pg_has_role(r.oid, p.proowner, 'USAGE')
           WHERE NOT r.rolsuper AND p.pronamespace IN (SELECT oid FROM schemas)
         UNION ALL
         SELECT 'role ' || r.rolname || ' may create in schema ' || n.nspname
           FROM runtime r CROSS JOIN pg_namespace n
           WHERE NOT r.rolsuper AND n.oid IN (SELECT oid FROM schemas)
             AND has_schema_privilege(r.oid, n.oid, 'CREATE')
         ORDER BY 1";

/// One pass over the lines in entry order (their primary key's): each entry's count, total and
/// lowest and highest currency; an entry in one currency balances when its total is zero, and
/// only an entry in several is summed currency by currency.
const ENTRY_BALANCED_POSTGRES: &str = "SELECT 'entry ' || je.id FROM journal_entries je
         LEFT JOIN (SELECT entry_id, count(*) AS n, sum(amount) AS total,
                           min(currency) AS low, max(currency) AS high
                    FROM journal_lines GROUP BY entry_id) l ON l.entry_id = je.id
         WHERE l.entry_id IS NULL OR l.n < 2
            OR (l.low = l.high AND l.total <> 0)
            OR (l.low <> l.high AND EXISTS (
                    SELECT 1 FROM journal_lines x WHERE x.entry_id = je.id
                    GROUP BY x.currency HAVING sum(x.amount) <> 0))
         ORDER BY je.id";

const ENTRY_BALANCED_SQLITE: &str = "SELECT 'entry ' || je.id FROM journal_entries je
         LEFT JOIN (SELECT entry_id, count(*) AS n, sum(amount_minor) AS total,
                           min(currency) AS low, max(currency) AS high
                    FROM journal_lines GROUP BY entry_id) l ON l.entry_id = je.id
         WHERE l.entry_id IS NULL OR l.n < 2
            OR (l.low = l.high AND l.total <> 0)
            OR (l.low <> l.high AND EXISTS (
                    SELECT 1 FROM journal_lines x WHERE x.entry_id = je.id
                    GROUP BY x.currency HAVING sum(x.amount_minor) <> 0))
         ORDER BY je.id";

const DEAD_LETTER_OPEN_ONLY_FOR_ABANDONED: &str =
    "SELECT 'dead letter ' || d.id || ' (event ' || e.id || ' is ' || e.status || ')'
         FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
         WHERE d.state = 'open' AND e.status <> 'abandoned' ORDER BY d.id";

const DEAD_LETTER_DECISIONS_AUDITED: &str =
    "SELECT 'dead letter ' || d.id || ' (' || d.state || ')' FROM dead_letters d
         WHERE d.state <> 'open' AND NOT EXISTS (
             SELECT 1 FROM audit_log a WHERE a.subject_type = 'dead_letter' AND a.subject_id = d.id
               AND a.after_state = d.state)
         ORDER BY d.id";

const SOURCE_KEY_UNIQUE: &str = "SELECT 'source key ' || source_key FROM journal_entries GROUP BY source_key HAVING count(*) > 1";

const ONE_ENTRY_PER_EVENT: &str =
    "SELECT 'event ' || event_id FROM journal_entries WHERE details IS NULL
         GROUP BY event_id HAVING count(*) > 1";

const PAYOUT_ITEM_OF_ITS_SOURCE: &str = "SELECT 'entry ' || pi.entry_id || ' (payout ' || pi.payout_id || ')' FROM payout_items pi
         JOIN journal_entries je ON je.id = pi.entry_id WHERE je.source <> pi.source ORDER BY pi.entry_id";

#[cfg(test)]
mod tests {
    use super::CHECKS;
    use crate::trigger::{STORED_AS_TRIGGER_POSTGRES, STORED_AS_TRIGGER_SQLITE};

    /// The checks that tell a provider's trigger from canonical facts do it by the one rule of
    /// `trigger`, and name no provider's tag.
    #[test]
    fn triggers_are_told_apart_by_the_one_rule() {
        let telling = ["event_accounted_for", "posted_entry_matches_event"];
        for check in CHECKS.iter().filter(|c| telling.contains(&c.name)) {
            assert!(
                check.postgres.contains(STORED_AS_TRIGGER_POSTGRES),
                "{}: {}",
                check.name,
                check.postgres
            );
            assert!(
                check.sqlite.contains(STORED_AS_TRIGGER_SQLITE),
                "{}: {}",
                check.name,
                check.sqlite
            );
        }
    }
}
