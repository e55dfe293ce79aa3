//! Journal exports: CSV (one row per line), hledger journal, beancount. Entries are read and
//! written a page at a time, so an export never holds the whole journal in memory. The ledger
//! formats end with balance assertions over what they contain, so `hledger check` and
//! `bean-check` verify the file against settle's own sums.

use std::collections::BTreeMap;

use chrono::{Days, NaiveDate};
use futures::Stream;
use ledger::SourceName;
use ledger::Store;
use ledger::finance::{EntryView, JournalCursor, JournalFilter, exact};
use ledger::posting::{Accounts, PostingRules};
use rust_decimal::Decimal;

/// Entries read per page.
const PAGE_ENTRIES: u32 = 1_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Format {
    Csv,
    Hledger,
    Beancount,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8",
            Format::Hledger | Format::Beancount => "text/plain; charset=utf-8",
        }
    }
}

const CSV_HEADER: [&str; 14] = [
    "entry_id",
    "line_no",
    "effective_date",
    "recorded_at",
    "account",
    "currency",
    "debit",
    "credit",
    "source",
    "kind",
    "movement_id",
    "payout_id",
    "reverses_entry_id",
    "description",
];

/// Turns entries into one format's text, remembering what the closing assertions need.
#[derive(Debug)]
pub struct Writer {
    format: Format,
    rules: PostingRules,
    totals: BTreeMap<(String, String), Decimal>,
    /// settle account -> beancount account, as opened.
    opened: BTreeMap<String, String>,
    last_date: Option<NaiveDate>,
    entries: usize,
}

impl Writer {
    pub fn new(format: Format, rules: PostingRules) -> Self {
        Self {
            format,
            rules,
            totals: BTreeMap::new(),
            opened: BTreeMap::new(),
            last_date: None,
            entries: 0,
        }
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    pub fn header(&self) -> String {
        match self.format {
            Format::Csv => csv_row(&CSV_HEADER.map(String::from)),
            Format::Hledger => "; settle journal export (hledger)\n\n".into(),
            Format::Beancount => "; settle journal export (beancount)\n\n".into(),
        }
    }

    pub fn entry(&mut self, entry: &EntryView) -> String {
        self.entries += 1;
        self.last_date = self.last_date.max(Some(entry.effective_date));
        for line in &entry.lines {
            let amount: Decimal = line.amount.parse().unwrap_or_default();
            *self
                .totals
                .entry((line.account.clone(), line.currency.clone()))
                .or_default() += amount;
        }
        match self.format {
            Format::Csv => csv_entry(entry),
            Format::Hledger => hledger_entry(entry),
            Format::Beancount => self.beancount_entry(entry),
        }
    }

    /// The closing balance assertions (ledger formats); nothing for CSV.
    pub fn footer(&self) -> String {
        let Some(last) = self.last_date else {
            return String::new();
        };
        match self.format {
            Format::Csv => String::new(),
            Format::Hledger => {
                let mut out = format!("{last} settle closing balances (assertions)\n");
                for ((account, currency), total) in &self.totals {
                    out.push_str(&format!(
                        "    {}  0 {currency} = {} {currency}\n",
                        one_line(account),
                        exact(*total, currency)
                    ));
                }
                out
            }
            Format::Beancount => {
                let day_after = last.checked_add_days(Days::new(1)).unwrap_or(last);
                let mut out = String::from("\n; closing balances\n");
                for ((account, currency), total) in &self.totals {
                    let name = self.beancount_account(account);
                    out.push_str(&format!(
                        "{day_after} balance {name}  {} {currency}\n",
                        exact(*total, currency)
                    ));
                }
                out
            }
        }
    }

    fn beancount_entry(&mut self, entry: &EntryView) -> String {
        let mut out = String::new();
        for line in &entry.lines {
            if !self.opened.contains_key(&line.account) {
                let name = self.beancount_account_for(&entry.source, &line.account);
                out.push_str(&format!("1970-01-01 open {name}\n"));
                self.opened.insert(line.account.clone(), name);
            }
        }
        out.push_str(&format!(
            "{} * \"{}\" \"{}\"\n  entry: \"{}\"\n  kind: \"{}\"\n  movement: \"{}\"\n",
            entry.effective_date,
            quote(&entry.source),
            quote(&entry.description),
            entry.id,
            quote(&entry.kind),
            quote(&entry.movement_id)
        ));
        for line in &entry.lines {
            let name = self.beancount_account(&line.account);
            out.push_str(&format!("  {name}  {} {}\n", line.amount, line.currency));
        }
        out.push('\n');
        out
    }

    /// Beancount accounts are typed (`Assets:`, `Income:`...) and capitalised: settle's accounts
    /// are typed by the role they play for a source; an account with no known role is equity.
    fn beancount_account_for(&self, source: &str, account: &str) -> String {
        let accounts = SourceName::parse(source)
            .map(|s| self.rules.accounts(&s))
            .ok();
        let root = accounts
            .map(|a| account_type(&a, account))
            .unwrap_or("Equity");
        format!("{root}:{}", beancount_components(account))
    }

    fn beancount_account(&self, account: &str) -> String {
        self.opened
            .get(account)
            .cloned()
            .unwrap_or_else(|| format!("Equity:{}", beancount_components(account)))
    }
}

fn account_type(accounts: &Accounts, account: &str) -> &'static str {
    if account == accounts.balance || account == accounts.bank {
        "Assets"
    } else if account == accounts.fees
        || account == accounts.refunds
        || account == accounts.disputes
    {
        "Expenses"
    } else if account == accounts.sales || account == accounts.adjustments {
        "Income"
    } else {
        "Equity"
    }
}

