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
mod tests;
