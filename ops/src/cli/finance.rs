//! `settle journal`, `settle balances`, `settle reconcile`, `settle export`: what finance reads.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use chrono::NaiveDate;
use clap::{Args, Subcommand};
use futures::StreamExt;
use ledger::finance::{BalanceQuery, JournalCursor, JournalFilter};
use ledger::{PostingRules, Store};

use super::table::{self, or_dash};
use crate::actions::parse_time;
use crate::export::{self, Format};

#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// Entries with their lines, in effective-date order.
    List {
        #[command(flatten)]
        filter: JournalArgs,
        /// Continue after this cursor (printed at the end of the previous page).
        #[arg(long)]
        cursor: Option<String>,
        /// At most this many entries on a page.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Reverse an entry (it was void): an entry of the opposite lines; the original stays.
    Reverse {
        /// The entry's id (as listed).
        id: i64,
        #[command(flatten)]
        correction: CorrectionArgs,
    },
    /// Reverse an entry and post the lines it should have had; the original stays.
    Correct {
        /// The entry's id (as listed).
        id: i64,
        /// A line of the correction, "ACCOUNT CURRENCY AMOUNT" (debit positive), twice or more.
        #[arg(long = "line", value_name = "ACCOUNT CURRENCY AMOUNT", required = true)]
        lines: Vec<String>,
        #[command(flatten)]
        correction: CorrectionArgs,
    },
}

#[derive(Debug, Args)]
pub struct CorrectionArgs {
    /// Why (recorded with the correction and in the entries' descriptions).
    #[arg(long)]
    reason: String,
    /// When it takes effect (YYYY-MM-DD); default today (UTC).
    #[arg(long)]
    effective_date: Option<NaiveDate>,
    /// Who (recorded with the correction); default: the OS user.
    #[arg(long)]
    actor: Option<String>,
    /// Machine-readable output (JSON) on stdout.
    #[arg(long)]
    json: bool,
}

/// A typed line, "ACCOUNT CURRENCY AMOUNT".
fn parse_line(text: &str) -> anyhow::Result<ledger::posting::Line> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [account, currency, amount] = parts.as_slice() else {
        anyhow::bail!("--line {text:?}: expected \"ACCOUNT CURRENCY AMOUNT\"");
    };
    Ok(ledger::posting::Line {
        account: (*account).to_owned(),
        currency: ledger::Currency::parse(currency)
            .map_err(|error| anyhow::anyhow!("--line {text:?}: {error}"))?,
        amount: amount
            .parse()
            .map_err(|_| anyhow::anyhow!("--line {text:?}: {amount:?} is not a decimal amount"))?,
    })
}