/// `std:balance` -> `Std:Balance`; characters beancount does not allow become `-`.
fn beancount_components(account: &str) -> String {
    account
        .split(':')
        .map(|part| {
            let cleaned: String = part
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            let mut chars = cleaned.chars();
            match chars.next() {
                Some(first) if first.is_ascii_alphanumeric() => {
                    first.to_ascii_uppercase().to_string() + chars.as_str()
                }
                _ => format!("X{cleaned}"),
            }
        })
        .collect::<Vec<_>>()
        .join(":")
}

fn quote(text: &str) -> String {
    one_line(text).replace('\\', "\\\\").replace('"', "\\\"")
}

/// `text` with every control character (a newline in a reason, say) a space: in a ledger file
/// a newline would end the entry and start whatever the text says next.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A CSV cell a spreadsheet shows as text: one starting with `=`, `+`, `-`, `@`, a tab or a
/// carriage return (a formula, to a spreadsheet) gets a leading `'`. Amounts are written as
/// magnitudes (debit, credit) and dates and ids start with a digit, so no number is touched.
fn cell(text: String) -> String {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}"),
        _ => text,
    }
}

fn hledger_entry(entry: &EntryView) -> String {
    // `;` starts a comment and `|` splits payee from note in hledger descriptions.
    let description = one_line(&entry.description).replace([';', '|'], ",");
    let mut out = format!(
        "{} {description}  ; entry:{}, source:{}, kind:{}, event:{}\n",
        entry.effective_date,
        entry.id,
        entry.source,
        one_line(&entry.kind),
        entry.event_id
    );
    for line in &entry.lines {
        out.push_str(&format!(
            "    {}  {} {}\n",
            one_line(&line.account),
            line.amount,
            line.currency
        ));
    }
    out.push('\n');
    out
}

fn csv_entry(entry: &EntryView) -> String {
    let mut out = String::new();
    for line in &entry.lines {
        let negative = line.amount.starts_with('-');
        let magnitude = line.amount.trim_start_matches('-').to_owned();
        let (debit, credit) = if negative {
            (String::new(), magnitude)
        } else {
            (magnitude, String::new())
        };
        out.push_str(&csv_row(&[
            entry.id.to_string(),
            line.line_no.to_string(),
            entry.effective_date.to_string(),
            entry.recorded_at.to_rfc3339(),
            line.account.clone(),
            line.currency.clone(),
            debit,
            credit,
            entry.source.clone(),
            entry.kind.clone(),
            entry.movement_id.clone(),
            entry.payout_id.clone().unwrap_or_default(),
            entry
                .reverses_entry_id
                .map(|id| id.to_string())
                .unwrap_or_default(),
            entry.description.clone(),
        ]));
    }
    out
}

