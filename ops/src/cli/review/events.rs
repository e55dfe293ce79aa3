//! `settle events`: search, show and erase a payload on request; `settle prune`: erase the
//! payloads the retention policy no longer allows.

use clap::{Args, Subcommand};
use ledger::Store;
use ledger::review::{Decision, PageRequest};

use super::{PageArgs, actor};
use crate::actions::parse_time;
use crate::cli::table::{self, or_dash};

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
