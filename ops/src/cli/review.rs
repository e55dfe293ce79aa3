//! `settle dead-letters` and `settle conflicts`: what ops staff drain, from a terminal.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use ledger::Store;
use ledger::job::ErrorClass;
use ledger::review::{DeadLetterFilter, DeadLetterState, Decision, PageRequest};
use ledger::state::StateMachine;

use super::table::{self, or_dash};
use crate::actions::{self, Action, Report, parse_time};

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

pub(super) fn actor(given: &Option<String>) -> String {
    given
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".into())
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

#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Events matching every filter given, newest first.
    Search {
        #[command(flatten)]
        filter: Box<SearchArgs>,
        #[command(flatten)]
        page: PageArgs,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Everything about one event: payload (or its erasure), attempts, dead letters,
    /// conflicting deliveries, entries, audit trail.
    Show {
        /// The event's id (as listed).
        id: i64,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Erase one event's received payload on request (key, fingerprint, facts, entries and
    /// audit stay); refused while it is in flight, in an open dead letter or in an open conflict.
    ErasePayload {
        /// The event's id (as listed).
        id: i64,
        /// Why (recorded with the erasure).
        #[arg(long)]
        reason: String,
        /// Who (recorded with the erasure); default: the OS user.
        #[arg(long)]
        actor: Option<String>,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The source's configured name.
    #[arg(long)]
    source: Option<String>,
    /// The provider's event id, exactly.
    #[arg(long)]
    external_id: Option<String>,
    /// Provider event ids starting with this.
    #[arg(long)]
    external_id_prefix: Option<String>,
    /// The kind as delivered (charge_settled, charge.succeeded, CAPTURE...).
    #[arg(long)]
    kind: Option<String>,
    /// recorded, posted, abandoned or discarded.
    #[arg(long)]
    status: Option<String>,
    /// The movement (charge, refund, payout...) the event is about.
    #[arg(long)]
    movement_id: Option<String>,
    /// A reference (order number) of an entry the event wrote or settled on.
    #[arg(long)]
    reference: Option<String>,
    /// A payout an entry of the event belongs to.
    #[arg(long)]
    payout_id: Option<String>,
    /// Received at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    received_from: Option<String>,
    /// Received before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    received_to: Option<String>,
    /// Of a dead letter it has had: permanent or exhausted.
    #[arg(long)]
    error_class: Option<String>,
    /// Of a dead letter it has had (invalid_facts, provider_auth...).
    #[arg(long)]
    error_code: Option<String>,
}

impl SearchArgs {
    fn filter(self) -> anyhow::Result<ledger::review::EventFilter> {
        let time = |text: Option<String>, flag: &str| {
            text.map(|t| parse_time(&t).map_err(|e| anyhow::anyhow!("--{flag}: {e}")))
                .transpose()
        };
        let filter = ledger::review::EventFilter {
            source: self.source,
            external_id: self.external_id,
            external_id_prefix: self.external_id_prefix,
            kind: self.kind,
            status: self.status,
            movement_id: self.movement_id,
            reference: self.reference,
            payout_id: self.payout_id,
            received_from: time(self.received_from, "received-from")?,
            received_to: time(self.received_to, "received-to")?,
            error_class: self.error_class,
            error_code: self.error_code,
        };
        filter.check().map_err(anyhow::Error::msg)?;
        Ok(filter)
    }
}

pub async fn events(store: &Store, command: EventCommand) -> anyhow::Result<()> {
    let (filter, page, json) = match command {
        EventCommand::Search { filter, page, json } => (filter, page, json),
        EventCommand::Show { id, json } => return show_event(store, id, json).await,
        EventCommand::ErasePayload {
            id,
            reason,
            actor: who,
            json,
        } => {
            let decided = store
                .erase_payload(
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
                "event {id}: payload erased{}",
                if decided.changed { "" } else { " (already)" }
            );
            return Ok(());
        }
    };
    let page = store
        .search_events(
            &filter.filter()?,
            PageRequest::new(page.cursor, Some(page.limit)),
        )
        .await?;
    if json {
        return table::json(&page);
    }
    let rows: Vec<Vec<String>> = page
        .items
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                e.received_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                e.source.clone(),
                e.external_id.clone(),
                or_dash(e.kind.as_ref()),
                e.status.clone(),
                or_dash(e.movement_id.as_ref()),
                or_dash(e.error_code.as_ref()),
            ]
        })
        .collect();
    table::print(
        &[
            "ID",
            "RECEIVED",
            "SOURCE",
            "EXTERNAL ID",
            "KIND",
            "STATUS",
            "MOVEMENT",
            "DEAD LETTER",
        ],
        &rows,
    );
    if let Some(cursor) = page.next_cursor {
        println!("\nmore: --cursor {cursor}");
    }
    Ok(())
}

async fn show_event(store: &Store, id: i64, json: bool) -> anyhow::Result<()> {
    let Some(detail) = store.event_detail(ledger::EventId::new(id)).await? else {
        anyhow::bail!("no event {id}");
    };
    if json {
        return table::json(&detail);
    }
    let e = &detail.event;
    println!(
        "event {id}: {} / {} · {}",
        e.source, e.external_id, e.status
    );
    println!(
        "  kind {} · movement {} · received {}",
        or_dash(e.kind.as_ref()),
        or_dash(e.movement_id.as_ref()),
        e.received_at.format("%Y-%m-%d %H:%M:%S")
    );
    match (&e.payload, &detail.erasure) {
        (Some(payload), _) => println!("  payload: {payload}"),
        (None, Some(erasure)) => println!(
            "  payload erased {} by {} ({}): {}",
            erasure.at.format("%Y-%m-%d %H:%M:%S"),
            erasure.actor,
            erasure.scope,
            erasure.reason
        ),
        (None, None) => println!("  payload erased"),
    }
    for entry in &detail.entries {
        println!("  entry {} {} ({})", entry.id, entry.source_key, entry.kind);
    }
    for d in &detail.dead_letters {
        println!("  dead letter {} {} {}", d.id, d.state, d.error_code);
    }
    for c in &detail.conflicts {
        println!(
            "  conflict {} {} ({} deliveries)",
            c.id, c.state, c.deliveries
        );
    }
    for a in &detail.audit {
        println!(
            "  {} {} {}: {}",
            a.at.format("%Y-%m-%d %H:%M:%S"),
            a.actor,
            a.action,
            a.reason
        );
    }
    Ok(())
}

/// `settle prune`: expires the payloads the retention policy no longer allows (or, with
/// `dry_run`, counts them).
pub async fn prune(
    store: &Store,
    policy: &ledger::store::RetentionPolicy,
    who: &Option<String>,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<()> {
    let lines = store
        .prune_payloads(policy, chrono::Utc::now(), &actor(who), dry_run)
        .await?;
    if json {
        return table::json(&serde_json::json!({"dry_run": dry_run, "rules": lines}));
    }
    if lines.is_empty() {
        println!("retention keeps payloads for ever: nothing expires");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|l| {
            vec![
                l.source.clone().unwrap_or_else(|| "(every other)".into()),
                l.days.to_string(),
                l.received_before.format("%Y-%m-%d %H:%M:%S").to_string(),
                l.events.to_string(),
                l.conflicts.to_string(),
                l.erasure_id.map_or_else(|| "-".into(), |id| id.to_string()),
            ]
        })
        .collect();
    table::print(
        &[
            "SOURCE",
            "DAYS",
            "RECEIVED BEFORE",
            if dry_run { "WOULD EXPIRE" } else { "EXPIRED" },
            "CONFLICTS",
            "ERASURE",
        ],
        &rows,
    );
    Ok(())
}

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
