//! Adyen's money, in Adyen's words. Notifications carry the presentment amount, no fees, no
//! settlement currency and no payout; the **settlement details report** of a batch
//! (`settlement_detail_report_batch_N.csv`, announced by a `REPORT_AVAILABLE` notification whose
//! `pspReference` is the file name and `reason` the download URL) carries one line per money
//! movement of the batch, with its fees, in the currency Adyen settles in. What the notification
//! names is kept as the event's facts (an `AdyenReportTrigger`); the job downloads the report
//! and posts each line as one entry ([`ReportLine::movement`]), keyed by the batch and the
//! line's identity, so a report fetched twice, or announced twice, posts each line once.
//!
//! The report is read by column name (Adyen lets an account add columns and reorder them), as
//! Adyen documents it: amounts are positive, in major units, and their side is the column they
//! are in (`Gross Debit (GC)` / `Gross Credit (GC)`, `Net Debit (NC)` / `Net Credit (NC)`); the
//! fees (`Commission`, `Markup`, `Scheme Fees`, `Interchange`) are in the net currency, and a
//! line adds up when its net is its gross in the net currency less its fees.

use std::collections::HashMap;
use std::io::Read;

use chrono::{DateTime, NaiveDateTime, Utc};
use ledger::movement::{Compared, Counter, Fee, FeeType, Movement, MovementParts};
use ledger::posting::SUSPENSE;
use ledger::{Amount, Currency, Kind, MovementId, PayoutId, Reference, SourceName};
use rust_decimal::Decimal;
use serde_json::{Value, json};

pub use super::chart::CARRY_OVER;
use super::chart::{Posting, posting_of};
use super::trigger::{Sale, sale};

/// Why a report cannot be posted. Every one is the report's own (permanent): nothing of it is
/// posted, and a person decides.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("the report's header lacks the column {0:?}")]
    MissingColumn(&'static str),
    #[error("the report cannot be read as CSV: {0}")]
    Csv(String),
    #[error("line {line}: {detail}")]
    Line { line: u64, detail: String },
    #[error("the report has no lines")]
    Empty,
}

/// The columns settle reads; any others are ignored.
const COLUMNS: [&str; 18] = [
    "Merchant Account",
    "Psp Reference",
    "Merchant Reference",
    "Creation Date",
    "TimeZone",
    "Type",
    "Modification Reference",
    "Gross Currency",
    "Gross Debit (GC)",
    "Gross Credit (GC)",
    "Exchange Rate",
    "Net Currency",
    "Net Debit (NC)",
    "Net Credit (NC)",
    "Commission (NC)",
    "Markup (NC)",
    "Scheme Fees (NC)",
    "Interchange (NC)",
];
const BATCH: &str = "Batch Number";

/// The fee columns, with the fee type each is posted as (`fees:{source}:{type}`).
const FEES: [(&str, &str); 4] = [
    ("Commission (NC)", "commission"),
    ("Markup (NC)", "markup"),
    ("Scheme Fees (NC)", "scheme_fees"),
    ("Interchange (NC)", "interchange"),
];

/// A report being read: its columns found by name in the header.
#[derive(Debug)]
pub struct Report<R: Read> {
    reader: csv::Reader<R>,
    columns: HashMap<&'static str, usize>,
    batch: Option<usize>,
    line: u64,
    /// How many times each line identity has been seen so far, by the first 16 bytes of its
    /// SHA-256 (a fixed size however long the report).
    seen: HashMap<[u8; 16], u32>,
}

impl<R: Read> Report<R> {
    /// Reads the header; a missing column refuses the report.
    pub fn new(input: R) -> Result<Self, ReportError> {
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .trim(csv::Trim::None)
            .from_reader(input);
        let header = reader
            .headers()
            .map_err(|e| ReportError::Csv(e.to_string()))?
            .clone();
        let find = |name: &str| {
            header
                .iter()
                .position(|h| h.trim_start_matches('\u{feff}').trim() == name)
        };
        let mut columns = HashMap::with_capacity(COLUMNS.len());
        for name in COLUMNS {
            columns.insert(name, find(name).ok_or(ReportError::MissingColumn(name))?);
        }
        Ok(Self {
            reader,
            columns,
            batch: find(BATCH),
            line: 1,
            seen: HashMap::new(),
        })
    }

