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
mod tests {
    use super::super::chart::CHART;
    use super::super::trigger::{AdyenSaleTrigger, notified_capture};
    use super::*;

    const HEADER: &str = "Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date,TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC),Payment Method Variant,Modification Merchant Reference,Batch Number,Reserved4,Reserved5,Reserved6,Reserved7,Reserved8,Reserved9,Reserved10";

    fn movements(csv: &str) -> Result<Vec<Movement>, ReportError> {
        let source = SourceName::parse("adyen").expect("source");
        let mut report = Report::new(csv.as_bytes())?;
        let mut movements = Vec::new();
        while let Some(line) = report.next_line() {
            let line = line?;
            let batch = line.batch("settlement_detail_report_batch_3.csv");
            let payout = batch_payout("TestMerchant", &batch).expect("payout");
            movements.push(line.movement(&source, &batch, &payout)?);
        }
        Ok(movements)
    }

    /// Adyen's own sample lines (docs.adyen.com, "Settlement details report", sample data).
    #[test]
    fn adyens_sample_lines_add_up() {
        let csv = format!(
            "{HEADER}\nTestCompany,TestMerchant,1813702551707653,3vpzf7,visa,2013-06-03 11:26:49,CET,Settled,1713702551795048,GBP,,5.00,1,GBP,,4.88,,0.04,0.01,0.07,visaclassic,,,,,,,,,\nTestCompany,TestMerchant,1313642467023511,324959451,visa,2013-03-26 22:37:26,CET,Chargeback,2313642467170922,EUR,349.99,,1,EUR,357.49,,7.5,,,,visaclassic,,,,,,,,,\n"
        );
        let got = movements(&csv).expect("valid");
        assert_eq!(got[0].net().to_string(), "4.88");
        assert_eq!(got[0].amount().to_string(), "5.00");
        assert_eq!(got[0].fee().to_string(), "0.12");
        assert_eq!(got[0].kind(), Kind::ChargeSettled);
        assert_eq!(got[1].net().to_string(), "-357.49");
        assert_eq!(got[1].amount().to_string(), "-349.99");
        assert_eq!(got[1].kind(), Kind::Chargeback);
        assert_eq!(
            got[0].source_key(),
            "adyen/settlement/TestMerchant/3/Settled/1813702551707653/1713702551795048"
        );
        // 11:26:49 CET is 10:26:49 UTC.
        assert_eq!(
            got[0].occurred_at().to_rfc3339(),
            "2013-06-03T10:26:49+00:00"
        );
    }

    #[test]
    fn a_line_that_does_not_add_up_or_of_a_type_settle_cannot_place_books_its_net_to_suspense() {
        let line = |rest: &str| format!("{HEADER}\nC,M,1,r,visa,2026-11-30 10:00:00,CET,{rest}");
        let suspense = |csv: &str, says: &str| {
            let got = movements(csv).expect("booked");
            assert_eq!(got[0].counter(), Counter::Chart(SUSPENSE), "{csv}");
            assert_eq!(got[0].kind(), Kind::Adjustment);
            assert!(got[0].fees().is_empty());
            assert!(
                got[0].details()["review"]
                    .as_str()
                    .is_some_and(|r| r.contains(says)),
                "{}",
                got[0].details()
            );
            got
        };
        // Net 9.00 with 0.50 of fees is not the gross 10.00: its 9.00 is kept, for a person.
        let bad_net = line("Settled,2,EUR,,10.00,1,EUR,,9.00,0.50,,,,v,,7,,,,,,,");
        let got = suspense(&bad_net, "does not add up");
        assert_eq!(got[0].net().to_string(), "9.00");
        assert_eq!(
            got[0].source_key(),
            "adyen/settlement/M/7/Settled/1/2",
            "the key the line would have had"
        );
        let unknown = line("Mystery,2,EUR,,10.00,1,EUR,,10.00,,,,,v,,7,,,,,,,");
        let got = suspense(&unknown, "\"Mystery\" has no account");
        assert_eq!(got[0].net().to_string(), "10.00");
        // A net that cannot be read cannot be booked anywhere: the report is refused.
        let currency = line("Settled,2,EUR,,10.00,1,XXQ,,10.00,,,,,v,,7,,,,,,,");
        assert!(matches!(
            movements(&currency),
            Err(ReportError::Line { .. })
        ));
        let no_net = line("Mystery,2,EUR,,10.00,1,EUR,,,,,,,v,,7,,,,,,,");
        assert!(matches!(movements(&no_net), Err(ReportError::Line { .. })));
        let header = "Company Account,Merchant Account\nC,M\n";
        assert_eq!(
            movements(header).err(),
            Some(ReportError::MissingColumn("Psp Reference"))
        );
    }