fn csv_row(fields: &[String]) -> String {
    let mut writer = csv::Writer::from_writer(Vec::with_capacity(256));
    // Writing to memory cannot fail.
    let _ = writer.write_record(fields.iter().map(|field| cell(field.clone())));
    writer
        .into_inner()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// The export as a stream of text chunks (one per page of entries), for files and HTTP bodies.
pub fn stream(
    store: Store,
    format: Format,
    filter: JournalFilter,
    rules: PostingRules,
) -> impl Stream<Item = Result<String, ledger::StoreError>> {
    struct State {
        store: Store,
        filter: JournalFilter,
        writer: Writer,
        cursor: Option<JournalCursor>,
        phase: Phase,
    }
    enum Phase {
        Header,
        Entries,
        Footer,
        Done,
    }
    let state = State {
        store,
        filter,
        writer: Writer::new(format, rules),
        cursor: None,
        phase: Phase::Header,
    };
    futures::stream::unfold(state, |mut state| async move {
        match state.phase {
            Phase::Header => {
                state.phase = Phase::Entries;
                let header = state.writer.header();
                Some((Ok(header), state))
            }
            Phase::Entries => match state
                .store
                .journal(&state.filter, state.cursor, PAGE_ENTRIES)
                .await
            {
                Ok(page) => {
                    let chunk: String = page
                        .items
                        .iter()
                        .map(|entry| state.writer.entry(entry))
                        .collect();
                    match page.next_cursor.as_deref().and_then(JournalCursor::parse) {
                        Some(cursor) => state.cursor = Some(cursor),
                        None => state.phase = Phase::Footer,
                    }
                    Some((Ok(chunk), state))
                }
                Err(error) => {
                    state.phase = Phase::Done;
                    Some((Err(error), state))
                }
            },
            Phase::Footer => {
                state.phase = Phase::Done;
                let footer = state.writer.footer();
                Some((Ok(footer), state))
            }
            Phase::Done => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beancount_account_names_are_typed_and_capitalised() {
        let source = SourceName::parse("std").expect("source");
        let rules = PostingRules::default();
        let writer = Writer::new(Format::Beancount, rules);
        assert_eq!(
            writer.beancount_account_for(source.as_str(), "std:balance"),
            "Assets:Std:Balance"
        );
        assert_eq!(
            writer.beancount_account_for("std", "fees:std"),
            "Expenses:Fees:Std"
        );
        assert_eq!(writer.beancount_account_for("std", "sales"), "Income:Sales");
        assert_eq!(writer.beancount_account_for("std", "bank"), "Assets:Bank");
        assert_eq!(
            writer.beancount_account_for("std", "odd name:x_y"),
            "Equity:Odd-name:X-y"
        );
    }

    #[test]
    fn csv_cells_a_spreadsheet_would_run_are_text() {
        assert_eq!(
            csv_row(&[
                "=HYPERLINK(\"x\")".into(),
                "+1".into(),
                "-2".into(),
                "@SUM(A1)".into(),
                "\tx".into(),
                "12.50".into(),
                "sales".into(),
            ]),
            "\"'=HYPERLINK(\"\"x\"\")\",'+1,'-2,'@SUM(A1),'\tx,12.50,sales\n"
        );
    }

    #[test]
    fn ledger_texts_stay_on_their_line() {
        assert_eq!(one_line("a\nb\r\tc"), "a b  c");
        assert_eq!(
            quote("say \"hi\"\n2030-01-01 *"),
            "say \\\"hi\\\" 2030-01-01 *"
        );
    }

    /// An entry whose texts carry a newline and a forged transaction after it (a correction's
    /// reason, a provider's description): each format writes it as the one transaction it is.
    #[test]
    fn an_entry_with_a_forged_line_in_its_texts_stays_one_transaction() {
        let forged = "refund\n2030-01-01 * \"forged\"\n    assets:cash  1000000 USD";
        let entry = EntryView {
            id: 7,
            effective_date: NaiveDate::from_ymd_opt(2026, 12, 1).expect("date"),
            recorded_at: chrono::Utc::now(),
            source: "std".into(),
            kind: forged.into(),
            movement_id: forged.into(),
            payout_id: None,
            reference: None,
            description: forged.into(),
            event_id: 3,
            reverses_entry_id: None,
            reversed_by_entry_id: None,
            details: None,
            lines: ["sales", "std:balance"]
                .iter()
                .zip(["-10.00", "10.00"])
                .enumerate()
                .map(|(n, (account, amount))| ledger::finance::LineView {
                    line_no: i32::try_from(n).expect("small"),
                    account: (*account).into(),
                    currency: "USD".into(),
                    amount: amount.into(),
                })
                .collect(),
        };
        for format in [Format::Hledger, Format::Beancount] {
            let mut writer = Writer::new(format, PostingRules::default());
            let text = writer.entry(&entry);
            let dated: Vec<&str> = text
                .lines()
                .filter(|line| line.starts_with(|c: char| c.is_ascii_digit()))
                .collect();
            let opens = dated.iter().filter(|l| l.contains(" open ")).count();
            assert_eq!(
                dated.len() - opens,
                1,
                "{format:?}: one transaction\n{text}"
            );
            assert!(
                dated.iter().all(|l| !l.starts_with("2030")),
                "{format:?}\n{text}"
            );
            assert!(
                text.lines()
                    .all(|l| !l.trim_start().starts_with("assets:cash")),
                "{format:?}: no forged posting\n{text}"
            );
        }
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(
            csv_row(&["a".into(), "b,c".into(), "say \"hi\"".into()]),
            "a,\"b,c\",\"say \"\"hi\"\"\"\n"
        );
    }
}