    /// The next line, or `None` at the end.
    pub fn next_line(&mut self) -> Option<Result<ReportLine, ReportError>> {
        let mut record = csv::StringRecord::new();
        match self.reader.read_record(&mut record) {
            Ok(false) => return None,
            Ok(true) => {}
            Err(e) => return Some(Err(ReportError::Csv(e.to_string()))),
        }
        self.line += 1;
        let line = self.line;
        let get = |name: &str| {
            self.columns
                .get(name)
                .and_then(|&i| record.get(i))
                .unwrap_or("")
                .trim()
                .to_owned()
        };
        let batch = self
            .batch
            .and_then(|i| record.get(i))
            .unwrap_or("")
            .trim()
            .to_owned();
        let fields: HashMap<&'static str, String> =
            COLUMNS.iter().map(|&name| (name, get(name))).collect();
        // Identities are counted per merchant account and batch: a report may hold several.
        let identity = format!(
            "{}/{}/{}",
            fields["Type"], fields["Psp Reference"], fields["Modification Reference"]
        );
        let counted = format!("{}/{batch}/{identity}", fields["Merchant Account"]);
        let digest = <sha2::Sha256 as sha2::Digest>::digest(counted.as_bytes());
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        let seen = self.seen.entry(key).or_insert(0);
        *seen += 1;
        let identity = match *seen {
            1 => identity,
            n => format!("{identity}#{n}"),
        };
        Some(Ok(ReportLine {
            line,
            identity,
            batch,
            fields,
        }))
    }
}

/// One line of a report, as read.
#[derive(Clone, Debug)]
pub struct ReportLine {
    /// Its line number in the file (the header is line 1).
    pub line: u64,
    /// What identifies it within its batch: type, payment and modification references, and
    /// which occurrence of those it is.
    pub identity: String,
    /// Its `Batch Number` (empty when the report has no such column).
    batch: String,
    fields: HashMap<&'static str, String>,
}

/// Which batch a report's lines belong to: Adyen's `Batch Number` column, else the number in
/// the file name (`..._batch_N.csv`), else the file name.
pub fn batch_of(file: &str, column: Option<&str>) -> String {
    if let Some(batch) = column.filter(|b| !b.is_empty()) {
        return batch.to_owned();
    }
    file.strip_suffix(".csv")
        .and_then(|stem| stem.rsplit_once("_batch_"))
        .map(|(_, n)| n.to_owned())
        .unwrap_or_else(|| file.to_owned())
}

/// The payout a batch's `MerchantPayout` pays and every line of the batch is tied to.
pub fn batch_payout(merchant_account: &str, batch: &str) -> Result<PayoutId, String> {
    PayoutId::parse(&format!("{merchant_account}:batch:{batch}")).map_err(|e| e.to_string())
}

impl ReportLine {
    /// The batch it belongs to, in a report named `file` ([`batch_of`]).
    pub fn batch(&self, file: &str) -> String {
        batch_of(file, Some(&self.batch))
    }

    /// Its `Merchant Account`, else `otherwise` (a report without one names its account in
    /// its notification).
    pub fn merchant_account<'a>(&'a self, otherwise: &'a str) -> &'a str {
        Some(self.field("Merchant Account"))
            .filter(|m| !m.is_empty())
            .unwrap_or(otherwise)
    }

    fn field(&self, name: &'static str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    fn error(&self, detail: impl Into<String>) -> ReportError {
        ReportError::Line {
            line: self.line,
            detail: detail.into(),
        }
    }

    fn currency(&self, column: &'static str) -> Result<Currency, ReportError> {
        Currency::parse(self.field(column)).map_err(|e| self.error(format!("{column}: {e}")))
    }

    /// An amount column: empty is `None`; Adyen writes `.11` for `0.11` and `7.5` for `7.50`.
    fn amount(
        &self,
        column: &'static str,
        currency: Currency,
    ) -> Result<Option<Amount>, ReportError> {
        let text = self.field(column);
        if text.is_empty() {
            return Ok(None);
        }
        let text = match text.strip_prefix('.') {
            Some(rest) => format!("0.{rest}"),
            None => text.to_owned(),
        };
        let amount =
            Amount::parse(&text, currency).map_err(|e| self.error(format!("{column}: {e}")))?;
        if amount.is_negative() {
            return Err(self.error(format!("{column} is negative (sides are columns)")));
        }
        Ok(Some(amount))
    }

    /// Credit less debit: what the line adds to the Adyen balance (or the gross, on its side).
    fn signed(
        &self,
        debit: &'static str,
        credit: &'static str,
        currency: Currency,
    ) -> Result<Option<Amount>, ReportError> {
        match (
            self.amount(debit, currency)?,
            self.amount(credit, currency)?,
        ) {
            (None, None) => Ok(None),
            (Some(debit), None) => Ok(Some(debit.negated())),
            (None, Some(credit)) => Ok(Some(credit)),
            (Some(_), Some(_)) => Err(self.error(format!("both {debit} and {credit} are filled"))),
        }
    }

