//! `settle dead-letters`: list, show, requeue and discard what needs a person.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use ledger::Store;
use ledger::job::ErrorClass;
use ledger::review::{DeadLetterFilter, DeadLetterState, Decision, PageRequest};
use ledger::state::StateMachine;

use super::{ActArgs, PageArgs, actor, print_report};
use crate::actions::{self, Action, parse_time};
use crate::cli::table::{self, or_dash};

#[derive(Debug, Subcommand)]
pub enum DeadLetterCommand {
    /// Dead letters matching the filters (default: open), newest first.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// open, requeued, discarded or all.
        #[arg(long, default_value = "open")]
        state: String,
        #[command(flatten)]
        page: PageArgs,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// One dead letter: its event, error, every attempt, and the audit trail.
    Show {
        /// The dead letter's id (as listed).
        id: i64,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Give each event a fresh job with fresh attempts (by IDs, or every open one matching the filters).
    Requeue {
        /// Dead letter ids; none with filters: every open one they match.
        ids: Vec<i64>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
    },
    /// Close each for good: its event never posts (a reason is required).
    Discard {
        /// Dead letter ids; none with filters: every open one they match.
        ids: Vec<i64>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
    },
}

#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Only this source's events (its configured name).
    #[arg(long)]
    source: Option<String>,
    /// Only events of this kind (e.g. settlement.payout_failed, charge.succeeded).
    #[arg(long)]
    kind: Option<String>,
    /// permanent or exhausted.
    #[arg(long)]
    error_class: Option<String>,
    /// e.g. invalid_facts, source_replay_conflict, dependency_not_ready, worker_died.
    #[arg(long)]
    error_code: Option<String>,
    /// Abandoned before this date or time.
    #[arg(long, value_name = "DATE")]
    before: Option<String>,
    /// Abandoned after this date or time.
    #[arg(long, value_name = "DATE")]
    after: Option<String>,
}

impl FilterArgs {
    fn is_empty(&self) -> bool {
        self.source.is_none()
            && self.kind.is_none()
            && self.error_class.is_none()
            && self.error_code.is_none()
            && self.before.is_none()
            && self.after.is_none()
    }

    fn filter(&self, state: Option<DeadLetterState>) -> anyhow::Result<DeadLetterFilter> {
        let error_class = self
            .error_class
            .as_deref()
            .map(|text| {
                ErrorClass::parse(text).context("--error-class must be permanent or exhausted")
            })
            .transpose()?;
        let time = |text: &Option<String>| {
            text.as_deref()
                .map(parse_time)
                .transpose()
                .map_err(anyhow::Error::msg)
        };
        Ok(DeadLetterFilter {
            state,
            source: self.source.clone(),
            kind: self.kind.clone(),
            error_class,
            error_code: self.error_code.clone(),
            abandoned_before: time(&self.before)?,
            abandoned_after: time(&self.after)?,
        })
    }
}

pub async fn dead_letters(store: &Store, command: DeadLetterCommand) -> anyhow::Result<()> {
    match command {
        DeadLetterCommand::List {
            filter,
            state,
            page,
            json,
        } => {
            let state = match state.as_str() {
                "all" => None,
                text => Some(
                    DeadLetterState::parse(text)
                        .context("--state must be open, requeued, discarded or all")?,
                ),
            };
            let page = store
                .dead_letters(
                    &filter.filter(state)?,
                    PageRequest::new(page.cursor, Some(page.limit)),
                )
                .await?;
            if json {
                return table::json(&page);
            }
            let rows: Vec<Vec<String>> = page
                .items
                .iter()
                .map(|d| {
                    vec![
                        d.id.to_string(),
                        d.state.to_string(),
                        d.source.clone(),
                        d.external_id.clone(),
                        or_dash(d.kind.as_ref()),
                        d.error_class.to_string(),
                        d.error_code.clone(),
                        d.attempts.to_string(),
                        d.abandoned_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                        d.last_error.clone(),
                    ]
                })
                .collect();
            table::print(
                &[
                    "ID",
                    "STATE",
                    "SOURCE",
                    "EXTERNAL ID",
                    "KIND",
                    "CLASS",
                    "CODE",
                    "ATTEMPTS",
                    "ABANDONED",
                    "LAST ERROR",
                ],
                &rows,
            );
            if let Some(cursor) = page.next_cursor {
                println!("\nmore: --cursor {cursor}");
            }
            Ok(())
        }
        DeadLetterCommand::Show { id, json } => show(store, id, json).await,
        DeadLetterCommand::Requeue { ids, filter, act } => {
            decide(store, Action::Requeue, ids, &filter, &act).await
        }
        DeadLetterCommand::Discard { ids, filter, act } => {
            decide(store, Action::Discard, ids, &filter, &act).await
        }
    }
}