    /// Every record type Adyen publishes has its own place in the chart (none is left to
    /// suspense), and the chart holds no type the list does not.
    #[test]
    fn every_published_record_type_is_in_the_chart() {
        let list: Value = serde_json::from_str(include_str!(
            "../../../fixtures/adyen/record_types.json"
        ))
        .expect("the list is JSON");
        let types: Vec<&str> = list["types"]
            .as_array()
            .expect("types")
            .iter()
            .map(|t| t["type"].as_str().expect("a type"))
            .collect();
        assert!(types.len() >= 25, "the list is Adyen's whole list");
        let source = SourceName::parse("adyen").expect("source");
        let accounts = ledger::posting::Accounts::defaults(&source);
        for record_type in &types {
            let posting = posting_of(record_type)
                .unwrap_or_else(|| panic!("{record_type} has no row in the chart"));
            let counter = match posting {
                Posting::Gross(_, counter) | Posting::Net(_, counter) => counter,
                Posting::Cost(_) => Counter::Fees,
                Posting::Payout => Counter::Bank,
                Posting::Suspense => panic!("{record_type} is in suspense"),
            };
            let account = accounts.counter_account(&format!("adyen:{record_type}"), counter);
            assert!(!account.starts_with("suspense"), "{record_type}: {account}");
        }
        for (listed, _) in CHART {
            assert!(types.contains(listed), "{listed} is not in Adyen's list");
        }
        // A type settle has no row for still posts, to suspense.
        assert_eq!(posting_of("SettledInstallment"), None);
    }

    /// Deposits, wires and reserve lines post to their own accounts (not `adjustments`), and a
    /// batch's balance carried to the next batch and received from the last one clear each
    /// other.
    #[test]
    fn deposits_wires_reserves_and_carried_balances_have_their_own_accounts() {
        let source = SourceName::parse("adyen").expect("source");
        let accounts = ledger::posting::Accounts::defaults(&source);
        let line = |record_type: &str, debit: &str, credit: &str| {
            format!(
                "C,M,,,,2026-11-30 10:00:00,UTC,{record_type},{record_type} ref,,,,,EUR,{debit},{credit},,,,,,,7,,,,,,,"
            )
        };
        let csv = [
            HEADER.to_owned(),
            line("DepositCorrection", "78.93", ""),
            line("MatchedStatement", "", "500.00"),
            line("ReserveAdjustment", "10.00", ""),
            line("Balancetransfer", "4.19", ""),
            line("Balancetransfer", "", "4.19"),
        ]
        .join("\n");
        let got = movements(&csv).expect("valid");
        let counters: Vec<(String, String)> = got
            .iter()
            .map(|m| {
                (
                    accounts.counter_account(m.provider_category(), m.counter()),
                    m.net().to_string(),
                )
            })
            .collect();
        assert_eq!(
            counters,
            [
                ("adyen:deposit".to_owned(), "-78.93".to_owned()),
                ("wires:adyen".to_owned(), "500.00".to_owned()),
                ("adyen:reserve".to_owned(), "-10.00".to_owned()),
                ("carry_over:adyen".to_owned(), "-4.19".to_owned()),
                ("carry_over:adyen".to_owned(), "4.19".to_owned()),
            ]
        );
        assert!(got.iter().all(|m| m.details().get("review").is_none()));
    }