    /// When it happened: `Creation Date` (`YYYY-MM-DD HH:MM:SS`) in the account's `TimeZone`
    /// (an abbreviation; one settle does not know is read as UTC, and kept in the details).
    fn occurred_at(&self) -> Result<DateTime<Utc>, ReportError> {
        let local = NaiveDateTime::parse_from_str(self.field("Creation Date"), "%Y-%m-%d %H:%M:%S")
            .map_err(|_| self.error("Creation Date is not YYYY-MM-DD HH:MM:SS"))?;
        let offset_hours = zone_offset_hours(self.field("TimeZone")).unwrap_or(0);
        Ok(local.and_utc() - chrono::Duration::hours(offset_hours))
    }

    /// Checks the line adds up and makes it a movement of `source`'s batch `batch`, in the net
    /// currency: a payment line's gross (converted to the net currency, as Adyen did) against its
    /// counter account, its fees by type, its net to the Adyen balance.
    ///
    /// A line of a record type settle has no account for, or one that does not add up, books
    /// its net (what it did to the balance) against `suspense:{source}` with why in its details,
    /// for a person to classify; only a line whose net cannot be read refuses the report.
    pub fn movement(
        &self,
        source: &SourceName,
        batch: &str,
        payout: &PayoutId,
    ) -> Result<Movement, ReportError> {
        let record_type = self.field("Type");
        match posting_of(record_type) {
            Some(posting) => self
                .movement_as(posting, source, batch, payout, None)
                .or_else(|error| {
                    let review = format!("does not add up: {error}");
                    self.movement_as(Posting::Suspense, source, batch, payout, Some(review))
                        .map_err(|_| error)
                }),
            None => {
                let review = format!("record type {record_type:?} has no account in settle's chart");
                self.movement_as(Posting::Suspense, source, batch, payout, Some(review))
            }
        }
    }

    fn movement_as(
        &self,
        posting: Posting,
        source: &SourceName,
        batch: &str,
        payout: &PayoutId,
        review: Option<String>,
    ) -> Result<Movement, ReportError> {
        let record_type = self.field("Type");
        let net_currency = self.currency("Net Currency")?;
        let net = self
            .signed("Net Debit (NC)", "Net Credit (NC)", net_currency)?
            .ok_or_else(|| self.error("neither Net Debit (NC) nor Net Credit (NC) is filled"))?;
        let mut fees = Vec::new();
        let mut fee = Amount::zero(net_currency);
        let fee_columns = match posting {
            Posting::Suspense => &[][..],
            _ => &FEES[..],
        };
        for &(column, fee_type) in fee_columns {
            if let Some(amount) = self.amount(column, net_currency)?
                && !amount.is_zero()
            {
                // A cost on a credit line, a cost returned on a debit line: fees are signed as
                // the money they take from the balance.
                fee = fee
                    .checked_add(amount)
                    .ok_or_else(|| self.error("fees overflow"))?;
                fees.push(Fee {
                    fee_type: FeeType::parse(fee_type).expect("a fixed fee type"),
                    amount,
                });
            }
        }
        let mut gross_text = Value::Null;
        let mut counter_amount = None;
        let (kind, counter, amount, payout_id) = match posting {
            Posting::Gross(kind, counter) => {
                let gross_currency = self.currency("Gross Currency")?;
                let gross = self
                    .signed("Gross Debit (GC)", "Gross Credit (GC)", gross_currency)?
                    .ok_or_else(|| self.error("neither gross column is filled"))?;
                // The gross in the net currency, as Adyen converted it: net plus fees.
                let converted = net
                    .checked_add(fee)
                    .ok_or_else(|| self.error("amounts overflow"))?;
                self.check_conversion((gross, gross_currency), (converted, net_currency))?;
                gross_text =
                    json!({"currency": gross_currency.code(), "amount": gross.to_string()});
                if counter == Counter::Receivables {
                    counter_amount = Some((gross, gross_currency));
                }
                (kind, counter, converted, None)
            }
            Posting::Net(kind, counter) => {
                if !fees.is_empty() {
                    return Err(self.error(format!("a {record_type} line carries fees")));
                }
                (kind, counter, net, None)
            }
            Posting::Cost(fee_type) => {
                if !fees.is_empty() {
                    return Err(self.error(format!("a {record_type} line carries fees")));
                }
                // All of it is the cost: no gross, the fee is what leaves the balance.
                fee = net.negated();
                fees.push(Fee {
                    fee_type: FeeType::parse(fee_type).expect("a fixed fee type"),
                    amount: fee,
                });
                (Kind::Fee, Counter::Fees, Amount::zero(net_currency), None)
            }
            Posting::Suspense => (Kind::Adjustment, Counter::Chart(SUSPENSE), net, None),
            Posting::Payout => {
                if !net.is_negative() || !fees.is_empty() {
                    return Err(
                        self.error("a MerchantPayout line must be a Net Debit, without fees")
                    );
                }
                (Kind::PayoutPaid, Counter::Bank, net, Some(payout.clone()))
            }
        };
        let reference = [
            self.field("Merchant Reference"),
            self.field("Psp Reference"),
        ]
        .into_iter()
        .find(|r| !r.is_empty())
        .map(Reference::parse)
        .transpose()
        .map_err(|e| self.error(e.to_string()))?;
        let id_text = [
            self.field("Modification Reference"),
            self.field("Psp Reference"),
        ]
        .into_iter()
        .find(|r| !r.is_empty())
        .unwrap_or(record_type);
        let id = MovementId::parse(id_text).map_err(|e| self.error(e.to_string()))?;
        let merchant = self.field("Merchant Account");
        let mut details = json!({
            "provider": "adyen",
            "record_type": record_type,
            "batch": batch,
            "merchant_account": merchant,
            "psp_reference": self.field("Psp Reference"),
            "modification_reference": self.field("Modification Reference"),
            "currency": net_currency.code(),
            "net": net.to_string(),
            "gross": gross_text,
            "exchange_rate": self.field("Exchange Rate"),
            "time_zone": self.field("TimeZone"),
            "line": self.line,
        });
        if let Some(review) = review {
            details["review"] = json!(review);
        }
        if counter == Counter::Chart(CARRY_OVER) {
            // What one batch carries to the next: its reconciliation says so.
            details[ledger::finance::CARRIED_DETAIL] = json!(true);
        }
        Movement::new(MovementParts {
            source_key: format!("{source}/settlement/{merchant}/{batch}/{}", self.identity),
            id,
            kind,
            counter,
            currency: net_currency,
            amount,
            fee,
            fees,
            net,
            occurred_at: self.occurred_at()?,
            payout_id,
            reference,
            details,
            provider_category: format!("adyen:{record_type}"),
            counter_amount,
            compared: Compared::Everything,
        })
        .map_err(|e| self.error(e.to_string()))
    }

