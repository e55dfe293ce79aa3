//! What finance reads: the journal, balances, payout reconciliation. Amounts are exact decimal
//! strings at the currency's scale; nothing here is a float.

use std::fmt;

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::event::{Amounts, SettlementEvent};
use crate::money::Currency;

/// Which entries a journal listing or export covers. Unset fields match everything; an entry
/// matches `account`/`currency` when any of its lines does (and then shows all its lines).
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JournalFilter {
    /// Effective date on or after.
    pub from: Option<NaiveDate>,
    /// Effective date on or before.
    pub to: Option<NaiveDate>,
    pub account: Option<String>,
    pub currency: Option<String>,
    pub source: Option<String>,
    pub kind: Option<String>,
    pub reference: Option<String>,
    pub payout_id: Option<String>,
    /// Latest effective date first (the cursor then pages towards older entries).
    pub newest_first: bool,
}

/// A position in the journal's order (effective date, then id). The journal is append-only, so
/// paging by it returns every entry that existed when the listing began exactly once, however
/// many entries are written meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalCursor {
    pub effective_date: NaiveDate,
    pub id: i64,
}

impl JournalCursor {
    pub fn parse(text: &str) -> Option<JournalCursor> {
        let (date, id) = text.split_once('.')?;
        Some(JournalCursor {
            effective_date: NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?,
            id: id.parse().ok()?,
        })
    }
}

impl fmt::Display for JournalCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.effective_date.format("%Y-%m-%d"), self.id)
    }
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct LineView {
    pub line_no: i32,
    pub account: String,
    pub currency: String,
    /// Signed: debit positive, credit negative, at the currency's scale.
    pub amount: String,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EntryView {
    pub id: i64,
    pub effective_date: NaiveDate,
    pub recorded_at: DateTime<Utc>,
    pub source: String,
    pub kind: String,
    pub movement_id: String,
    pub payout_id: Option<String>,
    pub reference: Option<String>,
    pub description: String,
    /// The event whose job wrote this entry (for a provider movement, the first event that
    /// reached it).
    pub event_id: i64,
    pub reverses_entry_id: Option<i64>,
    pub reversed_by_entry_id: Option<i64>,
    /// What the provider reported about the movement (its own description of the item of its
    /// ledger: type or category, net, exchange rate, fee parts...); absent for an entry posted
    /// from a webhook's own facts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
    pub lines: Vec<LineView>,
}

impl EntryView {
    pub fn cursor(&self) -> JournalCursor {
        JournalCursor {
            effective_date: self.effective_date,
            id: self.id,
        }
    }
}

/// One page of the journal, oldest first.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct JournalPage {
    pub items: Vec<EntryView>,
    pub next_cursor: Option<String>,
}

/// Balances as of an effective date, optionally counting only what was recorded by a point in
/// time (so a report can be reproduced later).
#[derive(Clone, Copy, Debug, Default)]
pub struct BalanceQuery {
    pub as_of: Option<NaiveDate>,
    pub recorded_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BalanceRow {
    pub account: String,
    pub currency: String,
    /// Debit positive, credit negative.
    pub balance: String,
}

/// A receivable not cleared: a sale captured and never settled (or settled for another amount),
/// by the capture it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OpenReceivable {
    pub source: String,
    /// The capture's reference at the provider (the entries' movement id).
    pub capture: String,
    pub account: String,
    pub currency: String,
    /// What is still owed (debit positive).
    pub outstanding: String,
    /// The earliest effective date of its entries.
    pub since: NaiveDate,
    pub reference: Option<String>,
}

/// An open receivable as a backend reads it: source, capture, account, currency, outstanding
/// (the backend's sum), since, reference.
pub(crate) type ReceivableRow<A> = (String, String, String, String, A, NaiveDate, Option<String>);

impl OpenReceivable {
    pub(crate) fn from_row(row: ReceivableRow<Decimal>) -> Self {
        let (source, capture, account, currency, amount, since, reference) = row;
        OpenReceivable {
            outstanding: exact(amount, &currency),
            source,
            capture,
            account,
            currency,
            since,
            reference,
        }
    }
}

