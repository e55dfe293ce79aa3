//! Posting rules (README.md, From event to journal entry): how a settlement event becomes a balanced journal entry. Pure
//! functions; the store runs them inside the posting transaction.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::Deserialize;

use crate::event::{Amounts, Kind, SettlementEvent};
use crate::ids::SourceName;
use crate::money::{Amount, Currency};
use crate::movement::{Counter, FeeType, Movement};
use crate::post_error::PostError;

/// The accounts one source posts to. Every name may be configured; the defaults are those of
/// README.md, From event to journal entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accounts {
    pub balance: String,
    pub fees: String,
    pub sales: String,
    pub refunds: String,
    pub disputes: String,
    pub bank: String,
    pub adjustments: String,
    pub receivables: String,
    pub fx: String,
    /// The source's name, for the provider's chart accounts named with `{source}`.
    pub source: String,
    /// The account a provider's category goes to instead of its default counter account
    /// (`[sources.accounts.chart]`: category = account).
    pub chart: BTreeMap<String, String>,
    /// The connected account every account is namespaced by, if any.
    pub namespace: Option<String>,
}

/// What every receivables account's name begins with: the store keeps the open receivables of
/// those accounts as the journal is written (`receivable_deltas`), and reads them from there.
pub const RECEIVABLES_PREFIX: &str = "receivables:";

/// The prefix of the account a category the provider's chart does not know is booked to
/// (`suspense:{source}`), for a person to classify (a review item).
pub const SUSPENSE_PREFIX: &str = "suspense:";
/// That account, as a provider's chart names it (`{source}` is the source's name).
pub const SUSPENSE: &str = "suspense:{source}";

/// Account overrides as configured; unset names keep their defaults.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AccountOverrides {
    pub balance: Option<String>,
    pub fees: Option<String>,
    pub sales: Option<String>,
    pub refunds: Option<String>,
    pub disputes: Option<String>,
    pub bank: Option<String>,
    pub adjustments: Option<String>,
    pub receivables: Option<String>,
    pub fx: Option<String>,
    /// By the provider's category (its reporting category or record type): the
    /// account its counter side goes to instead of the chart's default.
    #[serde(default)]
    pub chart: BTreeMap<String, String>,
}

impl Accounts {
    /// `{source}:balance`, `fees:{source}`, `sales`, `refunds`, `disputes:{source}`, `bank`,
    /// `adjustments`, `receivables:{source}`, `fx:{source}`.
    pub fn defaults(source: &SourceName) -> Accounts {
        Accounts {
            balance: format!("{source}:balance"),
            fees: format!("fees:{source}"),
            sales: "sales".into(),
            refunds: "refunds".into(),
            disputes: format!("disputes:{source}"),
            bank: "bank".into(),
            adjustments: "adjustments".into(),
            receivables: format!("{RECEIVABLES_PREFIX}{source}"),
            fx: format!("fx:{source}"),
            source: source.to_string(),
            chart: BTreeMap::new(),
            namespace: None,
        }
    }

    /// Every account namespaced by a connected account (`{source}:balance:acct_1`,
    /// `sales:acct_1`): a connected account's money is never booked to the platform's accounts.
    pub fn for_connected_account(&self, account: &str) -> Accounts {
        let namespaced = |name: &String| format!("{name}:{account}");
        Accounts {
            balance: namespaced(&self.balance),
            fees: namespaced(&self.fees),
            sales: namespaced(&self.sales),
            refunds: namespaced(&self.refunds),
            disputes: namespaced(&self.disputes),
            bank: namespaced(&self.bank),
            adjustments: namespaced(&self.adjustments),
            receivables: namespaced(&self.receivables),
            fx: namespaced(&self.fx),
            source: self.source.clone(),
            chart: self.chart.clone(),
            namespace: Some(account.to_owned()),
        }
    }

