//! Posting an Adyen settlement details report: downloaded whole to a temporary file, read once
//! to check every line (a report that does not parse or add up posts nothing), then read again
//! and posted in chunks of [`CHUNK_LINES`] lines, each chunk in its own transaction, each line
//! by its key. The event is marked posted with the last chunk; a run that stops half way is run
//! again and finds the lines it posted already posted (with the same facts), so a report never
//! holds the database for longer than a chunk, nor the worker's memory for more than one.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use ledger::adyen::{AdyenReportTrigger, Report, ReportError, ReportLine, batch_of, batch_payout};
use ledger::job::ProviderError;
use ledger::movement::{MovementEntry, Resolved};
use ledger::posting::{self, Accounts};
use ledger::store::ResolvedPost;
use ledger::{JobRef, PayoutId, PostError, PostingRules, SourceName, Store};

use super::ProviderApis;

/// Lines posted per transaction.
pub const CHUNK_LINES: usize = 500;

/// Downloads, checks and posts the report `trigger` names, for `job`'s attempt.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn post_report(
    apis: &ProviderApis,
    rules: &PostingRules,
    store: &Store,
    source: &SourceName,
    trigger: &AdyenReportTrigger,
    job: &JobRef,
    attempt: u32,
    lock_timeout_ms: u64,
) -> Result<ledger::job::Posted, PostError> {
    let reports = apis
        .adyen_reports(source)
        .ok_or_else(|| ProviderError::NotConfigured(source.to_string()))?;
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
    let accounts = rules.accounts(source);
    let mut report = open(&path)?;
    let (mut written, mut existing) = (0, 0);
    let mut received_at;
    loop {
        let mut entries = Vec::with_capacity(CHUNK_LINES);
        let mut end = false;
        while entries.len() < CHUNK_LINES {
            let Some(line) = report.next_line() else {
                end = true;
                break;
            };
            let line = line.map_err(report_error)?;
            entries.extend(
                line_entries(&line, source, &batch, &payout, &accounts).map_err(report_error)?,
            );
        }
        let resolved = Resolved {
            entries,
            payout: Some(payout.clone()),
            partial: !end,
        };
        let post = ResolvedPost {
            job,
            attempt,
            resolved: &resolved,
        };
        match store.post_resolved(&post, lock_timeout_ms).await? {
            ledger::job::Posted::Movements {
                written: w,
                existing: e,
                received_at: at,
            } => {
                written += w;
                existing += e;
                received_at = at;
            }
            // Posted or closed by another run meanwhile: nothing more to do.
            other => return Ok(other),
        }
        if end {
            break;
        }
    }
    drop(file);
    Ok(ledger::job::Posted::Movements {
        written,
        existing,
        received_at,
    })
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
