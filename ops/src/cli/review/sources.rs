//! `settle sources`: list, pause and resume sources.

use clap::Subcommand;
use ledger::Store;
use ledger::review::Decision;

use super::actor;
use crate::cli::table::{self};

#[derive(Debug, Subcommand)]
pub enum SourceCommand {
    /// Each configured source: running, or paused since when, by whom and why.
    List {
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Pause it: deliveries are still verified, recorded and acknowledged; nothing of it posts
    /// until it is resumed.
    Pause {
        /// The source's configured name.
        name: String,
        /// Why (recorded with the pause).
        #[arg(long)]
        reason: String,
        /// Who (recorded with the pause); default: the OS user.
        #[arg(long)]
        actor: Option<String>,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Resume it: its waiting events are due at once.
    Resume {
        /// The source's configured name.
        name: String,
        /// Why (recorded with the pause).
        #[arg(long)]
        reason: String,
        /// Who (recorded with the pause); default: the OS user.
        #[arg(long)]
        actor: Option<String>,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
}

pub async fn sources(
    store: &Store,
    names: &[String],
    command: SourceCommand,
) -> anyhow::Result<()> {
    let (name, reason, who, json, pause) = match command {
        SourceCommand::List { json } => {
            let in_force = store.source_pauses(true, 10_000).await?;
            let listed: Vec<serde_json::Value> = names
                .iter()
                .map(|name| {
                    serde_json::json!({"name": name,
                        "paused": in_force.iter().find(|p| &p.source == name)})
                })
                .collect();
            if json {
                return table::json(&listed);
            }
            let rows: Vec<Vec<String>> = names
                .iter()
                .map(|name| match in_force.iter().find(|p| &p.source == name) {
                    Some(p) => vec![
                        name.clone(),
                        "paused".into(),
                        p.paused_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                        p.paused_by.clone(),
                        p.pause_reason.clone(),
                    ],
                    None => vec![
                        name.clone(),
                        "running".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                    ],
                })
                .collect();
            table::print(&["SOURCE", "STATE", "SINCE", "BY", "WHY"], &rows);
            return Ok(());
        }
        SourceCommand::Pause {
            name,
            reason,
            actor,
            json,
        } => (name, reason, actor, json, true),
        SourceCommand::Resume {
            name,
            reason,
            actor,
            json,
        } => (name, reason, actor, json, false),
    };
    if !names.contains(&name) {
        anyhow::bail!(
            "no source {name} is configured (configured: {})",
            names.join(", ")
        );
    }
    let decision = Decision {
        actor: actor(&who),
        reason,
    };
    let change = if pause {
        store.pause_source(&name, &decision).await?
    } else {
        store.resume_source(&name, &decision).await?
    };
    if json {
        return table::json(&change);
    }
    let state = if change.paused { "paused" } else { "running" };
    let already = if change.changed { "" } else { " (already)" };
    if change.jobs_released > 0 {
        println!(
            "source {name}: {state}{already}; {} waiting event(s) due now",
            change.jobs_released
        );
    } else {
        println!("source {name}: {state}{already}");
    }
    Ok(())
}