    pub fn with_overrides(source: &SourceName, overrides: &AccountOverrides) -> Accounts {
        let defaults = Accounts::defaults(source);
        let pick = |set: &Option<String>, default: String| set.clone().unwrap_or(default);
        Accounts {
            balance: pick(&overrides.balance, defaults.balance),
            fees: pick(&overrides.fees, defaults.fees),
            sales: pick(&overrides.sales, defaults.sales),
            refunds: pick(&overrides.refunds, defaults.refunds),
            disputes: pick(&overrides.disputes, defaults.disputes),
            bank: pick(&overrides.bank, defaults.bank),
            adjustments: pick(&overrides.adjustments, defaults.adjustments),
            receivables: pick(&overrides.receivables, defaults.receivables),
            fx: pick(&overrides.fx, defaults.fx),
            source: defaults.source,
            chart: overrides.chart.clone(),
            namespace: None,
        }
    }

    /// The account the counter side of a movement of `category` goes to: the source's own
    /// choice for the category, else `counter`'s.
    pub fn counter_account(&self, category: &str, counter: Counter) -> String {
        let namespaced = |name: &str| match &self.namespace {
            Some(account) => format!("{name}:{account}"),
            None => name.to_owned(),
        };
        if let Some(chosen) = self.chart.get(category) {
            return namespaced(chosen);
        }
        let a = self;
        match counter {
            Counter::Sales => a.sales.clone(),
            Counter::Refunds => a.refunds.clone(),
            Counter::Disputes => a.disputes.clone(),
            Counter::Fees => a.fees.clone(),
            Counter::Bank => a.bank.clone(),
            Counter::Adjustments => a.adjustments.clone(),
            Counter::Receivables => a.receivables.clone(),
            Counter::Chart(name) => namespaced(&name.replace("{source}", &self.source)),
        }
    }
}

/// The accounts of every source; a source without configuration gets the defaults.
#[derive(Clone, Debug, Default)]
pub struct PostingRules {
    by_source: HashMap<SourceName, Accounts>,
}

impl PostingRules {
    pub fn new(by_source: HashMap<SourceName, Accounts>) -> Self {
        Self { by_source }
    }

    pub fn accounts(&self, source: &SourceName) -> Accounts {
        self.by_source
            .get(source)
            .cloned()
            .unwrap_or_else(|| Accounts::defaults(source))
    }

    /// Every configured source's receivables account, each once, in name order.
    pub fn receivables_accounts(&self) -> Vec<String> {
        let accounts: std::collections::BTreeSet<String> = self
            .by_source
            .values()
            .map(|accounts| accounts.receivables.clone())
            .collect();
        accounts.into_iter().collect()
    }
}

/// One line of an entry: debit positive, credit negative, never zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub account: String,
    pub currency: Currency,
    pub amount: Decimal,
}

/// An entry about to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryDraft {
    pub source_key: String,
    pub effective_date: NaiveDate,
    pub description: String,
    pub lines: Vec<Line>,
}

impl EntryDraft {
    /// Every currency sums to zero and there are at least two lines.
    pub fn is_balanced(&self) -> bool {
        let mut totals: BTreeMap<Currency, Decimal> = BTreeMap::new();
        for line in &self.lines {
            *totals.entry(line.currency).or_default() += line.amount;
        }
        self.lines.len() >= 2 && totals.values().all(Decimal::is_zero)
    }
}

/// The money-movement identity an entry is unique by: `{source}/{kind}/{movement_id}`.
pub fn source_key(source: &SourceName, kind: Kind, movement_id: &str) -> String {
    format!("{source}/{kind}/{movement_id}")
}