    #[test]
    fn another_gross_currency_converts_within_a_minor_unit() {
        // EUR 5.35 at 1.0656568 is USD 5.70; less 0.27 commission, 5.43 net.
        let csv = format!(
            "{HEADER}\nC,M,9,r,ideal,2026-11-30 10:00:00,PST,Settled,8,EUR,,5.35,1.0656568,USD,,5.43,0.27,,,,ideal,,4,,,,,,,\n"
        );
        let got = movements(&csv).expect("valid");
        assert_eq!(got[0].currency().code(), "USD");
        assert_eq!(got[0].amount().to_string(), "5.70");
        // Off by more than a minor unit: it does not add up, and waits in suspense.
        let off = csv.replace(",5.43,", ",5.33,");
        assert_eq!(
            movements(&off).expect("booked")[0].counter(),
            Counter::Chart(SUSPENSE)
        );
    }

    #[test]
    fn net_only_lines_fees_and_the_payout() {
        let csv = format!(
            "{HEADER}\nW,M,,,,2016-02-15 21:29:37,PST,Fee,Transaction Fees February  2016,EUR,,,,USD,1.80,,,,,,,,3,,,,,,,\nW,M,,,,2016-02-15 21:29:37,PST,MerchantPayout,\"TX3488899933XT batch 3, M batch 3, M\",EUR,,,,USD,4.03,,,,,,,,3,,,,,,,\n"
        );
        let got = movements(&csv).expect("valid");
        assert_eq!(
            (got[0].kind(), got[0].net().to_string()),
            (Kind::Fee, "-1.80".to_owned())
        );
        assert_eq!(got[0].fees()[0].fee_type.as_str(), "transaction_fees");
        assert_eq!(got[1].kind(), Kind::PayoutPaid);
        assert_eq!(
            got[1].payout_id().map(PayoutId::as_str),
            Some("TestMerchant:batch:3")
        );
        // Lines of two batches are each their own batch's.
        let mixed = csv.replace(",3,,,,,,,\nW", ",4,,,,,,,\nW");
        let got = movements(&mixed).expect("valid");
        assert!(got[0].source_key().starts_with("adyen/settlement/M/4/"));
        assert!(got[1].source_key().starts_with("adyen/settlement/M/3/"));
    }

    #[test]
    fn a_byte_order_mark_before_the_header_is_not_part_of_a_column_name() {
        let csv = format!(
            "\u{feff}{HEADER}\nC,M,9,r,visa,2026-11-30 10:00:00,CET,Settled,8,EUR,,10.00,1,EUR,,9.75,0.25,,,,v,,5,,,,,,,\n"
        );
        assert_eq!(movements(&csv).expect("valid")[0].net().to_string(), "9.75");
        let moved = format!(
            "\u{feff}Merchant Account,{}",
            HEADER.replace(",Merchant Account,", ",")
        );
        assert!(Report::new(moved.as_bytes()).is_ok());
    }

    #[test]
    fn repeated_identities_are_numbered_and_columns_are_found_by_name() {
        let reordered = "Type,Net Currency,Net Debit (NC),Net Credit (NC),Merchant Account,Psp Reference,Merchant Reference,Creation Date,TimeZone,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC)\nMiscCosts,EUR,1.00,,M,,,2026-11-30 10:00:00,UTC,Cost,,,,,,,,\nMiscCosts,EUR,1.00,,M,,,2026-11-30 10:00:00,UTC,Cost,,,,,,,,\n";
        let got = movements(reordered).expect("valid");
        assert_ne!(got[0].source_key(), got[1].source_key());
        assert!(got[1].source_key().ends_with("#2"));
    }

    fn lines(draft: &ledger::posting::EntryDraft) -> Vec<(String, String, String)> {
        draft
            .lines
            .iter()
            .map(|l| {
                (
                    l.account.clone(),
                    l.currency.code().to_owned(),
                    l.amount.to_string(),
                )
            })
            .collect()
    }

