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

/// The start of the hour (UTC) after the one holding `at`: the balances kept by recorded hour
/// hold every line recorded from then on, and the lines recorded after `at` before then are read
/// one by one.
pub fn next_hour(at: DateTime<Utc>) -> DateTime<Utc> {
    let hour = at.timestamp().div_euclid(3_600) + 1;
    DateTime::from_timestamp(hour * 3_600, 0).unwrap_or(at)
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// No payout: the items' net was carried to another payout (a settlement batch closing
    /// into the next) by items marked [`CARRIED_DETAIL`], every currency's net nothing.
    CarriedForward,
}

/// The key of an entry's details that says it moves the provider balance from one payout to
/// another (a settlement batch closing into the next, or one receiving what the last carried):
/// a payout whose items net to nothing through such items, with no payout, was carried forward,
/// not missed.
pub const CARRIED_DETAIL: &str = "carried_between_payouts";

/// One currency of a payout's reconciliation: a provider pays a batch out once per currency it
/// settles in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct CurrencyReconciliation {
    pub currency: String,
    pub status: ReconciliationStatus,
    /// What the payouts in this currency paid (none: no payout in it).
    pub payout_amount: Option<String>,
    pub items_net: String,
    /// `payout_amount - items_net`.
    pub difference: String,
    /// What the items carried to another payout (the carried items' net, negated), if any did.
    pub carried_forward: Option<String>,
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
    /// Every currency's status together: matched only when every currency is.
    pub status: ReconciliationStatus,
    /// The first currency's (the payout's) figures; `by_currency` holds every currency's.
    pub currency: Option<String>,
    pub payout_entry_id: Option<i64>,
    pub payout_amount: Option<String>,
    pub items_net: String,
    /// `payout_amount - items_net`.
    pub difference: String,
    pub by_currency: Vec<CurrencyReconciliation>,
    pub items: Vec<ReconciliationItem>,
}

/// The version of what a payout's summary is computed by ([`reconcile`], [`balance_effect`], the
/// summary's fields): a summary the payouts listing kept under another is computed again. Raise it
/// with any change to them.
pub const PAYOUT_SUMMARY_VERSION: i64 = 1;

/// A payout in the reconciliation listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

/// A payout entry as [`reconcile`] reads it: `(entry id, amount, currency, reversed)`.
pub type PayoutEntry = (i64, Decimal, String, bool);

/// An item as [`reconcile`] reads it: the item, its net and currency, and whether it carries
/// the balance between payouts ([`CARRIED_DETAIL`]).
pub type PayoutItem = (ReconciliationItem, Decimal, String, bool);

