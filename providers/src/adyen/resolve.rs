//! Resolving an Adyen event. A sale (or its failure) needs no call: one movement, a receivable
//! in the shopper's currency that the report's `Settled` line clears. A settlement details
//! report is downloaded whole to a temporary file, read once to check every line (a report that
//! does not parse or add up posts nothing), then read again in chunks of [`CHUNK_ENTRIES`]
//! entries, each chunk posted in its own transaction, each line by its key. The event is marked
//! posted with the last chunk; a run that stops half way is run again and finds the lines it
//! posted already posted (with the same facts), so a report never holds the database for longer
//! than a chunk, nor the worker's memory for more than one.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use futures::future::BoxFuture;
use ledger::posting::{self, Accounts};
use ledger::resolved::{MovementEntry, Resolved};
use ledger::trigger::Trigger;
use ledger::{PayoutId, PostError, ProviderError, SourceName};

use super::download::AdyenReports;
use super::report::{Report, ReportError, ReportLine, batch_of, batch_payout};
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
                    let chunks = open_report(reports, &self.source, &report, accounts).await?;
                    Ok(Resolution::Chunked(Box::new(chunks)))
                }
            }
        })
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
    batch: String,
    payout: PayoutId,
    accounts: Accounts,
}

/// Downloads the report `trigger` names and checks every line.
async fn open_report(
    reports: &AdyenReports,
    source: &SourceName,
    trigger: &AdyenReportTrigger,
    accounts: &Accounts,
) -> Result<ReportChunks, PostError> {
    let file = reports.download(&trigger.url).await?;
    let path = file.path().to_owned();
    // The first reading checks every line and finds the batch.
    let checked = {
        let (path, source, file_name, merchant) = (
            path.clone(),
            source.clone(),
            trigger.file.clone(),
            trigger.merchant_account.clone(),
        );
        tokio::task::spawn_blocking(move || check(&path, &source, &file_name, &merchant))
            .await
            .map_err(|e| ProviderError::Response(format!("checking the report: {e}")))?
    };
    let (batch, payout) = checked?;
    Ok(ReportChunks {
        report: open(&path)?,
        _file: file,
        source: source.clone(),
        batch,
        payout,
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
            entries.extend(
                line_entries(&line, &self.source, &self.batch, &self.payout, &self.accounts)
                    .map_err(report_error)?,
            );
        }
        Ok(Resolved {
            entries,
            payout: Some(self.payout.clone()),
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

/// Reads every line: each must parse and add up, all of one batch. Answers the batch and its
/// payout.
fn check(
    path: &PathBuf,
    source: &SourceName,
    file_name: &str,
    merchant: &str,
) -> Result<(String, PayoutId), PostError> {
    let mut report = open(path)?;
    let payout_of = |batch: &str| {
        batch_payout(merchant, batch).map_err(|e| {
            PostError::from(ProviderError::Facts(format!(
                "settlement details report: merchant account {merchant:?}, batch {batch:?}: {e}"
            )))
        })
    };
    let provisional = payout_of("0")?;
    let mut lines = 0u64;
    while let Some(line) = report.next_line() {
        line.and_then(|line| {
            line.movement(source, "0", &provisional)?;
            line.sale(source)
        })
        .map_err(report_error)?;
        lines += 1;
    }
    if lines == 0 {
        return Err(report_error(ReportError::Empty));
    }
    let batch = batch_of(file_name, report.batch_number());
    let payout = payout_of(&batch)?;
    Ok((batch, payout))
}

/// A line's entries: the sale a `Settled` line settles (booked once, here or by its `CAPTURE`
/// notification, whichever comes first; not paid out by the batch), then the line's own movement
/// (none for a line that moves no money), paid out by the batch.
fn line_entries(
    line: &ReportLine,
    source: &SourceName,
    batch: &str,
    payout: &PayoutId,
    accounts: &Accounts,
) -> Result<Vec<MovementEntry>, ReportError> {
    let mut entries = Vec::with_capacity(2);
    if let Some(sale) = line.sale(source)? {
        let draft = posting::draft_receivable(&sale, accounts);
        entries.push(MovementEntry::unpaid(sale, draft));
    }
    let movement = line.movement(source, batch, payout)?;
    if !movement.is_zero() {
        let draft = posting::draft_movement(&movement, accounts);
        entries.push(MovementEntry::new(movement, draft));
    }
    Ok(entries)
}

/// A report's own fault: permanent, nothing of it posted.
fn report_error(error: ReportError) -> PostError {
    ProviderError::Facts(format!("settlement details report: {error}")).into()
}
