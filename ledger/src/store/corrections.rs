//! Finance corrections, written once for both backends: an entry is never edited; a person
//! reverses it (an entry of the opposite lines, `reverses_entry_id` pointing at it) and, if it was
//! wrong rather than void, posts its correction (the lines it should have had), both on the
//! effective date they choose, in one transaction with a `journal_corrections` row saying who
//! did it and why. Balances as of any date before that date still show the original; from it on,
//! the correction. Each backend provides [`CorrectionRows`]: how it writes an entry with its lines
//! and the correction's row, deciding nothing.

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::Serialize;

use crate::finance::EntryView;
use crate::money::Currency;
use crate::posting::{EntryDraft, Line, reversal_lines};
use crate::review::{Decision, DecisionError};
use crate::store::StoreError;
use crate::store::driver::FinanceReads;
use crate::store::transactions::Transactions;

/// What a person asks for: the date the reversal (and correction) take effect, and the lines the
/// entry should have had (none: the entry is void, reversed only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorrectionRequest {
    pub effective_date: NaiveDate,
    pub lines: Option<Vec<Line>>,
}

/// What a correction wrote (or, for a repeat of the same one, had written).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Corrected {
    /// The correction's record (`journal_corrections.id`).
    pub id: i64,
    pub entry_id: i64,
    pub reversal_entry_id: i64,
    pub correction_entry_id: Option<i64>,
    /// False for a repeat of the same correction (same actor and reason): nothing written.
    pub changed: bool,
}

/// An entry to write: its drafted lines and what it is about.
/// It carries the original's event, source, kind, movement, reference and fingerprint, but no
/// payout: a correction is the books', not a provider movement, so a payout's reconciliation
/// (what the provider paid out against the movements it listed) is left as the provider has it.
pub(super) struct CorrectionEntry<'a> {
    pub(super) original: &'a EntryView,
    pub(super) draft: &'a EntryDraft,
    pub(super) reverses: Option<i64>,
    /// `{"correction_of": id}`: marks the entry as a person's, not a provider's movement.
    pub(super) details: String,
}

/// The correction already recorded of an entry (`journal_corrections`).
#[derive(Clone, Debug, sqlx::FromRow)]
pub(super) struct PastCorrection {
    pub(super) id: i64,
    pub(super) actor: String,
    pub(super) reason: String,
    pub(super) reversal_entry_id: i64,
    pub(super) correction_entry_id: Option<i64>,
}

/// What a backend provides for corrections. Every method runs in the caller's transaction.
pub(super) trait CorrectionRows: Transactions + FinanceReads {
    /// Writes the entry with its lines; `None` when an entry already holds its source key or
    /// already reverses the same entry (another correction or reversal got there first).
    async fn write_entry(
        tx: &mut Self::Tx,
        entry: &CorrectionEntry<'_>,
    ) -> Result<Option<i64>, StoreError>;

    /// Records who corrected `entry_id`, why, and the entries written; answers its id.
    async fn record_correction(
        tx: &mut Self::Tx,
        entry_id: i64,
        reversal: i64,
        correction: Option<i64>,
        decision: &Decision,
    ) -> Result<i64, StoreError>;
}

/// The lines a person typed, checked: at least two, each currency's amounts at its scale and
/// summing to zero.
pub fn check_lines(lines: &[Line]) -> Result<(), String> {
    let draft = EntryDraft {
        source_key: String::new(),
        effective_date: NaiveDate::MIN,
        description: String::new(),
        lines: lines.to_vec(),
    };
    for line in lines {
        if line.account.trim().is_empty() {
            return Err("every line needs an account".into());
        }
        if line.account.chars().any(char::is_control) {
            return Err("an account has no control characters (a newline, a tab)".into());
        }
        if line.amount.is_zero() {
            return Err(format!("a line of {} is zero", line.account));
        }
        if line.amount.normalize().scale() > line.currency.exponent() {
            return Err(format!(
                "{} is finer than {} allows",
                line.amount, line.currency
            ));
        }
    }
    if draft.is_balanced() {
        Ok(())
    } else {
        Err("the lines must be at least two and sum to zero in each currency".into())
    }
}

/// A line from the journal as read (its amount the exact text at its currency's scale).
fn line_of(line: &crate::finance::LineView) -> Result<Line, StoreError> {
    let corrupt = || StoreError::Corrupt(format!("journal line {line:?} cannot be read back"));
    Ok(Line {
        account: line.account.clone(),
        currency: Currency::parse(&line.currency).map_err(|_| corrupt())?,
        amount: line.amount.parse::<Decimal>().map_err(|_| corrupt())?,
    })
}