/// The entry an event posts. `payout_failed` posts the reversal of its payout's entry instead
/// (see [`reversal_lines`]); the lines built here for it mirror `payout_paid` and are only used
/// to check the amounts agree.
pub fn draft(source: &SourceName, event: &SettlementEvent, accounts: &Accounts) -> EntryDraft {
    let currency = event.currency();
    let mut lines = Lines::new(currency);
    let a = accounts;
    match *event.amounts() {
        Amounts::ChargeSettled { gross, fee, net } => {
            lines
                .debit(&a.balance, net)
                .debit(&a.fees, fee)
                .credit(&a.sales, gross);
        }
        Amounts::RefundSettled { amount, fee } => {
            let total = sum(amount, fee);
            lines
                .debit(&a.refunds, amount)
                .debit(&a.fees, fee)
                .credit_decimal(&a.balance, total);
        }
        Amounts::Chargeback { amount, fee } => {
            let total = sum(amount, fee);
            lines
                .debit(&a.disputes, amount)
                .debit(&a.fees, fee)
                .credit_decimal(&a.balance, total);
        }
        Amounts::ChargebackReversed { amount } => {
            lines.debit(&a.balance, amount).credit(&a.disputes, amount);
        }
        Amounts::Fee { amount } => {
            lines.debit(&a.fees, amount).credit(&a.balance, amount);
        }
        Amounts::PayoutPaid { amount } => {
            lines.debit(&a.bank, amount).credit(&a.balance, amount);
        }
        Amounts::PayoutFailed { amount } => {
            lines.debit(&a.balance, amount).credit(&a.bank, amount);
        }
        Amounts::Adjustment { amount } => {
            lines
                .debit(&a.balance, amount)
                .credit(&a.adjustments, amount);
        }
    }
    let mut description = format!("{} {} ({source})", event.kind(), event.movement_id());
    if let Some(reference) = event.reference() {
        description.push_str(&format!(" ref {reference}"));
    }
    EntryDraft {
        source_key: source_key(source, event.kind(), event.movement_id().as_str()),
        effective_date: event.occurred_at().date_naive(),
        description,
        lines: lines.into_vec(),
    }
}

/// The entry a provider's movement posts (one per movement, whichever event reached it): the
/// provider balance takes the net, each fee part its fee account, and the gross goes against the
/// movement's counter account. `net + fees = amount`, so it balances; zero amounts get no line.
///
/// | counter | account |
/// |---|---|
/// | sales, refunds, disputes, bank, adjustments, receivables | that account of the source |
/// | fees | the fee account (a provider fee posted as its own movement) |
///
/// Fee parts: the provider's own processing fee ([`FeeType::providers_own`]) goes to `fees`, any
/// other part to `{fees}:{fee type}` (`fees:{source}:application_fee`, `fees:{source}:tax`).
///
/// A gross the provider converted (a settlement line in another currency than the shopper paid
/// in) goes through the FX clearing account: the counter takes the gross in its own
/// currency, `fx` the gross in that currency and the converted amount in the movement's, so each
/// currency balances and `fx` keeps the conversion's difference.
pub fn draft_movement(movement: &Movement, accounts: &Accounts) -> EntryDraft {
    let a = accounts;
    let counter_name = a.counter_account(movement.provider_category(), movement.counter());
    let counter = counter_name.as_str();
    let mut fee_lines: BTreeMap<String, Decimal> = BTreeMap::new();
    for fee in movement.fees() {
        *fee_lines.entry(fee_account(a, &fee.fee_type)).or_default() += fee.amount.decimal();
    }
    if movement.fees().is_empty() && !movement.fee().is_zero() {
        fee_lines.insert(a.fees.clone(), movement.fee().decimal());
    }
    let mut lines = Lines::new(movement.currency());
    lines.push(&a.balance, movement.net().decimal());
    for (account, amount) in &fee_lines {
        lines.push(account, *amount);
    }
    let lines = match movement.converted_counter() {
        None => {
            lines.push(counter, -movement.amount().decimal());
            lines.into_vec()
        }
        Some((gross, currency)) => {
            lines.push(&a.fx, -movement.amount().decimal());
            let mut converted = Lines::new(currency);
            converted
                .push(&a.fx, gross.decimal())
                .push(counter, -gross.decimal());
            let mut all = lines.into_vec();
            all.extend(converted.into_vec());
            all
        }
    };
    EntryDraft {
        source_key: movement.source_key().to_owned(),
        effective_date: movement.occurred_at().date_naive(),
        description: describe(movement),
        lines,
    }
}

