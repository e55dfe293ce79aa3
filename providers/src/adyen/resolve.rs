//! Resolving an Adyen event. A sale (or its failure) needs no call: one movement, a receivable
//! in the shopper's currency that the report's `Settled` line clears. A settlement details
//! report is downloaded whole to a temporary file, read once to check every line (a report that
//! does not parse, or holds a line whose net cannot be read, posts nothing; a line that does not
//! add up or whose record type settle has no account for is booked to suspense on its own), then
//! read again in chunks of [`CHUNK_ENTRIES`]
//! entries, each chunk posted in its own transaction, each line by its key. The event is marked
//! posted with the last chunk; a run that stops half way is run again and finds the lines it
//! posted already posted (with the same facts), so a report never holds the database for longer
//! than a chunk, nor the worker's memory for more than one. Each line is keyed and paid out by
//! its own merchant account's batch: a report may hold several merchant accounts' lines.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use futures::future::BoxFuture;
use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::trigger::Trigger;
use ledger::{PayoutId, PostError, ProviderError, SourceName};

use super::download::AdyenReports;
use super::report::{Report, ReportError, ReportLine, batch_payout};
use super::trigger::{AdyenReportTrigger, AdyenSaleTrigger, AdyenTrigger};
use crate::seam::{Chunks, Resolution, Resolve};

/// Entries posted per transaction, at least (a chunk ends with the line that reaches it; a
/// `Settled` line is two entries, its sale and its settlement).
pub const CHUNK_ENTRIES: usize = 500;

/// One Adyen source's resolving half: its report downloads, when it books from reports.
#[derive(Debug)]
pub(crate) struct Resolver {
    pub(crate) source: SourceName,
    pub(crate) reports: Option<AdyenReports>,
    /// The merchant accounts booked (`None`: every one).
    pub(crate) merchant_accounts: Option<Vec<String>>,
    /// How long settle waits, at most, between two looks for the batches not booked.
    pub(crate) every: std::time::Duration,
}

impl Resolve for Resolver {
    fn resolve<'a>(
        &'a self,
        trigger: &'a Trigger,
        accounts: &'a Accounts,
    ) -> BoxFuture<'a, Result<Resolution, PostError>> {
        Box::pin(async move {
            match AdyenTrigger::from_trigger(trigger).map_err(PostError::CorruptEvent)? {
                AdyenTrigger::Sale(sale) => {
                    resolve_sale(&self.source, &sale, accounts).map(Resolution::Whole)
                }
                AdyenTrigger::Report(report) => {
                    let reports = self
                        .reports
                        .as_ref()
                        .ok_or_else(|| ProviderError::NotConfigured(self.source.to_string()))?;
                    let booked = self.merchant_accounts.clone();
                    let chunks =
                        open_report(reports, &self.source, &report, booked, accounts).await?;
                    Ok(Resolution::Chunked(Box::new(chunks)))
                }
            }
        })
    }

    /// Each merchant account's batches, when the source downloads reports.
    fn sequence(&self) -> Option<&dyn crate::seam::Sequence> {
        self.reports.as_ref().map(|_| self as &dyn crate::seam::Sequence)
    }
}

/// A sale (or its failure) as its notification names it.
fn resolve_sale(
    source: &SourceName,
    trigger: &AdyenSaleTrigger,
    accounts: &Accounts,
) -> Result<Resolved, PostError> {
    let movement = trigger.movement(source).map_err(|error| {
        ProviderError::Facts(format!(
            "{} {}: {error}",
            trigger.event_code, trigger.psp_reference
        ))
    })?;
    let draft = posting::draft_receivable(&movement, accounts);
    Ok(Resolved {
        entries: vec![MovementEntry::new(movement, draft)],
        payout: None,
        partial: false,
    })
}

/// A downloaded, checked report, read a chunk at a time.
struct ReportChunks {
    /// Removed when the chunks are dropped.
    _file: tempfile::NamedTempFile,
    report: Report<BufReader<File>>,
    source: SourceName,
    /// Whose lines it books and how they are keyed.
    lines: LinesOf,
    accounts: Accounts,
}

/// How a report's lines are placed: each in its own merchant account's batch (a report may hold
/// several), the batch by its `Batch Number` or the file's name; lines of a merchant account the
/// source does not book are skipped (counted).
#[derive(Clone, Debug)]
struct LinesOf {
    file: String,
    /// The merchant account the notification named: a line that names none is its.
    merchant_account: String,
    booked: Option<Vec<String>>,
}

impl LinesOf {
    fn books(&self, line: &ReportLine) -> bool {
        let merchant = line.merchant_account(&self.merchant_account);
        self.booked
            .as_ref()
            .is_none_or(|booked| booked.iter().any(|b| b == merchant))
    }

    /// The line's batch and the payout that pays it out.
    fn batch(&self, line: &ReportLine) -> Result<(String, PayoutId), ReportError> {
        let merchant = line.merchant_account(&self.merchant_account);
        let batch = line.batch(&self.file);
        let payout = batch_payout(merchant, &batch).map_err(|e| ReportError::Line {
            line: line.line,
            detail: format!("merchant account {merchant:?}, batch {batch:?}: {e}"),
        })?;
        Ok((batch, payout))
    }
}