/// How many days a receivable may stay open before it is listed, unless asked otherwise: a
/// provider settles a capture within days (its settlement delay), so a week is late by any
/// account.
pub const RECEIVABLE_DAYS: u32 = 7;

/// The latest first effective date of a receivable open for at least `days` days today.
pub fn open_since(days: u32) -> NaiveDate {
    chrono::Utc::now().date_naive() - chrono::Days::new(u64::from(days))
}

/// How a payout compares with the items it paid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReconciliationStatus {
    /// The payout equals the net of its items.
    Matched,
    /// The payout and the items' net differ.
    Unmatched,
    /// Items carry this payout id, but no payout was posted.
    MissingPayout,
    /// A payout was posted, but no items carry its id.
    MissingItems,
    /// The payout was posted and then reversed by its failure.
    Reversed,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ReconciliationItem {
    pub entry_id: i64,
    pub kind: String,
    pub movement_id: String,
    pub effective_date: NaiveDate,
    /// What the item did to the provider balance the payout drains.
    pub net: String,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Reconciliation {
    pub payout_id: String,
    pub status: ReconciliationStatus,
    pub currency: Option<String>,
    pub payout_entry_id: Option<i64>,
    pub payout_amount: Option<String>,
    pub items_net: String,
    /// `payout_amount - items_net`.
    pub difference: String,
    pub items: Vec<ReconciliationItem>,
}

/// A payout in the reconciliation listing.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct PayoutSummary {
    pub payout_id: String,
    pub status: ReconciliationStatus,
    pub currency: Option<String>,
    pub payout_amount: Option<String>,
    pub items_net: String,
    pub difference: String,
    pub items: usize,
}

impl From<&Reconciliation> for PayoutSummary {
    fn from(r: &Reconciliation) -> Self {
        PayoutSummary {
            payout_id: r.payout_id.clone(),
            status: r.status,
            currency: r.currency.clone(),
            payout_amount: r.payout_amount.clone(),
            items_net: r.items_net.clone(),
            difference: r.difference.clone(),
            items: r.items.len(),
        }
    }
}

/// An amount at its currency's scale (`96.8000000000` USD -> `96.80`); unknown currencies keep
/// the value normalised.
pub fn exact(amount: Decimal, currency: &str) -> String {
    let mut amount = amount;
    match Currency::parse(currency) {
        Ok(currency) => amount.rescale(currency.exponent()),
        Err(_) => amount = amount.normalize(),
    }
    amount.to_string()
}

impl SettlementEvent {
    /// What this event does to the provider balance (`{source}:balance`): positive adds to it.
    /// A payout drains it; the items a payout pays out add up to the payout.
    pub fn balance_effect(&self) -> Decimal {
        match *self.amounts() {
            Amounts::ChargeSettled { net, .. } => net.decimal(),
            Amounts::RefundSettled { amount, fee } | Amounts::Chargeback { amount, fee } => {
                -(amount.decimal() + fee.decimal())
            }
            Amounts::ChargebackReversed { amount }
            | Amounts::Adjustment { amount }
            | Amounts::PayoutFailed { amount } => amount.decimal(),
            Amounts::Fee { amount } | Amounts::PayoutPaid { amount } => -amount.decimal(),
        }
    }
}

/// What an entry did to the provider balance, with its currency: the net the provider reported
/// (`details.net`) for a movement resolved through its API, else the effect of its event's own
/// facts.
pub fn balance_effect(
    details: Option<&serde_json::Value>,
    facts: Option<&serde_json::Value>,
) -> Result<(Decimal, String), String> {
    if let Some(details) = details {
        let net = details.get("net").and_then(serde_json::Value::as_str);
        let currency = details.get("currency").and_then(serde_json::Value::as_str);
        return match (net.map(str::parse::<Decimal>), currency) {
            (Some(Ok(net)), Some(currency)) => Ok((net, currency.to_owned())),
            _ => Err("an entry's details carry no readable net and currency".into()),
        };
    }
    let facts = facts.ok_or("an entry's event has no facts")?;
    let event = SettlementEvent::from_stored(facts).map_err(|e| e.to_string())?;
    Ok((event.balance_effect(), event.currency().code().to_owned()))
}