/// The entry of a movement that is owed, not yet on the provider balance (a sale captured and
/// not yet settled): the receivable takes its amount, against its counter account.
pub fn draft_receivable(movement: &Movement, accounts: &Accounts) -> EntryDraft {
    let mut lines = Lines::new(movement.currency());
    lines
        .debit(&accounts.receivables, movement.amount())
        .credit(
            &accounts.counter_account(movement.provider_category(), movement.counter()),
            movement.amount(),
        );
    EntryDraft {
        source_key: movement.source_key().to_owned(),
        effective_date: movement.occurred_at().date_naive(),
        description: describe(movement),
        lines: lines.into_vec(),
    }
}

fn describe(movement: &Movement) -> String {
    let mut description = format!("{} {}", movement.kind(), movement.id());
    if let Some(reference) = movement.reference() {
        description.push_str(&format!(" ({reference})"));
    }
    description
}

/// The account of one fee part.
pub fn fee_account(accounts: &Accounts, fee_type: &FeeType) -> String {
    if fee_type.is_providers_own() {
        accounts.fees.clone()
    } else {
        format!("{}:{fee_type}", accounts.fees)
    }
}

/// The lines that reverse `original`: every amount negated, accounts unchanged.
pub fn reversal_lines(original: &[Line]) -> Vec<Line> {
    original
        .iter()
        .map(|line| Line {
            account: line.account.clone(),
            currency: line.currency,
            amount: -line.amount,
        })
        .collect()
}

/// Whether two sets of lines move the same amounts in the same currencies (accounts aside):
/// a reversal must undo exactly what its original posted.
pub fn same_amounts(a: &[Line], b: &[Line]) -> bool {
    let amounts = |lines: &[Line]| {
        let mut amounts: Vec<(Currency, Decimal)> = lines
            .iter()
            .map(|l| (l.currency, l.amount.normalize()))
            .collect();
        amounts.sort();
        amounts
    };
    amounts(a) == amounts(b)
}

/// The reversal rule: a payout failure's entry is the line-for-line reversal of its payout's
/// entry (`paid`), and must move the same amounts as the failure's own draft; otherwise the
/// failure is refused with what it was for.
pub fn reverse_payout(
    payout_id: &str,
    paid: &[Line],
    failure: &EntryDraft,
    currency: Currency,
) -> Result<Vec<Line>, PostError> {
    let reversal = reversal_lines(paid);
    if same_amounts(&reversal, &failure.lines) {
        return Ok(reversal);
    }
    let amount: Decimal = failure
        .lines
        .iter()
        .map(|l| l.amount)
        .filter(|a| a.is_sign_positive())
        .sum();
    Err(PostError::ReversalMismatch {
        payout_id: payout_id.to_owned(),
        detail: format!("the failure is for {currency} {amount}"),
    })
}

/// The replay rule: an entry already holds this source key; the same facts (`fingerprint`)
/// replay it, different facts are a conflict.
pub fn replay_or_conflict(
    stored_fingerprint: &str,
    fingerprint: &str,
    source_key: &str,
) -> Result<(), PostError> {
    if stored_fingerprint == fingerprint {
        Ok(())
    } else {
        Err(PostError::SourceReplayConflict {
            source_key: source_key.to_owned(),
        })
    }
}

fn sum(a: Amount, b: Amount) -> Decimal {
    a.decimal() + b.decimal()
}

/// Collects lines, skipping zero amounts (a zero fee has no line).
struct Lines {
    currency: Currency,
    lines: Vec<Line>,
}

impl Lines {
    fn new(currency: Currency) -> Self {
        Self {
            currency,
            lines: Vec::with_capacity(3),
        }
    }

    fn push(&mut self, account: &str, amount: Decimal) -> &mut Self {
        if !amount.is_zero() {
            self.lines.push(Line {
                account: account.to_owned(),
                currency: self.currency,
                amount,
            });
        }
        self
    }

    fn debit(&mut self, account: &str, amount: Amount) -> &mut Self {
        self.push(account, amount.decimal())
    }

    fn credit(&mut self, account: &str, amount: Amount) -> &mut Self {
        self.push(account, -amount.decimal())
    }

    fn credit_decimal(&mut self, account: &str, amount: Decimal) -> &mut Self {
        self.push(account, -amount)
    }