/// Reverses entry `id` and, with lines, posts its correction; see the module.
pub(super) async fn correct<B: CorrectionRows>(
    backend: &B,
    id: i64,
    request: &CorrectionRequest,
    decision: &Decision,
) -> Result<Corrected, DecisionError> {
    decision.require_reason()?;
    if let Some(lines) = &request.lines {
        check_lines(lines).map_err(DecisionError::Invalid)?;
    }
    let original = backend
        .entry(id)
        .await?
        .ok_or(DecisionError::NotFound("entry"))?;
    if let Some(done) = backend.correction_of_entry(id).await? {
        if done.actor == decision.actor && done.reason == decision.reason {
            return Ok(Corrected {
                id: done.id,
                entry_id: id,
                reversal_entry_id: done.reversal_entry_id,
                correction_entry_id: done.correction_entry_id,
                changed: false,
            });
        }
        return Err(DecisionError::AlreadyDecided(format!(
            "entry {id} was already corrected (correction {}, by {}: {})",
            done.id, done.actor, done.reason
        )));
    }
    if let Some(reversed) = original.reverses_entry_id {
        return Err(DecisionError::AlreadyDecided(format!(
            "entry {id} is itself the reversal of entry {reversed}: correct that entry instead"
        )));
    }
    if let Some(by) = original.reversed_by_entry_id {
        return Err(DecisionError::AlreadyDecided(format!(
            "entry {id} was already reversed by entry {by}"
        )));
    }
    let lines = original
        .lines
        .iter()
        .map(line_of)
        .collect::<Result<Vec<_>, _>>()?;
    let details = serde_json::json!({"correction_of": id}).to_string();
    let reversal = EntryDraft {
        source_key: format!("correction/{id}/reversal"),
        effective_date: request.effective_date,
        description: format!("Reversal of entry {id}: {}", decision.reason),
        lines: reversal_lines(&lines),
    };
    let correction = request.lines.as_ref().map(|lines| EntryDraft {
        source_key: format!("correction/{id}/corrected"),
        effective_date: request.effective_date,
        description: format!("Correction of entry {id}: {}", decision.reason),
        lines: lines.clone(),
    });
    let taken = || {
        DecisionError::AlreadyDecided(format!(
            "entry {id} was reversed or corrected meanwhile; look again"
        ))
    };
    let mut tx = backend.begin_write().await?;
    let reversal_id = B::write_entry(
        &mut tx,
        &CorrectionEntry {
            original: &original,
            draft: &reversal,
            reverses: Some(id),
            details: details.clone(),
        },
    )
    .await?
    .ok_or_else(taken)?;
    let correction_id = match &correction {
        Some(draft) => Some(
            B::write_entry(
                &mut tx,
                &CorrectionEntry {
                    original: &original,
                    draft,
                    reverses: None,
                    details,
                },
            )
            .await?
            .ok_or_else(taken)?,
        ),
        None => None,
    };
    let recorded = B::record_correction(&mut tx, id, reversal_id, correction_id, decision).await?;
    backend.commit(tx).await?;
    Ok(Corrected {
        id: recorded,
        entry_id: id,
        reversal_entry_id: reversal_id,
        correction_entry_id: correction_id,
        changed: true,
    })
}

#[cfg(test)]
mod rules {
    use super::*;

    fn line(account: &str, currency: &str, amount: &str) -> Line {
        Line {
            account: account.into(),
            currency: Currency::parse(currency).expect("currency"),
            amount: amount.parse().expect("amount"),
        }
    }

    #[test]
    fn typed_lines_must_balance_per_currency_at_its_scale() {
        assert!(
            check_lines(&[
                line("assets:std", "USD", "96.80"),
                line("income:sales", "USD", "-96.80")
            ])
            .is_ok()
        );
        assert!(check_lines(&[line("assets:std", "USD", "1.00")]).is_err());
        assert!(
            check_lines(&[
                line("assets:std", "USD", "1.00"),
                line("income:sales", "USD", "-0.99")
            ])
            .is_err()
        );
        assert!(
            check_lines(&[
                line("assets:std", "JPY", "1.5"),
                line("income:sales", "JPY", "-1.5")
            ])
            .is_err(),
            "yen have no minor unit"
        );
        assert!(
            check_lines(&[
                line(" ", "USD", "1.00"),
                line("income:sales", "USD", "-1.00")
            ])
            .is_err()
        );
        assert_eq!(
            check_lines(&[
                line("assets:std\n2030-01-01 * forged", "USD", "1.00"),
                line("income:sales", "USD", "-1.00")
            ]),
            Err("an account has no control characters (a newline, a tab)".into())
        );
    }
}