/// Compares a payout with its items. `payout`: `(entry id, amount, currency, reversed)`.
pub fn reconcile(
    payout_id: &str,
    payout: Option<(i64, Decimal, String, bool)>,
    items: Vec<(ReconciliationItem, Decimal, String)>,
) -> Reconciliation {
    let currency = payout
        .as_ref()
        .map(|p| p.2.clone())
        .or_else(|| items.first().map(|i| i.2.clone()));
    let currency_text = currency.clone().unwrap_or_default();
    let mixed = items.iter().any(|(_, _, c)| Some(c) != currency.as_ref());
    let items_net: Decimal = items.iter().map(|(_, net, _)| *net).sum();
    let payout_amount = payout.as_ref().map(|p| p.1).unwrap_or_default();
    let status = match &payout {
        Some((_, _, _, true)) => ReconciliationStatus::Reversed,
        None => ReconciliationStatus::MissingPayout,
        Some(_) if items.is_empty() => ReconciliationStatus::MissingItems,
        Some(_) if !mixed && payout_amount == items_net => ReconciliationStatus::Matched,
        Some(_) => ReconciliationStatus::Unmatched,
    };
    Reconciliation {
        payout_id: payout_id.to_owned(),
        status,
        currency,
        payout_entry_id: payout.as_ref().map(|p| p.0),
        payout_amount: payout.as_ref().map(|p| exact(p.1, &p.2)),
        items_net: exact(items_net, &currency_text),
        difference: exact(payout_amount - items_net, &currency_text),
        items: items.into_iter().map(|(item, _, _)| item).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        let cursor = JournalCursor {
            effective_date: NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"),
            id: 42,
        };
        assert_eq!(JournalCursor::parse(&cursor.to_string()), Some(cursor));
        assert_eq!(JournalCursor::parse("garbage"), None);
    }

    #[test]
    fn amounts_come_out_at_the_currency_scale() {
        let check = |text: &str, currency: &str, want: &str| {
            let value: Decimal = text.parse().expect("decimal");
            assert_eq!(exact(value, currency), want);
        };
        check("96.8000000000", "USD", "96.80");
        check("-1000.0000000000", "JPY", "-1000");
        check("1.2340000000", "KWD", "1.234");
        check("0", "USD", "0.00");
    }

    fn item(net: &str) -> (ReconciliationItem, Decimal, String) {
        let item = ReconciliationItem {
            entry_id: 1,
            kind: "charge_settled".into(),
            movement_id: "ch".into(),
            effective_date: NaiveDate::default(),
            net: net.into(),
        };
        (item, net.parse().expect("decimal"), "USD".into())
    }

    #[test]
    fn reconciliation_statuses() {
        let payout = |amount: &str, reversed| {
            Some((
                9,
                amount.parse().expect("decimal"),
                "USD".to_owned(),
                reversed,
            ))
        };
        let check = |r: Reconciliation, status, difference: &str| {
            assert_eq!(r.status, status);
            assert_eq!(r.difference, difference);
        };
        check(
            reconcile(
                "po",
                payout("100.00", false),
                vec![item("96.80"), item("3.20")],
            ),
            ReconciliationStatus::Matched,
            "0.00",
        );
        check(
            reconcile("po", payout("100.00", false), vec![item("96.80")]),
            ReconciliationStatus::Unmatched,
            "3.20",
        );
        check(
            reconcile("po", None, vec![item("96.80")]),
            ReconciliationStatus::MissingPayout,
            "-96.80",
        );
        check(
            reconcile("po", payout("1.00", false), vec![]),
            ReconciliationStatus::MissingItems,
            "1.00",
        );
        check(
            reconcile("po", payout("1.00", true), vec![item("1.00")]),
            ReconciliationStatus::Reversed,
            "0.00",
        );
    }
}