    fn into_vec(self) -> Vec<Line> {
        self.lines
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(kind: Kind, currency: &str, amounts: serde_json::Value) -> SettlementEvent {
        let mut data = json!({"movement_id": "m_1", "occurred_at": "2026-11-30T23:59:59Z",
                              "currency": currency, "payout_id": "po_1"});
        for (key, value) in amounts.as_object().expect("amounts") {
            data[key] = value.clone();
        }
        SettlementEvent::from_canonical(kind, data.as_object().expect("object"))
            .expect("valid event")
    }

    /// Posts `event` with the default accounts of source `s` and compares the lines as
    /// `(account, "signed amount")`.
    fn check(event: SettlementEvent, expected: &[(&str, &str)]) {
        let source = SourceName::parse("s").expect("source");
        let entry = draft(&source, &event, &Accounts::defaults(&source));
        let got: Vec<(String, String)> = entry
            .lines
            .iter()
            .map(|l| (l.account.clone(), l.amount.to_string()))
            .collect();
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(a, m)| (a.to_string(), m.to_string()))
            .collect();
        assert_eq!(got, want, "{}", event.kind());
        assert!(entry.is_balanced(), "{} balances", event.kind());
        assert!(entry.lines.iter().all(|l| l.currency == event.currency()));
        assert_eq!(entry.effective_date.to_string(), "2026-11-30");
        assert_eq!(entry.source_key, format!("s/{}/m_1", event.kind()));
    }

    #[test]
    fn every_kind_posts_its_documented_entry() {
        check(
            event(
                Kind::ChargeSettled,
                "USD",
                json!({"gross": "100.00", "fee": "3.20", "net": "96.80"}),
            ),
            &[
                ("s:balance", "96.80"),
                ("fees:s", "3.20"),
                ("sales", "-100.00"),
            ],
        );
        check(
            event(
                Kind::RefundSettled,
                "USD",
                json!({"amount": "40.00", "fee": "0.50"}),
            ),
            &[
                ("refunds", "40.00"),
                ("fees:s", "0.50"),
                ("s:balance", "-40.50"),
            ],
        );
        check(
            event(
                Kind::Chargeback,
                "EUR",
                json!({"amount": "25.00", "fee": "15.00"}),
            ),
            &[
                ("disputes:s", "25.00"),
                ("fees:s", "15.00"),
                ("s:balance", "-40.00"),
            ],
        );
        check(
            event(Kind::ChargebackReversed, "EUR", json!({"amount": "25.00"})),
            &[("s:balance", "25.00"), ("disputes:s", "-25.00")],
        );
        check(
            event(Kind::Fee, "USD", json!({"amount": "1.99"})),
            &[("fees:s", "1.99"), ("s:balance", "-1.99")],
        );
        check(
            event(Kind::PayoutPaid, "USD", json!({"amount": "500.00"})),
            &[("bank", "500.00"), ("s:balance", "-500.00")],
        );
        check(
            event(Kind::PayoutFailed, "USD", json!({"amount": "500.00"})),
            &[("s:balance", "500.00"), ("bank", "-500.00")],
        );
        check(
            event(Kind::Adjustment, "USD", json!({"amount": "-2.50"})),
            &[("s:balance", "-2.50"), ("adjustments", "2.50")],
        );
    }

    #[test]
    fn zero_and_three_decimal_currencies_post_exactly() {
        check(
            event(
                Kind::ChargeSettled,
                "JPY",
                json!({"gross": "1000", "fee": "36", "net": "964"}),
            ),
            &[("s:balance", "964"), ("fees:s", "36"), ("sales", "-1000")],
        );
        check(
            event(
                Kind::ChargeSettled,
                "KWD",
                json!({"gross": "10.125", "fee": "0.301", "net": "9.824"}),
            ),
            &[
                ("s:balance", "9.824"),
                ("fees:s", "0.301"),
                ("sales", "-10.125"),
            ],
        );
        check(
            event(
                Kind::RefundSettled,
                "KWD",
                json!({"amount": "1.001", "fee": "0.002"}),
            ),
            &[
                ("refunds", "1.001"),
                ("fees:s", "0.002"),
                ("s:balance", "-1.003"),
            ],
        );
    }

