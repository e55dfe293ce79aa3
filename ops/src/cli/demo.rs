//! `settle demo`: a realistic run on a fresh embedded database. It starts the whole system with
//! one source of every registered provider, each sending signed deliveries the way its provider
//! does (`providers::demo::DemoPart`: new events, redeliveries, a reformatted redelivery, a
//! conflicting one, an invalid event, an event whose job keeps failing, money its provider's API
//! or report must be asked for, served by fakes in this process), waits for the workers, and
//! shows what happened. It exits 0 only if the outcome is the one the scenario expects. Its logs
//! go to a file in its directory, so the terminal tells the story only; with `--keep-running`
//! its server stays up afterwards, with a token to open its dashboard.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::future::BoxFuture;
use ledger::finance::{BalanceQuery, JournalFilter, ReconciliationStatus, open_since};
use ledger::review::{DeadLetterFilter, DeadLetterState, PageRequest};
use providers::demo::{Deliver, DemoError, DemoPart, Expected, Tally};
use tokio_util::sync::CancellationToken;

use super::table::{self, or_dash};
use crate::app::{App, Role};
use crate::config::{Config, LogFormat};

/// Posts deliveries to the demo's settle.
struct Sender {
    http: reqwest::Client,
    base: String,
}

impl Deliver for Sender {
    fn deliver<'a>(
        &'a self,
        source: &'a str,
        headers: Vec<(String, String)>,
        body: String,
    ) -> BoxFuture<'a, Result<(u16, String), DemoError>> {
        Box::pin(async move {
            let mut request = self
                .http
                .post(format!("{}/webhooks/{source}", self.base))
                .header("content-type", "application/json")
                .body(body);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let response = request.send().await?;
            Ok((
                response.status().as_u16(),
                response.text().await.unwrap_or_default(),
            ))
        })
    }
}

/// Every registered provider's part, started.
async fn start_parts() -> anyhow::Result<Vec<Box<dyn DemoPart>>> {
    let mut parts = Vec::with_capacity(providers::PROVIDERS.len());
    for provider in providers::PROVIDERS {
        let part = provider
            .demo()
            .await
            .map_err(|error| anyhow!("{}: {error}", provider.name()))?;
        parts.push(part);
    }
    Ok(parts)
}

pub async fn run(dir: Option<PathBuf>, keep_running: bool) -> anyhow::Result<()> {
    let scratch = match &dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "settle-demo-{}",
            ulid::Ulid::generate().to_string().to_lowercase()
        )),
    };
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let database = scratch.join("demo.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.display()));
    }
    let log = scratch.join("settle.log");
    let _ = std::fs::remove_file(&log);
    crate::telemetry::init_to_file(&log, LogFormat::Text)
        .with_context(|| format!("cannot write the log {}", log.display()))?;
    let (token, token_sha256) = super::fresh_token();
    let parts = start_parts().await?;
    let sources: String = parts.iter().map(|part| part.source_toml()).collect();
    let config = Config::from_toml(&format!(
        r#"
listen = "127.0.0.1:0"
ops_listen = "127.0.0.1:0"
database_url = "sqlite://{db}"
[workers]
attempts_max = 3
backoff_base_ms = 200
backoff_max_ms = 1000
poll_interval_ms = 200
{sources}
[[tokens]]
name = "demo"
role = "ops"
token_sha256 = "{token_sha256}"
"#,
        db = database.display(),
    ))?;
    println!(
        "settle demo: a fresh embedded database at {}",
        database.display()
    );
    println!("             settle's log goes to {}", log.display());
    for banner in parts.iter().filter_map(|part| part.banner()) {
        println!("             {banner}");
    }
    let app = App::build(&config, Role::Serve).await?;
    let store = app.store().clone();
    let base = format!("http://{}", app.local_addr()?);
    let dashboard = format!("http://{}/dashboard", app.ops_addr()?);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    let sender = Sender {
        http: reqwest::Client::new(),
        base,
    };
    let expected = parts
        .iter()
        .map(|part| part.expected())
        .fold(Expected::default(), |all, part| all + part);

    let mut tally = Tally::default();
    println!("\nsending deliveries");
    for part in &parts {
        part.send(&sender, &mut tally)
            .await
            .map_err(|error| anyhow!("a delivery failed: {error}"))?;
    }
    wait_for_workers(&store, &expected).await?;
    let outcome = report(&store, &tally, &parts, &expected).await;
    if outcome.is_ok() {
        println!(
            "\nthe database and the log stay in {}; to read them again:\n  \
             DATABASE_URL=sqlite://{} settle journal list",
            scratch.display(),
            database.display()
        );
        match keep_running {
            true => {
                println!(
                    "\nthe demo's server keeps running (Ctrl-C stops it):\n  \
                     dashboard  {dashboard}\n  \
                     log in with the token  {token}"
                );
                super::stop_on_signal(shutdown.clone()).await;
            }
            false => println!("\nto look around in the dashboard: settle demo --keep-running"),
        }
    }
    shutdown.cancel();
    running.await.context("settle stopped abnormally")??;
    outcome
}

