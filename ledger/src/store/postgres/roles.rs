//! A fleet's database roles on PostgreSQL (README.md, Database roles): the role that migrates
//! owns every table and function; each process connects as a member of one runtime role, which
//! owns nothing, creates nothing, and may change only what its work needs:
//!
//! - `settle_ingress` records deliveries: it inserts events, conflicts and jobs, counts a
//!   conflict's repeats, and reads nothing else;
//! - `settle_worker` posts: it reads everything but dashboard sessions, moves events, jobs,
//!   attempts, dead letters and feed cursors, and inserts journal entries, their lines, payout
//!   items, audit rows, payload erasures and the pause of a source whose provider refused its key;
//! - `settle_console` serves operators: it reads everything, keeps dashboard sessions, decides
//!   (events, conflicts, dead letters, jobs, pauses), corrects (new entries) and backfills.
//!
//! No runtime role may update or delete a journal row, an audit row, a payout item or an
//! erasure (the triggers refuse it too), truncate a guarded table, or alter a trigger or a
//! function (only an owner may). The grants are one declarative script: everything is revoked
//! and granted again, so a privilege dropped from it is taken back, and `settle migrate` applies
//! it again after every migration once the roles exist.

use super::PgStore;
use crate::store::StoreError;

/// The runtime roles, as `settle db grant-roles` creates them (`NOLOGIN`: a process connects as
/// a login role made a member of one).
pub const RUNTIME_ROLES: [&str; 3] = ["settle_ingress", "settle_worker", "settle_console"];

/// Creates the runtime roles that do not exist yet (needs `CREATEROLE`).
const CREATE: &str = "DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'settle_ingress') THEN
        CREATE ROLE settle_ingress NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'settle_worker') THEN
        CREATE ROLE settle_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'settle_console') THEN
        CREATE ROLE settle_console NOLOGIN;
    END IF;
END $$";

/// What each runtime role may do, from nothing (run by the owner of the tables).
const GRANTS: &[&str] = &[
    "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
    "REVOKE ALL ON SCHEMA public, apalis FROM settle_ingress, settle_worker, settle_console",
    "REVOKE ALL ON ALL TABLES IN SCHEMA public, apalis FROM settle_ingress, settle_worker, settle_console",
    "REVOKE ALL ON ALL SEQUENCES IN SCHEMA public, apalis FROM settle_ingress, settle_worker, settle_console",
    "GRANT USAGE ON SCHEMA public, apalis TO settle_ingress, settle_worker, settle_console",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public, apalis
         TO settle_ingress, settle_worker, settle_console",
    // Whether the schema is this build's (readiness).
    "GRANT SELECT ON public._sqlx_migrations, apalis._sqlx_migrations
         TO settle_ingress, settle_worker, settle_console",
    // The ingress records deliveries with their jobs, and counts a conflict's repeats.
    "GRANT SELECT, INSERT ON settlement_events, event_conflicts, apalis.jobs TO settle_ingress",
    "GRANT UPDATE (deliveries, last_seen_at) ON event_conflicts TO settle_ingress",
    // Workers and the console read everything (sessions: the console only).
    "GRANT SELECT ON ALL TABLES IN SCHEMA public, apalis TO settle_worker, settle_console",
    "REVOKE SELECT ON dashboard_sessions FROM settle_worker",
    // Workers post.
    "GRANT INSERT, UPDATE, DELETE ON apalis.jobs, apalis.workers TO settle_worker",
    "GRANT INSERT, UPDATE ON settlement_events, event_conflicts, dead_letters, job_attempts,
         feed_cursors TO settle_worker",
    "GRANT INSERT ON journal_entries, journal_lines, payout_items, audit_log, payload_erasures
         TO settle_worker",
    // A worker pauses a source whose provider refused its key (resuming is the console's).
    "GRANT INSERT ON source_pauses TO settle_worker",
    // The console keeps sessions, decides, corrects and backfills.
    "GRANT INSERT, UPDATE, DELETE ON dashboard_sessions TO settle_console",
    "GRANT INSERT, UPDATE, DELETE ON apalis.jobs TO settle_console",
    "GRANT INSERT, UPDATE ON settlement_events, event_conflicts, dead_letters, job_attempts,
         feed_cursors, source_pauses TO settle_console",
    "GRANT INSERT ON journal_entries, journal_lines, journal_corrections, payout_items, audit_log,
         payload_erasures TO settle_console",
    // The payouts listing keeps each payout's summary as it last computed it.
    "GRANT INSERT, UPDATE ON payout_summaries TO settle_console",
];

impl PgStore {
    /// Creates the runtime roles when `create` (those missing), then grants each what it may
    /// do, in one transaction.
    pub(in crate::store) async fn grant(&self, create: bool) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        if create {
            sqlx::query(CREATE).execute(&mut *tx).await?;
        }
        for grant in GRANTS {
            sqlx::query(*grant).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Whether every runtime role exists (then every migration grants again).
    pub(in crate::store) async fn runtime_roles_exist(&self) -> Result<bool, StoreError> {
        let found: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolname = ANY($1)")
                .bind(RUNTIME_ROLES.as_slice())
                .fetch_one(&self.pool)
                .await?;
        Ok(found == RUNTIME_ROLES.len() as i64)
    }
}
