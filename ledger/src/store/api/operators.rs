//! The store's calls for operators: events, dead letters and conflicts and their decisions,
//! pauses, payload erasure, corrections, sessions and event search.

use super::*;

impl Store {
    pub async fn event(&self, id: EventId) -> Result<Option<EventView>, StoreError> {
        on_backend!(self, store => store.event(id).await)
    }

    /// The event with its erasure, attempts, dead letters, conflicts, entries and audit trail.
    pub async fn event_detail(
        &self,
        id: EventId,
    ) -> Result<Option<crate::review::EventDetail>, StoreError> {
        on_backend!(self, store => store.event_detail(id).await)
    }

    pub async fn event_by_key(
        &self,
        source: &str,
        external_id: &str,
    ) -> Result<Option<EventView>, StoreError> {
        on_backend!(self, store => store.event_by_key(source, external_id).await)
    }

    /// Expires the payloads `policy` no longer allows at `now`, each rule under one erasure by
    /// `actor` (or, with `dry_run`, only counts them). See ARCHITECTURE.md, Retention.
    pub async fn prune_payloads(
        &self,
        policy: &RetentionPolicy,
        now: chrono::DateTime<chrono::Utc>,
        actor: &str,
        dry_run: bool,
    ) -> Result<Vec<PruneLine>, StoreError> {
        let mut lines = Vec::new();
        for rule in policy.rules(now) {
            lines.push(on_backend!(self, store => store.prune_rule(&rule, actor, dry_run).await)?);
        }
        Ok(lines)
    }

    /// Erases one event's payload (and its resolved conflicting deliveries') on a person's
    /// request, audited; refused while the event is in flight, dead-lettered or in conflict.
    pub async fn erase_payload(
        &self,
        event_id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => store.erase_payload(event_id, decision).await)
    }

    pub async fn payload_erasure(&self, id: i64) -> Result<Option<PayloadErasure>, StoreError> {
        on_backend!(self, store => store.payload_erasure(id).await)
    }

    /// Reverses journal entry `id` and, with lines, posts its correction, on the request's
    /// effective date, with who and why (see ARCHITECTURE.md, Corrections).
    pub async fn correct_entry(
        &self,
        id: i64,
        request: &CorrectionRequest,
        decision: &Decision,
    ) -> Result<Corrected, DecisionError> {
        on_backend!(self, store => corrections::correct(store, id, request, decision).await)
    }

    /// One journal entry with its lines.
    pub async fn entry(&self, id: i64) -> Result<Option<crate::finance::EntryView>, StoreError> {
        on_backend!(self, store => store.entry(id).await)
    }

    /// Pauses a source: its deliveries are still recorded and acknowledged, none of its events
    /// starts an attempt until it is resumed. Already paused: nothing written.
    pub async fn pause_source(
        &self,
        source: &str,
        decision: &Decision,
    ) -> Result<PauseChange, DecisionError> {
        on_backend!(self, store => store.pause_source(source, decision).await)
    }

    /// Resumes a paused source and makes its waiting jobs due at once. Not paused: nothing
    /// written.
    pub async fn resume_source(
        &self,
        source: &str,
        decision: &Decision,
    ) -> Result<PauseChange, DecisionError> {
        on_backend!(self, store => store.resume_source(source, decision).await)
    }

    /// Pauses newest first: those in force only, or every one (at most `limit`).
    pub async fn source_pauses(
        &self,
        in_force_only: bool,
        limit: u32,
    ) -> Result<Vec<SourcePause>, StoreError> {
        on_backend!(self, store => store.source_pauses(in_force_only, limit).await)
    }

    /// Dead letters matching `filter` (`state: None` = any state), newest first.
    pub async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        page: PageRequest,
    ) -> Result<Page<DeadLetterSummary>, StoreError> {
        on_backend!(self, store => store.dead_letters(filter, page).await)
    }

    pub async fn dead_letter(&self, id: i64) -> Result<Option<DeadLetterDetail>, StoreError> {
        on_backend!(self, store => store.dead_letter(id).await)
    }

    /// Gives the dead letter's event a fresh job with fresh attempts, in one transaction with its
    /// audit row. Requeueing an item already requeued (and not failed since) changes nothing.
    pub async fn requeue_dead_letter(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => decide::requeue_dead_letter(store, id, decision).await)
    }

    /// Closes the dead letter for good (the event never posts), with its audit row.
    /// Discarding a discarded item changes nothing; a reason is required.
    pub async fn discard_dead_letter(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => decide::discard_dead_letter(store, id, decision).await)
    }

    /// Conflicts (`state`: `open`, `resolved` or any), newest first.
    pub async fn conflicts(
        &self,
        state: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<ConflictView>, StoreError> {
        on_backend!(self, store => store.conflicts(state, page).await)
    }

    pub async fn conflict(&self, id: i64) -> Result<Option<ConflictDetail>, StoreError> {
        on_backend!(self, store => store.conflict(id).await)
    }

    /// Requeues (`goal` requeued) or discards each dead letter of a bulk action, each exactly as
    /// alone and audited on its own, a hundred to a transaction; one answer per id, in order.
    pub async fn decide_dead_letters(
        &self,
        ids: &[i64],
        goal: crate::review::DeadLetterState,
        decision: &Decision,
    ) -> Vec<Result<Decided, DecisionError>> {
        on_backend!(self, store => decide::decide_dead_letters(store, ids, goal, decision).await)
    }

    /// Acknowledges a conflict (the original stays authoritative), with its audit row.
    pub async fn resolve_conflict(
        &self,
        id: i64,
        decision: &Decision,
    ) -> Result<Decided, DecisionError> {
        on_backend!(self, store => decide::resolve_conflict(store, id, decision).await)
    }

    /// Events matching `filter`, newest first, a page after `page.cursor` (an id).
    pub async fn search_events(
        &self,
        filter: &crate::review::EventFilter,
        page: PageRequest,
    ) -> Result<Page<crate::review::EventSummary>, StoreError> {
        on_backend!(self, store => store.search_events(filter, page).await)
    }

    /// The database's plan for a search (to hold searches to index plans).
    pub async fn search_plan(
        &self,
        filter: &crate::review::EventFilter,
    ) -> Result<String, StoreError> {
        on_backend!(self, store => store.search_plan(filter).await)
    }

    /// Opens a dashboard session (and forgets the expired ones).
    pub async fn open_session(&self, session: &sessions::NewSession<'_>) -> Result<(), StoreError> {
        on_backend!(self, store => store.open_session(session).await)
    }

    /// The dashboard session under `id_sha256`, unless it expired by `now` or was closed.
    pub async fn session(
        &self,
        id_sha256: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<sessions::StoredSession>, StoreError> {
        on_backend!(self, store => store.session(id_sha256, now).await)
    }

    /// Ends one dashboard session; answers whether it was open.
    pub async fn close_session(&self, id_sha256: &str) -> Result<bool, StoreError> {
        on_backend!(self, store => store.close_session(id_sha256).await)
    }

    /// Ends every dashboard session of `actor`, in every process; answers how many.
    pub async fn close_sessions_of(&self, actor: &str) -> Result<u64, StoreError> {
        on_backend!(self, store => store.close_sessions_of(actor).await)
    }
}