async fn wait_for_workers(store: &ledger::Store, expected: &Expected) -> anyhow::Result<()> {
    print!("\nworkers posting");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open = store
            .dead_letters(
                &DeadLetterFilter {
                    state: Some(DeadLetterState::Open),
                    ..DeadLetterFilter::default()
                },
                PageRequest::new(None, Some(50)),
            )
            .await?
            .items
            .len();
        let posted = store
            .journal(&JournalFilter::default(), None, 500)
            .await?
            .items
            .len();
        print!(".");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if open == expected.dead_letters && posted == expected.posted {
            println!(" done");
            return Ok(());
        }
        if Instant::now() > deadline {
            println!();
            bail!(
                "the workers did not settle every event within 60 s ({posted} entries, {open} dead letters)"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Prints a payout beside its items (`what` they are called); answers whether they match.
async fn show_reconciliation(
    store: &ledger::Store,
    payout: &str,
    what: &str,
) -> anyhow::Result<bool> {
    let reconciled = store.reconciliation(payout).await?;
    if let Some(r) = &reconciled {
        println!(
            "  {:?}: payout {} {}, {} {what}, net {}, difference {}",
            r.status,
            r.payout_amount.as_deref().unwrap_or("-"),
            r.currency.as_deref().unwrap_or(""),
            r.items.len(),
            r.items_net,
            r.difference
        );
    }
    Ok(reconciled.map(|r| r.status) == Some(ReconciliationStatus::Matched))
}

async fn report(
    store: &ledger::Store,
    tally: &Tally,
    parts: &[Box<dyn DemoPart>],
    expected: &Expected,
) -> anyhow::Result<()> {
    let journal = store.journal(&JournalFilter::default(), None, 500).await?;
    let dead = store
        .dead_letters(
            &DeadLetterFilter {
                state: Some(DeadLetterState::Open),
                ..DeadLetterFilter::default()
            },
            PageRequest::new(None, Some(50)),
        )
        .await?;
    let conflicts = store
        .conflicts(Some("open"), PageRequest::new(None, Some(50)))
        .await?;
    println!("\nwhat happened");
    println!(
        "  recorded {}   duplicates {}   conflicts {} ({} kept for ops)   ignored {}   journal entries {}   dead letters {}",
        tally.recorded,
        tally.duplicates,
        tally.conflicts,
        conflicts.items.len(),
        tally.ignored,
        journal.items.len(),
        dead.items.len()
    );

    println!("\njournal, in entry order");
    let mut entries: Vec<_> = journal.items.iter().collect();
    entries.sort_by_key(|entry| entry.id);
    let mut rows = Vec::new();
    for entry in entries {
        for line in &entry.lines {
            let first = line.line_no == 1;
            rows.push(vec![
                if first {
                    entry.id.to_string()
                } else {
                    String::new()
                },
                if first {
                    entry.description.clone()
                } else {
                    String::new()
                },
                line.account.clone(),
                line.amount.clone(),
                line.currency.clone(),
            ]);
        }
    }
    table::print(&["ENTRY", "DESCRIPTION", "ACCOUNT", "AMOUNT", "CUR"], &rows);

    println!("\nbalances");
    let balances = store.balances(BalanceQuery::default()).await?;
    let rows: Vec<Vec<String>> = balances
        .iter()
        .map(|b| vec![b.account.clone(), b.currency.clone(), b.balance.clone()])
        .collect();
    table::print(&["ACCOUNT", "CUR", "BALANCE"], &rows);

    let mut reconciled = true;
    for payout in parts.iter().flat_map(|part| part.payouts()) {
        println!("\nreconciliation of {}", payout.title);
        reconciled &= show_reconciliation(store, &payout.payout_id, payout.items).await?;
    }
    let receivable_accounts: Vec<String> = parts
        .iter()
        .flat_map(|part| part.receivable_accounts())
        .collect();
    let receivables = match receivable_accounts.is_empty() {
        true => Vec::new(),
        false => {
            store
                .open_receivables(&receivable_accounts, open_since(0), 50)
                .await?
        }
    };
    if !receivable_accounts.is_empty() {
        println!(
            "  receivables still open: {}",
            match receivables.len() {
                0 => "none (each sale settled by its report line)".to_owned(),
                n => n.to_string(),
            }
        );
    }

    println!("\ndead letters (a person decides)");
    let rows: Vec<Vec<String>> = dead
        .items
        .iter()
        .map(|d| {
            vec![
                d.id.to_string(),
                d.source.clone(),
                d.external_id.clone(),
                d.error_class.to_string(),
                d.error_code.clone(),
                or_dash(Some(&d.last_error)),
            ]
        })
        .collect();
    table::print(
        &["ID", "SOURCE", "EXTERNAL ID", "CLASS", "CODE", "LAST ERROR"],
        &rows,
    );
    println!(
        "\n  drain them with:  settle dead-letters show ID | requeue ID --reason R | discard ID --reason R"
    );

    let checks = store.verify().await?;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.violations > 0)
        .map(|c| c.name)
        .collect();
    println!(
        "\ninvariants: {}",
        if failed.is_empty() {
            "all hold".to_owned()
        } else {
            format!("VIOLATED: {}", failed.join(", "))
        }
    );

    let got = Expected {
        recorded: tally.recorded,
        duplicates: tally.duplicates,
        conflicts: tally.conflicts,
        ignored: tally.ignored,
        posted: journal.items.len(),
        dead_letters: dead.items.len(),
    };
    if got != *expected
        || !tally.other.is_empty()
        || !failed.is_empty()
        || !reconciled
        || !receivables.is_empty()
    {
        bail!(
            "the demo did not end as expected: got {got:?}, expected {expected:?}; unexpected answers: {:?}",
            tally.other
        );
    }
    println!("\nthe demo ended as expected");
    Ok(())
}
