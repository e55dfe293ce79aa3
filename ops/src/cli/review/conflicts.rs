//! `settle conflicts`: deliveries whose facts disagree with their event's, and their resolution.

use anyhow::{Context, bail};
use clap::Subcommand;
use ledger::Store;
use ledger::review::{Decision, PageRequest};

use super::{PageArgs, actor};
use crate::cli::table::{self};

#[derive(Debug, Subcommand)]
pub enum ConflictCommand {
    /// Conflicting deliveries (default: open), newest first.
    List {
        /// open, resolved or all.
        #[arg(long, default_value = "open")]
        state: String,
        #[command(flatten)]
        page: PageArgs,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// One conflict beside the original event.
    Show {
        /// The conflict's id (as listed).
        id: i64,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Acknowledge it (the original stays authoritative).
    Resolve {
        /// The conflict's id (as listed).
        id: i64,
        /// Why (recorded in the audit log).
        #[arg(long)]
        reason: String,
        /// Who (recorded in the audit log); default: the OS user.
        #[arg(long)]
        actor: Option<String>,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
}

pub async fn conflicts(store: &Store, command: ConflictCommand) -> anyhow::Result<()> {
    match command {
        ConflictCommand::List { state, page, json } => {
            let state = match state.as_str() {
                "all" => None,
                "open" | "resolved" => Some(state.as_str()),
                _ => bail!("--state must be open, resolved or all"),
            };
            let page = store
                .conflicts(state, PageRequest::new(page.cursor, Some(page.limit)))
                .await?;
            if json {
                return table::json(&page);
            }
            let rows: Vec<Vec<String>> = page
                .items
                .iter()
                .map(|c| {
                    vec![
                        c.id.to_string(),
                        c.state.to_string(),
                        c.event_id.to_string(),
                        c.source.clone(),
                        c.external_id.clone(),
                        c.deliveries.to_string(),
                        c.last_seen_at.to_string(),
                    ]
                })
                .collect();
            table::print(
                &[
                    "ID",
                    "STATE",
                    "EVENT",
                    "SOURCE",
                    "EXTERNAL ID",
                    "DELIVERIES",
                    "LAST SEEN",
                ],
                &rows,
            );
            if let Some(cursor) = page.next_cursor {
                println!("\nmore: --cursor {cursor}");
            }
            Ok(())
        }
        ConflictCommand::Show { id, json } => {
            let detail = store
                .conflict(id)
                .await?
                .with_context(|| format!("no conflict {id}"))?;
            if json {
                return table::json(&detail);
            }
            let (c, o) = (&detail.conflict, &detail.original);
            println!(
                "conflict {} ({}) on event {} {} / {}, {} delivery(ies)",
                c.id, c.state, o.id, o.source, o.external_id, c.deliveries
            );
            println!(
                "  original (authoritative): {}",
                o.facts
                    .as_ref()
                    .map(|f| f.to_string())
                    .or(o.validation_error.clone())
                    .unwrap_or_default()
            );
            println!(
                "  conflicting delivery:     {}",
                c.facts
                    .as_ref()
                    .map(|f| f.to_string())
                    .or(c.validation_error.clone())
                    .unwrap_or_default()
            );
            Ok(())
        }
        ConflictCommand::Resolve {
            id,
            reason,
            actor: who,
            json,
        } => {
            let decided = store
                .resolve_conflict(
                    id,
                    &Decision {
                        actor: actor(&who),
                        reason,
                    },
                )
                .await?;
            if json {
                return table::json(&decided);
            }
            println!(
                "conflict {id}: {}{}",
                decided.state,
                if decided.changed { "" } else { " (already)" }
            );
            Ok(())
        }
    }
}