    /// The sale a `Settled` line settles, as its `CAPTURE` notification would book it (the
    /// capture's PSP reference is the line's `Modification Reference`): `None` for other types.
    pub fn sale(&self, source: &SourceName) -> Result<Option<Movement>, ReportError> {
        if self.field("Type") != "Settled" {
            return Ok(None);
        }
        let currency = self.currency("Gross Currency")?;
        let gross = self
            .signed("Gross Debit (GC)", "Gross Credit (GC)", currency)?
            .ok_or_else(|| self.error("neither gross column is filled"))?;
        let capture = [
            self.field("Modification Reference"),
            self.field("Psp Reference"),
        ]
        .into_iter()
        .find(|r| !r.is_empty())
        .unwrap_or_default();
        let reference = Some(self.field("Merchant Reference")).filter(|r| !r.is_empty());
        sale(
            source,
            Sale {
                capture,
                payment: self.field("Psp Reference"),
                merchant_account: self.field("Merchant Account"),
                reference,
                gross,
                currency,
                occurred_at: self.occurred_at()?,
                failed: false,
            },
        )
        .map(Some)
        .map_err(|e| self.error(e))
    }

    /// The gross (gross currency) and what Adyen converted it to (net currency: net plus fees)
    /// agree: equal in one currency, else within one minor unit of the gross at the line's
    /// exchange rate.
    fn check_conversion(
        &self,
        (gross, gross_currency): (Amount, Currency),
        (converted, net_currency): (Amount, Currency),
    ) -> Result<(), ReportError> {
        if gross_currency == net_currency {
            if gross != converted {
                return Err(self.error(format!(
                    "net plus fees {converted} is not the gross {gross}"
                )));
            }
            return Ok(());
        }
        let rate: Decimal = self
            .field("Exchange Rate")
            .parse()
            .map_err(|_| self.error("Exchange Rate is not a number"))?;
        let exponent = net_currency.exponent();
        let expected = (gross.decimal() * rate).round_dp(exponent);
        if (expected - converted.decimal()).abs() > Decimal::new(1, exponent) {
            return Err(self.error(format!(
                "net plus fees {converted} {net_currency} is not the gross {gross} {gross_currency} at rate {rate} ({expected})"
            )));
        }
        Ok(())
    }
}

/// Hours east of UTC of the zone abbreviations Adyen accounts are set to; `None` for others.
fn zone_offset_hours(abbreviation: &str) -> Option<i64> {
    Some(match abbreviation {
        "UTC" | "GMT" | "WET" => 0,
        "BST" | "CET" | "WEST" => 1,
        "CEST" | "EET" => 2,
        "EEST" | "MSK" => 3,
        "GST" => 4,
        "SGT" | "HKT" | "AWST" => 8,
        "JST" | "KST" => 9,
        "AEST" => 10,
        "AEDT" => 11,
        "BRT" => -3,
        "EDT" => -4,
        "EST" | "CDT" => -5,
        "CST" | "MDT" => -6,
        "MST" | "PDT" => -7,
        "PST" => -8,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