    #[test]
    fn a_zero_fee_has_no_line() {
        check(
            event(
                Kind::ChargeSettled,
                "USD",
                json!({"gross": "10.00", "fee": "0.00", "net": "10.00"}),
            ),
            &[("s:balance", "10.00"), ("sales", "-10.00")],
        );
    }

    #[test]
    fn configured_accounts_replace_the_defaults() {
        let source = SourceName::parse("cards").expect("source");
        let overrides = AccountOverrides {
            balance: Some("assets:cards".into()),
            sales: Some("income:sales".into()),
            ..AccountOverrides::default()
        };
        let accounts = Accounts::with_overrides(&source, &overrides);
        assert_eq!(accounts.fees, "fees:cards");
        let event = event(
            Kind::ChargeSettled,
            "USD",
            json!({"gross": "1.00", "fee": "0.10", "net": "0.90"}),
        );
        let entry = draft(&source, &event, &accounts);
        let accounts: Vec<&str> = entry.lines.iter().map(|l| l.account.as_str()).collect();
        assert_eq!(accounts, ["assets:cards", "fees:cards", "income:sales"]);
    }

    #[test]
    fn a_reversal_negates_every_line() {
        let source = SourceName::parse("s").expect("source");
        let paid = draft(
            &source,
            &event(Kind::PayoutPaid, "USD", json!({"amount": "5.00"})),
            &Accounts::defaults(&source),
        );
        let reversed = reversal_lines(&paid.lines);
        assert_eq!(reversed[0].amount.to_string(), "-5.00");
        assert_eq!(reversed[1].amount.to_string(), "5.00");
        let both: Vec<Line> = paid.lines.iter().cloned().chain(reversed).collect();
        let sum: Decimal = both.iter().map(|l| l.amount).sum();
        assert!(sum.is_zero());
    }

    #[test]
    fn unbalanced_drafts_are_detected() {
        let usd = Currency::parse("USD").expect("USD");
        let line = |amount: i64| Line {
            account: "a".into(),
            currency: usd,
            amount: Decimal::from(amount),
        };
        let entry = |lines| EntryDraft {
            source_key: "k".into(),
            effective_date: NaiveDate::default(),
            description: String::new(),
            lines,
        };
        assert!(entry(vec![line(1), line(-1)]).is_balanced());
        assert!(!entry(vec![line(1), line(-2)]).is_balanced());
        assert!(!entry(vec![line(0)]).is_balanced());
    }

    fn usd(account: &str, amount: &str) -> Line {
        Line {
            account: account.into(),
            currency: Currency::parse("USD").expect("USD"),
            amount: amount.parse().expect("amount"),
        }
    }

    #[test]
    fn a_payout_failure_reverses_its_payout_line_for_line_or_is_refused() {
        let paid = [usd("bank", "96.80"), usd("std:balance", "-96.80")];
        let failure = |amount: &str| EntryDraft {
            source_key: "std/payout_failed/po_1".into(),
            effective_date: NaiveDate::from_ymd_opt(2026, 12, 1).expect("date"),
            description: "payout_failed po_1".into(),
            lines: vec![
                usd("std:balance", amount),
                usd("bank", &format!("-{amount}")),
            ],
        };
        let usd_code = Currency::parse("USD").expect("USD");
        let reversal =
            reverse_payout("po_1", &paid, &failure("96.80"), usd_code).expect("reversal");
        assert_eq!(
            reversal,
            vec![usd("bank", "-96.80"), usd("std:balance", "96.80")]
        );
        match reverse_payout("po_1", &paid, &failure("90.00"), usd_code) {
            Err(PostError::ReversalMismatch { payout_id, detail }) => {
                assert_eq!(payout_id, "po_1");
                assert_eq!(detail, "the failure is for USD 90.00");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_same_facts_replay_and_different_ones_conflict() {
        assert!(replay_or_conflict("ab", "ab", "std/charge_settled/ch_1").is_ok());
        assert!(matches!(
            replay_or_conflict("ab", "cd", "std/charge_settled/ch_1"),
            Err(PostError::SourceReplayConflict { source_key }) if source_key == "std/charge_settled/ch_1"
        ));
    }
}