async fn show(store: &Store, id: i64, json: bool) -> anyhow::Result<()> {
    let detail = store
        .dead_letter(id)
        .await?
        .with_context(|| format!("no dead letter {id}"))?;
    if json {
        return table::json(&detail);
    }
    let (d, e) = (&detail.dead_letter, &detail.event);
    println!(
        "dead letter {}  {}  ({} / {})",
        d.id, d.state, d.error_class, d.error_code
    );
    println!(
        "  abandoned  {}  after {} attempt(s)",
        d.abandoned_at, d.attempts
    );
    println!("  error      {}", d.last_error);
    if let Some(by) = &d.decided_by {
        println!(
            "  decided    {} by {by}: {}",
            or_dash(d.decided_at),
            or_dash(d.decision_reason.as_ref())
        );
    }
    println!(
        "\nevent {}  {} / {}  {}",
        e.id, e.source, e.external_id, e.status
    );
    println!(
        "  kind {}  movement {}  received {}",
        or_dash(e.kind.as_ref()),
        or_dash(e.movement_id.as_ref()),
        e.received_at
    );
    match (&e.facts, &e.validation_error) {
        (Some(facts), _) => println!("  facts      {facts}"),
        (None, Some(error)) => println!("  invalid    {error}"),
        _ => {}
    }
    println!("\nattempts");
    let rows: Vec<Vec<String>> = detail
        .attempts
        .iter()
        .map(|a| {
            vec![
                a.job_id.clone(),
                a.attempt.to_string(),
                a.started_at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                or_dash(a.outcome.as_ref()),
                or_dash(a.error.as_ref()),
            ]
        })
        .collect();
    table::print(&["JOB", "#", "STARTED", "OUTCOME", "ERROR"], &rows);
    println!("\naudit");
    let rows: Vec<Vec<String>> = detail
        .audit
        .iter()
        .map(|a| {
            vec![
                a.at.to_string(),
                a.actor.clone(),
                a.action.clone(),
                format!("{} -> {}", a.before_state, a.after_state),
                a.reason.clone(),
            ]
        })
        .collect();
    table::print(&["AT", "ACTOR", "ACTION", "CHANGE", "REASON"], &rows);
    println!(
        "\nnext: settle dead-letters requeue {id} --reason ...   or   settle dead-letters discard {id} --reason ..."
    );
    Ok(())
}

async fn decide(
    store: &Store,
    action: Action,
    ids: Vec<i64>,
    filter: &FilterArgs,
    act: &ActArgs,
) -> anyhow::Result<()> {
    let reason = act.reason.clone().unwrap_or_default();
    if action == Action::Discard && reason.trim().is_empty() {
        bail!("discard needs --reason");
    }
    let ids = match (ids.is_empty(), filter.is_empty()) {
        (false, true) => ids,
        (true, false) => {
            actions::matching(
                store,
                &filter.filter(Some(DeadLetterState::Open))?,
                act.limit,
            )
            .await?
        }
        (true, true) => bail!(
            "give dead letter IDs, or filters (--source, --kind, --error-class, --error-code, --before, --after)"
        ),
        (false, false) => bail!("give either IDs or filters, not both"),
    };
    let decision = Decision {
        actor: actor(&act.actor),
        reason,
    };
    let report = actions::act(store, action, &ids, &decision, act.dry_run).await;
    print_report(&report, act.json)?;
    let refused = report.items.len()
        - report.count("requeued")
        - report.count("discarded")
        - report.count("unchanged")
        - report.count("would_requeue")
        - report.count("would_discard");
    if refused > 0 {
        bail!("{refused} item(s) were not acted on (see above)");
    }
    Ok(())
}
