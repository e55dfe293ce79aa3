//! The review commands, what ops staff drain from a terminal: `settle dead-letters`,
//! `settle conflicts`, `settle events`, `settle prune`, `settle sources`; and what they
//! share (paging, acting, the actor, an action's report).

mod conflicts;
mod dead_letters;
mod events;
mod sources;

use clap::Args;

use super::table::{self, or_dash};
use crate::actions::Report;

pub use conflicts::{ConflictCommand, conflicts};
pub use dead_letters::{DeadLetterCommand, dead_letters};
pub use events::{EventCommand, events, prune};
pub use sources::{SourceCommand, sources};

#[derive(Debug, Args)]
pub struct PageArgs {
    /// Continue after this cursor (printed at the end of the previous page).
    #[arg(long)]
    cursor: Option<i64>,
    /// At most this many on a page.
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

#[derive(Debug, Args)]
pub struct ActArgs {
    /// Why (recorded in the audit log).
    #[arg(long)]
    reason: Option<String>,
    /// Who (recorded in the audit log); default: the OS user.
    #[arg(long)]
    actor: Option<String>,
    /// Print exactly what would change, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// With filters: at most this many items.
    #[arg(long, default_value_t = 1000)]
    limit: u32,
    /// Machine-readable output (JSON) on stdout.
    #[arg(long)]
    json: bool,
}

pub(super) fn actor(given: &Option<String>) -> String {
    given
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn print_report(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        return table::json(report);
    }
    let rows: Vec<Vec<String>> = report
        .items
        .iter()
        .map(|i| {
            vec![
                i.dead_letter_id.to_string(),
                or_dash(i.event_id),
                i.outcome.to_string(),
                or_dash(i.job_id.as_ref()),
                or_dash(i.detail.as_ref()),
            ]
        })
        .collect();
    table::print(
        &["DEAD LETTER", "EVENT", "OUTCOME", "NEW JOB", "DETAIL"],
        &rows,
    );
    println!(
        "\n{} item(s){}",
        report.items.len(),
        if report.dry_run {
            ", dry run: nothing changed"
        } else {
            ""
        }
    );
    Ok(())
}