async fn correct(
    store: &Store,
    id: i64,
    lines: Option<Vec<ledger::posting::Line>>,
    args: CorrectionArgs,
) -> anyhow::Result<()> {
    let request = ledger::store::CorrectionRequest {
        effective_date: args
            .effective_date
            .unwrap_or_else(|| chrono::Utc::now().date_naive()),
        lines,
    };
    let decision = ledger::review::Decision {
        actor: super::review::actor(&args.actor),
        reason: args.reason,
    };
    let done = store.correct_entry(id, &request, &decision).await?;
    if args.json {
        return table::json(&done);
    }
    let already = if done.changed { "" } else { " (already)" };
    match done.correction_entry_id {
        Some(correction) => println!(
            "entry {id}: reversed by entry {}, corrected by entry {correction}{already}",
            done.reversal_entry_id
        ),
        None => println!(
            "entry {id}: reversed by entry {}{already}",
            done.reversal_entry_id
        ),
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct JournalArgs {
    /// Effective date on or after (YYYY-MM-DD).
    #[arg(long)]
    from: Option<NaiveDate>,
    /// Effective date on or before (YYYY-MM-DD).
    #[arg(long)]
    to: Option<NaiveDate>,
    /// Only entries with a line on this account (e.g. sales, std:balance).
    #[arg(long)]
    account: Option<String>,
    /// Only entries in this currency (ISO 4217, e.g. USD).
    #[arg(long)]
    currency: Option<String>,
    /// Only entries of this source (its configured name).
    #[arg(long)]
    source: Option<String>,
    /// Only entries of this kind (e.g. charge, refund, payout).
    #[arg(long)]
    kind: Option<String>,
    /// Only entries with this reference (an order number, say).
    #[arg(long)]
    reference: Option<String>,
    /// Only entries tied to this payout.
    #[arg(long)]
    payout_id: Option<String>,
    /// Latest effective date first.
    #[arg(long)]
    newest_first: bool,
}

impl JournalArgs {
    fn filter(&self) -> JournalFilter {
        JournalFilter {
            from: self.from,
            to: self.to,
            account: self.account.clone(),
            currency: self.currency.clone(),
            source: self.source.clone(),
            kind: self.kind.clone(),
            reference: self.reference.clone(),
            payout_id: self.payout_id.clone(),
            newest_first: self.newest_first,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ReconcileCommand {
    /// One payout beside the items it paid out.
    Payout {
        /// The payout's id at its provider (e.g. po_...).
        id: String,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Every payout with its status (matched, unmatched, missing_payout, missing_items, reversed).
    Payouts {
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// A source's balance at its provider against the books' balance account: equal to the
    /// minor unit when the account is quiet, else the difference explained by what the provider
    /// listed after the feed's cut. Exits 1 when they differ.
    Balance {
        /// The source's configured name.
        source: String,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// A source's movements as its provider lists them over [FROM, TO] (UTC days) against the
    /// books: count and net per currency and category, and the ids the books miss; for a
    /// provider that numbers its documents (settlement batches), every series' numbers booked,
    /// being fetched, in the dead letter and missing. Exits 1 when any is missing.
    Coverage {
        /// The source's configured name.
        source: String,
        /// The first day (UTC); needed for a provider that lists its movements.
        #[arg(long)]
        from: Option<NaiveDate>,
        /// The last day (UTC), included.
        #[arg(long)]
        to: Option<NaiveDate>,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Receivables never cleared: sales captured (booked from their capture notification) that no
    /// settlement line has settled after DAYS days, or settled for another amount. Exits 1 when
    /// there are any.
    Receivables {
        /// Only those open for at least this many days.
        #[arg(long, default_value_t = ledger::finance::RECEIVABLE_DAYS)]
        days: u32,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
}

pub async fn journal(store: &Store, command: JournalCommand) -> anyhow::Result<()> {
    let (filter, cursor, limit, json) = match command {
        JournalCommand::List {
            filter,
            cursor,
            limit,
            json,
        } => (filter, cursor, limit, json),
        JournalCommand::Reverse { id, correction } => {
            return correct(store, id, None, correction).await;
        }
        JournalCommand::Correct {
            id,
            lines,
            correction,
        } => {
            let lines = lines
                .iter()
                .map(|l| parse_line(l))
                .collect::<anyhow::Result<Vec<_>>>()?;
            return correct(store, id, Some(lines), correction).await;
        }
    };
    let after = cursor
        .as_deref()
        .map(|c| JournalCursor::parse(c).context("invalid --cursor"))
        .transpose()?;
    let page = store
        .journal(
            &filter.filter(),
            after,
            limit.clamp(1, ledger::review::PAGE_LIMIT_MAX),
        )
        .await?;
    if json {
        return table::json(&page);
    }
    let mut rows = Vec::new();
    for entry in &page.items {
        for line in &entry.lines {
            let first = line.line_no == 1;
            let (debit, credit) = match line.amount.strip_prefix('-') {
                Some(credit) => (String::new(), credit.to_owned()),
                None => (line.amount.clone(), String::new()),
            };
            rows.push(vec![
                if first {
                    entry.id.to_string()
                } else {
                    String::new()
                },
                if first {
                    entry.effective_date.to_string()
                } else {
                    String::new()
                },
                if first {
                    entry.description.clone()
                } else {
                    String::new()
                },
                line.account.clone(),
                debit,
                credit,
                line.currency.clone(),
                if first {
                    or_dash(entry.reverses_entry_id.or(entry.reversed_by_entry_id))
                } else {
                    String::new()
                },
            ]);
        }
    }
    table::print(
        &[
            "ENTRY",
            "DATE",
            "DESCRIPTION",
            "ACCOUNT",
            "DEBIT",
            "CREDIT",
            "CUR",
            "REVERSAL",
        ],
        &rows,
    );
    if let Some(cursor) = page.next_cursor {
        println!("\nmore: --cursor {cursor}");
    }
    Ok(())
}

pub async fn balances(
    store: &Store,
    as_of: Option<NaiveDate>,
    recorded_at: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let recorded_at = recorded_at
        .as_deref()
        .map(parse_time)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let rows = store.balances(BalanceQuery { as_of, recorded_at }).await?;
    if json {
        return table::json(&rows);
    }
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| vec![r.account.clone(), r.currency.clone(), r.balance.clone()])
        .collect();
    table::print(&["ACCOUNT", "CUR", "BALANCE"], &rows);
    Ok(())
}

pub async fn reconcile(
    store: &Store,
    rules: &PostingRules,
    command: ReconcileCommand,
) -> anyhow::Result<()> {
    match command {
        ReconcileCommand::Balance { .. } | ReconcileCommand::Coverage { .. } => {
            bail!(
                "a source's balance and coverage are reconciled with its provider's API (cli::feeds)"
            )
        }
        ReconcileCommand::Receivables { days, limit, json } => {
            let open = store
                .open_receivables(
                    &rules.receivables_accounts(),
                    ledger::finance::open_since(days),
                    limit,
                )
                .await?;
            if json {
                table::json(&open)?;
            } else {
                let rows: Vec<Vec<String>> = open
                    .iter()
                    .map(|r| {
                        vec![
                            r.since.to_string(),
                            r.source.clone(),
                            r.capture.clone(),
                            r.outstanding.clone(),
                            r.currency.clone(),
                            or_dash(r.reference.as_ref()),
                        ]
                    })
                    .collect();
                table::print(
                    &[
                        "SINCE",
                        "SOURCE",
                        "CAPTURE",
                        "OUTSTANDING",
                        "CUR",
                        "REFERENCE",
                    ],
                    &rows,
                );
            }
            if !open.is_empty() {
                bail!(
                    "{} receivable(s) open for {days} day(s) or more",
                    open.len()
                );
            }
            Ok(())
        }
        ReconcileCommand::Payout { id, json } => {
            let reconciliation = store
                .reconciliation(&id)
                .await?
                .with_context(|| format!("settle knows no payout {id}"))?;
            // Unmatched, or one side missing, exits non-zero once printed: a script can tell.
            let reconciled = matches!(
                reconciliation.status,
                ledger::finance::ReconciliationStatus::Matched
                    | ledger::finance::ReconciliationStatus::Reversed
            );
            let verdict = || match reconciled {
                true => Ok(()),
                false => Err(anyhow::anyhow!(
                    "payout {id} is {:?}",
                    reconciliation.status
                )),
            };
            if json {
                table::json(&reconciliation)?;
                return verdict();
            }
            let r = &reconciliation;
            println!("payout {}  {:?}\n", r.payout_id, r.status);
            // A batch pays out once per currency it settles in; each is compared on its own.
            let currencies: Vec<Vec<String>> = r
                .by_currency
                .iter()
                .map(|c| {
                    vec![
                        c.currency.clone(),
                        format!("{:?}", c.status),
                        or_dash(c.payout_amount.as_ref()),
                        c.items_net.clone(),
                        c.difference.clone(),
                        or_dash(c.carried_forward.as_ref()),
                    ]
                })
                .collect();
            table::print(
                &[
                    "CUR",
                    "STATUS",
                    "PAYOUT",
                    "ITEMS NET",
                    "DIFFERENCE",
                    "CARRIED FORWARD",
                ],
                &currencies,
            );
            println!();
            let rows: Vec<Vec<String>> = r
                .items
                .iter()
                .map(|i| {
                    vec![
                        i.entry_id.to_string(),
                        i.effective_date.to_string(),
                        i.kind.clone(),
                        i.movement_id.clone(),
                        i.net.clone(),
                    ]
                })
                .collect();
            table::print(&["ENTRY", "DATE", "KIND", "MOVEMENT", "NET"], &rows);
            verdict()
        }
        ReconcileCommand::Payouts { json } => {
            let mut all = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = store.payouts(after.as_deref(), 100).await?;
                let done = page.len() < 100;
                after = page.last().map(|p| p.payout_id.clone());
                all.extend(page);
                if done {
                    break;
                }
            }
            if json {
                return table::json(&all);
            }
            let rows: Vec<Vec<String>> = all
                .iter()
                .map(|p| {
                    vec![
                        p.payout_id.clone(),
                        format!("{:?}", p.status),
                        or_dash(p.payout_amount.as_ref()),
                        p.items_net.clone(),
                        p.difference.clone(),
                        or_dash(p.currency.as_ref()),
                    ]
                })
                .collect();
            table::print(
                &[
                    "PAYOUT",
                    "STATUS",
                    "AMOUNT",
                    "ITEMS NET",
                    "DIFFERENCE",
                    "CUR",
                ],
                &rows,
            );
            Ok(())
        }
    }
}

/// Writes the export to `output` (or stdout), a page at a time; progress on a terminal.
pub async fn export(
    store: &Store,
    rules: PostingRules,
    format: Format,
    from: Option<NaiveDate>,
    to: Option<NaiveDate>,
    output: Option<PathBuf>,
) -> anyhow::Result<()> {
    let filter = JournalFilter {
        from,
        to,
        ..JournalFilter::default()
    };
    let mut out: Box<dyn Write> = match &output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let progress = std::io::stderr().is_terminal() && output.is_some();
    let mut chunks = std::pin::pin!(export::stream(store.clone(), format, filter, rules));
    let mut bytes = 0usize;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        bytes += chunk.len();
        out.write_all(chunk.as_bytes())?;
        if progress {
            eprint!("\rexported {} KiB", bytes / 1024);
        }
    }
    out.flush()?;
    if progress {
        eprintln!("\rexported {} KiB, done", bytes / 1024);
    }
    if bytes == 0 {
        bail!("nothing was written");
    }
    Ok(())
}