/// Compares a payout with its items, currency by currency: a batch paid out once per settlement
/// currency has a payout entry in each.
pub fn reconcile(
    payout_id: &str,
    payouts: Vec<PayoutEntry>,
    items: Vec<PayoutItem>,
) -> Reconciliation {
    let mut currencies: Vec<String> = Vec::new();
    for currency in payouts
        .iter()
        .map(|p| &p.2)
        .chain(items.iter().map(|i| &i.2))
    {
        if !currencies.contains(currency) {
            currencies.push(currency.clone());
        }
    }
    let reversed = payouts.iter().any(|p| p.3);
    let by_currency: Vec<CurrencyReconciliation> = currencies
        .iter()
        .map(|currency| {
            let paid: Vec<Decimal> = payouts
                .iter()
                .filter(|p| &p.2 == currency)
                .map(|p| p.1)
                .collect();
            let mine = || items.iter().filter(|i| &i.2 == currency);
            let items_net: Decimal = mine().map(|i| i.1).sum();
            let carried: Option<Decimal> = mine()
                .any(|i| i.3)
                .then(|| -mine().filter(|i| i.3).map(|i| i.1).sum::<Decimal>());
            let payout_amount: Option<Decimal> = (!paid.is_empty()).then(|| paid.iter().sum());
            let status = match payout_amount {
                _ if reversed => ReconciliationStatus::Reversed,
                Some(_) if mine().next().is_none() => ReconciliationStatus::MissingItems,
                Some(amount) if amount == items_net => ReconciliationStatus::Matched,
                Some(_) => ReconciliationStatus::Unmatched,
                None if carried.is_some() && items_net.is_zero() => {
                    ReconciliationStatus::CarriedForward
                }
                None => ReconciliationStatus::MissingPayout,
            };
            CurrencyReconciliation {
                currency: currency.clone(),
                status,
                payout_amount: payout_amount.map(|a| exact(a, currency)),
                items_net: exact(items_net, currency),
                difference: exact(payout_amount.unwrap_or_default() - items_net, currency),
                carried_forward: carried.map(|c| exact(c, currency)),
            }
        })
        .collect();
    let statuses: Vec<ReconciliationStatus> = by_currency.iter().map(|c| c.status).collect();
    let all = |wanted: &[ReconciliationStatus]| statuses.iter().all(|s| wanted.contains(s));
    use ReconciliationStatus::*;
    let status = if reversed {
        Reversed
    } else if !payouts.is_empty() && items.is_empty() {
        MissingItems
    } else if all(&[Matched]) {
        Matched
    } else if all(&[Matched, CarriedForward]) {
        CarriedForward
    } else if payouts.is_empty() {
        MissingPayout
    } else {
        Unmatched
    };
    let first = by_currency.first();
    Reconciliation {
        payout_id: payout_id.to_owned(),
        status,
        currency: first.map(|c| c.currency.clone()),
        payout_entry_id: payouts.first().map(|p| p.0),
        payout_amount: first.and_then(|c| c.payout_amount.clone()),
        items_net: first.map_or_else(|| "0".to_owned(), |c| c.items_net.clone()),
        difference: first.map_or_else(|| "0".to_owned(), |c| c.difference.clone()),
        items: items.into_iter().map(|(item, ..)| item).collect(),
        by_currency,
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
    fn the_next_hour_starts_after_the_moment_even_on_the_hour() {
        let at = |text: &str| text.parse::<DateTime<Utc>>().expect("time");
        assert_eq!(
            next_hour(at("2026-12-07T19:34:15.123456Z")),
            at("2026-12-07T20:00:00Z")
        );
        assert_eq!(
            next_hour(at("2026-12-07T19:00:00Z")),
            at("2026-12-07T20:00:00Z")
        );
        assert_eq!(
            next_hour(at("2026-12-31T23:59:59.999Z")),
            at("2027-01-01T00:00:00Z")
        );
        assert_eq!(
            next_hour(at("1969-12-31T23:30:00Z")),
            at("1970-01-01T00:00:00Z")
        );
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

    fn item_in(net: &str, currency: &str, carried: bool) -> PayoutItem {
        let item = ReconciliationItem {
            entry_id: 1,
            kind: "charge_settled".into(),
            movement_id: "ch".into(),
            effective_date: NaiveDate::default(),
            net: net.into(),
        };
        (
            item,
            net.parse().expect("decimal"),
            currency.into(),
            carried,
        )
    }

    fn item(net: &str) -> PayoutItem {
        item_in(net, "USD", false)
    }

    #[test]
    fn reconciliation_statuses() {
        let payout = |amount: &str, reversed| {
            vec![(
                9,
                amount.parse().expect("decimal"),
                "USD".to_owned(),
                reversed,
            )]
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
            reconcile("po", Vec::new(), vec![item("96.80")]),
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

    /// A batch paid out in two currencies is matched only when both payouts are; a batch that
    /// closes into the next one with no payout is carried forward, with the amount.
    #[test]
    fn every_currency_is_compared_and_a_carried_batch_is_not_a_missing_payout() {
        let paid = |amount: &str, currency: &str| {
            (
                9,
                amount.parse().expect("decimal"),
                currency.to_owned(),
                false,
            )
        };
        let two = reconcile(
            "M:batch:7",
            vec![paid("96.80", "EUR"), paid("45.00", "GBP")],
            vec![
                item_in("96.80", "EUR", false),
                item_in("45.00", "GBP", false),
            ],
        );
        assert_eq!(two.status, ReconciliationStatus::Matched);
        assert_eq!(two.by_currency.len(), 2);
        assert_eq!(two.by_currency[1].payout_amount.as_deref(), Some("45.00"));
        let short = reconcile(
            "M:batch:7",
            vec![paid("96.80", "EUR"), paid("44.00", "GBP")],
            vec![
                item_in("96.80", "EUR", false),
                item_in("45.00", "GBP", false),
            ],
        );
        assert_eq!(short.status, ReconciliationStatus::Unmatched);
        assert_eq!(short.by_currency[1].difference, "-1.00");
        // Sales of 100, fees of 3, the 97 left carried to the next batch: no payout, nothing missed.
        let carried = reconcile(
            "M:batch:8",
            Vec::new(),
            vec![
                item_in("100.00", "EUR", false),
                item_in("-3.00", "EUR", false),
                item_in("-97.00", "EUR", true),
            ],
        );
        assert_eq!(carried.status, ReconciliationStatus::CarriedForward);
        assert_eq!(
            carried.by_currency[0].carried_forward.as_deref(),
            Some("97.00")
        );
        // The next batch receives it: its payout includes it.
        let next = reconcile(
            "M:batch:9",
            vec![paid("147.00", "EUR")],
            vec![
                item_in("97.00", "EUR", true),
                item_in("50.00", "EUR", false),
            ],
        );
        assert_eq!(next.status, ReconciliationStatus::Matched);
        // Carried items that do not account for all of it: a payout is missing.
        let missing = reconcile(
            "M:batch:8",
            Vec::new(),
            vec![
                item_in("100.00", "EUR", false),
                item_in("-97.00", "EUR", true),
            ],
        );
        assert_eq!(missing.status, ReconciliationStatus::MissingPayout);
    }
}
