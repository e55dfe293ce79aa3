//! Ops actions on dead letters, one item or many, shared by the CLI, the API and the dashboard.
//! A bulk action is per item: each item is decided exactly as alone, audited on its own and
//! reported with its own outcome, so one item that was decided meanwhile does not block the
//! others; the store commits them a hundred to a transaction (`Store::decide_dead_letters`).

use chrono::{DateTime, NaiveDate, Utc};
use ledger::Store;
use ledger::review::{
    BULK_LIMIT_MAX, DeadLetterFilter, DeadLetterState, Decision, DecisionError, PageRequest, Step,
    dead_letter_step,
};
use serde::Serialize;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    Requeue,
    Discard,
}

impl Action {
    fn done(self) -> &'static str {
        match self {
            Action::Requeue => "requeued",
            Action::Discard => "discarded",
        }
    }

    fn would(self) -> &'static str {
        match self {
            Action::Requeue => "would_requeue",
            Action::Discard => "would_discard",
        }
    }
}

/// One item of a (bulk) action and what happened to it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ItemOutcome {
    pub dead_letter_id: i64,
    pub event_id: Option<i64>,
    /// `requeued` / `discarded` (done), `unchanged` (already so), `would_requeue` /
    /// `would_discard` (dry run), `already_decided`, `not_found`, `failed`.
    pub outcome: &'static str,
    pub job_id: Option<String>,
    pub detail: Option<String>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Report {
    pub dry_run: bool,
    pub items: Vec<ItemOutcome>,
}

impl Report {
    pub fn count(&self, outcome: &str) -> usize {
        self.items
            .iter()
            .filter(|item| item.outcome == outcome)
            .count()
    }
}

/// Open dead letters matching `filter`, oldest first, at most `limit` (capped).
pub async fn matching(
    store: &Store,
    filter: &DeadLetterFilter,
    limit: u32,
) -> Result<Vec<i64>, ledger::StoreError> {
    let filter = DeadLetterFilter {
        state: Some(DeadLetterState::Open),
        ..filter.clone()
    };
    let page = store
        .dead_letters(
            &filter,
            PageRequest {
                cursor: None,
                limit: limit.clamp(1, BULK_LIMIT_MAX),
            },
        )
        .await?;
    let mut ids: Vec<i64> = page.items.iter().map(|d| d.id).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Applies `action` to each dead letter (or, on a dry run, says what it would do).
pub async fn act(
    store: &Store,
    action: Action,
    ids: &[i64],
    decision: &Decision,
    dry_run: bool,
) -> Report {
    if dry_run {
        let mut items = Vec::with_capacity(ids.len());
        for &id in ids {
            items.push(predict(store, action, id).await);
        }
        return Report { dry_run, items };
    }
    let goal = match action {
        Action::Requeue => DeadLetterState::Requeued,
        Action::Discard => DeadLetterState::Discarded,
    };
    let results = store.decide_dead_letters(ids, goal, decision).await;
    let items = ids
        .iter()
        .zip(results)
        .map(|(&id, result)| outcome(action, id, result))
        .collect();
    Report { dry_run, items }
}

fn outcome(
    action: Action,
    id: i64,
    result: Result<ledger::review::Decided, DecisionError>,
) -> ItemOutcome {
    match result {
        Ok(decided) => ItemOutcome {
            dead_letter_id: id,
            event_id: Some(decided.event_id),
            outcome: if decided.changed {
                action.done()
            } else {
                "unchanged"
            },
            job_id: decided.job_id,
            detail: None,
        },
        Err(error) => failed(id, &error),
    }
}

async fn predict(store: &Store, action: Action, id: i64) -> ItemOutcome {
    let detail = match store.dead_letter(id).await {
        Ok(Some(detail)) => detail,
        Ok(None) => return failed(id, &DecisionError::NotFound("dead letter")),
        Err(error) => return failed(id, &DecisionError::Store(error)),
    };
    let goal = match action {
        Action::Requeue => DeadLetterState::Requeued,
        Action::Discard => DeadLetterState::Discarded,
    };
    // The store's own rule, applied to what it holds now.
    let outcome = match dead_letter_step(id, detail.dead_letter.state, goal) {
        Ok(Step::Apply(_)) => action.would(),
        Ok(Step::Unchanged) => "unchanged",
        Err(_) => "already_decided",
    };
    ItemOutcome {
        dead_letter_id: id,
        event_id: Some(detail.dead_letter.event_id),
        outcome,
        job_id: None,
        detail: Some(format!(
            "{} {} ({})",
            detail.event.source, detail.event.external_id, detail.dead_letter.error_code
        )),
    }
}

fn failed(id: i64, error: &DecisionError) -> ItemOutcome {
    let outcome = match error {
        DecisionError::AlreadyDecided(_) => "already_decided",
        DecisionError::NotFound(_) => "not_found",
        DecisionError::InUse(_) => "in_use",
        DecisionError::ReasonRequired | DecisionError::Invalid(_) | DecisionError::Store(_) => {
            "failed"
        }
    };
    ItemOutcome {
        dead_letter_id: id,
        event_id: None,
        outcome,
        job_id: None,
        detail: Some(error.to_string()),
    }
}

/// An RFC 3339 instant, or a date (`2026-12-01`, midnight UTC).
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|date| date.and_hms_opt(0, 0, 0))
        .map(|at| at.and_utc())
        .ok_or_else(|| format!("{text:?} is neither a date (2026-12-01) nor an RFC 3339 time"))
}