    /// A USD sale settled in EUR: the sale is a USD receivable; the settlement clears it in USD
    /// and puts the EUR net on the balance, the conversion through `fx:adyen` in each currency.
    #[test]
    fn a_settled_line_clears_its_sales_receivable_through_fx() {
        let source = SourceName::parse("adyen").expect("source");
        let accounts = ledger::posting::Accounts::defaults(&source);
        let csv = format!(
            "{HEADER}\nC,M,8816000000000002,order-1002,mc,2026-11-30 10:02:44,CET,Settled,8816000000000102,USD,,50.00,0.92,EUR,,45.00,1.00,,,,mc,,7,,,,,,,\n"
        );
        let mut report = Report::new(csv.as_bytes()).expect("header");
        let line = report.next_line().expect("a line").expect("valid");
        let payout = batch_payout("M", "7").expect("payout");
        let settlement = line.movement(&source, "7", &payout).expect("valid");
        assert_eq!(
            settlement.fingerprint().to_hex(),
            "235c39ac0935487ffdf7913948e4ea71691181c394e22dd0678a0815678c4895",
            "the fingerprint settle has always stored for this line"
        );
        let draft = ledger::posting::draft_movement(&settlement, &accounts);
        assert!(draft.is_balanced());
        assert_eq!(
            lines(&draft),
            [
                ("adyen:balance".into(), "EUR".into(), "45.00".into()),
                ("fees:adyen:commission".into(), "EUR".into(), "1.00".into()),
                ("fx:adyen".into(), "EUR".into(), "-46.00".into()),
                ("fx:adyen".into(), "USD".into(), "50.00".into()),
                ("receivables:adyen".into(), "USD".into(), "-50.00".into()),
            ]
        );
        let sale = line
            .sale(&source)
            .expect("valid")
            .expect("a Settled line's sale");
        assert_eq!(sale.source_key(), "adyen/sale/8816000000000102");
        assert_eq!(
            lines(&ledger::posting::draft_receivable(&sale, &accounts)),
            [
                ("receivables:adyen".into(), "USD".into(), "50.00".into()),
                ("sales".into(), "USD".into(), "-50.00".into()),
            ]
        );
        // Its CAPTURE notification names the same sale: same key, same fingerprint, though the
        // notification has its own time and the line its own.
        let notified = notified_capture();
        let from_notification = notified.movement(&source).expect("a sale");
        assert_eq!(from_notification.source_key(), sale.source_key());
        assert_eq!(from_notification.fingerprint(), sale.fingerprint());
        // Another amount is another sale's facts: a conflict, not a replay.
        let other = AdyenSaleTrigger {
            value: 5_001,
            ..notified.clone()
        };
        assert_ne!(
            other.movement(&source).expect("a sale").fingerprint(),
            sale.fingerprint()
        );
        // A refund line has no sale, and its gross stays in the net currency.
        let refund = csv
            .replace(",Settled,", ",Refunded,")
            .replace(",,50.00,0.92,EUR,,45.00,1.00,", ",50.00,,0.92,EUR,46.00,,,");
        let mut report = Report::new(refund.as_bytes()).expect("header");
        let line = report.next_line().expect("a line").expect("valid");
        assert!(line.sale(&source).expect("valid").is_none());
        let movement = line.movement(&source, "7", &payout).expect("valid");
        assert!(movement.converted_counter().is_none());
    }

    #[test]
    fn a_failed_capture_takes_its_receivable_back() {
        let source = SourceName::parse("adyen").expect("source");
        let failed = AdyenSaleTrigger {
            event_code: "CAPTURE_FAILED".into(),
            psp_reference: "8816000000000103".into(),
            original_reference: "8816000000000003".into(),
            merchant_account: "M".into(),
            merchant_reference: String::new(),
            currency: "JPY".into(),
            value: 1_500,
            event_date: "2026-11-29T18:00:00Z".into(),
        };
        let movement = failed.movement(&source).expect("a failure");
        assert_eq!(
            movement.source_key(),
            "adyen/capture_failed/8816000000000103"
        );
        let accounts = ledger::posting::Accounts::defaults(&source);
        assert_eq!(
            lines(&ledger::posting::draft_receivable(&movement, &accounts)),
            [
                ("receivables:adyen".into(), "JPY".into(), "-1500".into()),
                ("sales".into(), "JPY".into(), "1500".into()),
            ]
        );
        let refund = AdyenSaleTrigger {
            event_code: "REFUND".into(),
            ..failed
        };
        assert!(refund.movement(&source).is_err());
    }
}
