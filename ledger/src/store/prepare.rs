//! The first part of posting an event's own facts, written once for both backends: what the
//! locked event row says (settled already, refused for its own reason, or ready with its entry
//! drafted by the posting rules). No SQL.

use crate::event::SettlementEvent;
use crate::ids::SourceName;
use crate::job::JobRef;
use crate::post_error::{PostError, ProviderError};
use crate::posting::{self, EntryDraft, PostingRules};
use crate::state::EventStatus;

/// An event row as the posting reads it (locked by the caller's transaction).
#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
    pub(super) id: i64,
    pub(super) source: String,
    pub(super) status: String,
    pub(super) job_id: String,
    /// `None` for an event recorded with invalid facts.
    pub(super) facts: Option<serde_json::Value>,
    pub(super) validation_error: Option<String>,
    pub(super) received_at: chrono::DateTime<chrono::Utc>,
}

/// What a locked event row says about posting it, before anything is written.
pub(in crate::store) enum Prepared {
    /// Posted or closed already, or no longer waiting for this job.
    Settled,
    /// Refused for the event's own reason (invalid or unreadable facts).
    Refused(PostError),
    Ready(Box<Ready>),
}

/// An event ready to post: its facts read and its entry drafted by the posting rules.
pub(in crate::store) struct Ready {
    pub(in crate::store) source: SourceName,
    pub(in crate::store) event: SettlementEvent,
    pub(in crate::store) draft: EntryDraft,
    pub(in crate::store) fingerprint: String,
    pub(in crate::store) received_at: chrono::DateTime<chrono::Utc>,
}

impl Ready {
    pub(in crate::store) fn balanced(&self) -> Result<(), PostError> {
        if self.draft.is_balanced() {
            Ok(())
        } else {
            Err(PostError::Unbalanced(self.draft.source_key.clone()))
        }
    }
}

/// What posting the event would do, decided from its row alone.
pub(super) fn prepare(job: &JobRef, row: &EventRow, rules: &PostingRules) -> Prepared {
    if row.status != EventStatus::Recorded.as_str() || row.job_id != job.job_id {
        return Prepared::Settled;
    }
    if let Some(error) = &row.validation_error {
        return Prepared::Refused(PostError::InvalidFacts(error.clone()));
    }
    let Some(facts) = &row.facts else {
        return Prepared::Refused(PostError::CorruptEvent(format!(
            "event {} has neither facts nor a validation error",
            row.id
        )));
    };
    if crate::trigger::Trigger::from_stored(facts).is_some() {
        // Its movements are fetched from the provider first (Store::post_resolved).
        return Prepared::Refused(PostError::Provider(ProviderError::NotConfigured(
            row.source.clone(),
        )));
    }
    let parsed = SettlementEvent::from_stored(facts)
        .map_err(|e| e.to_string())
        .and_then(|event| {
            SourceName::parse(&row.source)
                .map(|source| (event, source))
                .map_err(|e| e.to_string())
        });
    let (event, source) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return Prepared::Refused(PostError::CorruptEvent(error)),
    };
    let draft = posting::draft(&source, &event, &rules.accounts(&source));
    let fingerprint = event.fingerprint().to_hex();
    Prepared::Ready(Box::new(Ready {
        source,
        event,
        draft,
        fingerprint,
        received_at: row.received_at,
    }))
}