/// Downloads the report `trigger` names and checks every line.
async fn open_report(
    reports: &AdyenReports,
    source: &SourceName,
    trigger: &AdyenReportTrigger,
    booked: Option<Vec<String>>,
    accounts: &Accounts,
) -> Result<ReportChunks, PostError> {
    let file = reports.download(&trigger.url).await?;
    let path = file.path().to_owned();
    let lines = LinesOf {
        file: trigger.file.clone(),
        merchant_account: trigger.merchant_account.clone(),
        booked,
    };
    // The first reading checks every line can be booked.
    {
        let (path, source, lines) = (path.clone(), source.clone(), lines.clone());
        tokio::task::spawn_blocking(move || check(&path, &source, &lines))
            .await
            .map_err(|e| ProviderError::Response(format!("checking the report: {e}")))??;
    }
    Ok(ReportChunks {
        report: open(&path)?,
        _file: file,
        source: source.clone(),
        lines,
        accounts: accounts.clone(),
    })
}

impl Chunks for ReportChunks {
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Resolved, PostError>> {
        Box::pin(std::future::ready(self.read_chunk()))
    }
}

impl ReportChunks {
    /// The next [`CHUNK_ENTRIES`] entries, from the local file.
    fn read_chunk(&mut self) -> Result<Resolved, PostError> {
        let mut entries = Vec::with_capacity(CHUNK_ENTRIES);
        let mut end = false;
        while entries.len() < CHUNK_ENTRIES {
            let Some(line) = self.report.next_line() else {
                end = true;
                break;
            };
            let line = line.map_err(report_error)?;
            if !self.lines.books(&line) {
                metrics::counter!("settle_adyen_report_lines_of_other_merchant_accounts_total",
                    "source" => self.source.to_string())
                .increment(1);
                continue;
            }
            entries.extend(
                line_entries(&line, &self.source, &self.lines, &self.accounts)
                    .map_err(report_error)?,
            );
        }
        Ok(Resolved {
            entries,
            payout: None,
            partial: !end,
        })
    }
}

/// Opens the downloaded file (a failure to is this machine's, and worth another attempt) and
/// reads its header.
fn open(path: &PathBuf) -> Result<Report<BufReader<File>>, PostError> {
    let file = File::open(path).map_err(|e| ProviderError::Unavailable {
        detail: format!("report: cannot read the temporary file: {e}"),
        retry_after_ms: None,
    })?;
    Report::new(BufReader::new(file)).map_err(report_error)
}

/// Reads every line: each must parse and be bookable (a line settle cannot place is booked to
/// suspense; one whose net cannot be read is not bookable at all).
fn check(path: &PathBuf, source: &SourceName, lines: &LinesOf) -> Result<(), PostError> {
    let mut report = open(path)?;
    let mut read = 0u64;
    while let Some(line) = report.next_line() {
        line.and_then(|line| {
            let (batch, payout) = lines.batch(&line)?;
            line.movement(source, &batch, &payout)?;
            line.sale(source)
        })
        .map_err(report_error)?;
        read += 1;
    }
    if read == 0 {
        return Err(report_error(ReportError::Empty));
    }
    Ok(())
}

/// A line's entries: the sale a `Settled` line settles (booked once, here or by its `CAPTURE`
/// notification, whichever comes first; not paid out by the batch), then the line's own movement
/// (none for a line that moves no money), paid out by its batch.
fn line_entries(
    line: &ReportLine,
    source: &SourceName,
    lines: &LinesOf,
    accounts: &Accounts,
) -> Result<Vec<MovementEntry>, ReportError> {
    let mut entries = Vec::with_capacity(2);
    if let Some(sale) = line.sale(source)? {
        let draft = posting::draft_receivable(&sale, accounts);
        entries.push(MovementEntry::unpaid(sale, draft));
    }
    let (batch, payout) = lines.batch(line)?;
    let movement = line.movement(source, &batch, &payout)?;
    if !movement.is_zero() {
        let draft = posting::draft_movement(&movement, accounts);
        entries.push(MovementEntry::paid_by(movement, draft, payout));
    }
    Ok(entries)
}

/// A report's own fault: permanent, nothing of it posted.
fn report_error(error: ReportError) -> PostError {
    ProviderError::Facts(format!("settlement details report: {error}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date,TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC),Payment Method Variant,Modification Merchant Reference,Batch Number";

    /// Each line is placed in its own merchant account's batch (the notification's account and
    /// the file's number where the line names none), and a source restricted to some merchant
    /// accounts books no line of another.
    #[test]
    fn each_line_is_its_own_merchant_accounts_and_only_booked_accounts_are_booked() {
        let csv = format!(
            "{HEADER}\nC,ShopEU,,,,2026-12-03 10:00:00,UTC,Fee,f,,,,,EUR,1.00,,,,,,,,9\nC,ShopUS,,,,2026-12-03 10:00:00,UTC,Fee,f,,,,,USD,1.00,,,,,,,,12\nC,,,,,2026-12-03 10:00:00,UTC,Fee,f,,,,,EUR,1.00,,,,,,,,\n"
        );
        let mut report = Report::new(csv.as_bytes()).expect("header");
        let lines: Vec<ReportLine> = std::iter::from_fn(|| report.next_line())
            .map(|line| line.expect("a line"))
            .collect();
        let of = |booked: Option<Vec<String>>| LinesOf {
            file: "settlement_detail_report_batch_4.csv".to_owned(),
            merchant_account: "ShopEU".to_owned(),
            booked,
        };
        let every = of(None);
        let placed: Vec<String> = lines
            .iter()
            .map(|line| every.batch(line).expect("placed").1.as_str().to_owned())
            .collect();
        assert_eq!(
            placed,
            ["ShopEU:batch:9", "ShopUS:batch:12", "ShopEU:batch:4"]
        );
        assert!(lines.iter().all(|line| every.books(line)));
        let eu = of(Some(vec!["ShopEU".to_owned()]));
        let booked: Vec<bool> = lines.iter().map(|line| eu.books(line)).collect();
        assert_eq!(booked, [true, false, true]);
    }
}
