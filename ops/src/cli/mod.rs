//! The `settle` command line: every command and flag with its help, the main ones with an
//! example; shell completions and a man page generated from the same definitions.

mod demo;
mod feeds;
mod finance;
mod process;
mod review;
mod store;
mod table;
mod tokens;

use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::NaiveDate;
use clap::{CommandFactory, Parser, Subcommand};

use crate::app::Role;
use crate::config::Config;
pub use process::Listeners;
use process::{health_url, healthcheck, serve, stop_on_signal};
use store::{connect, with_store};
use tokens::{fresh_token, new_token};

#[derive(Debug, Parser)]
#[command(
    name = "settle",
    version,
    about = "Settlement webhooks in, balanced journal entries out.",
    long_about = "Settlement webhooks in, balanced journal entries out.\n\n\
        settle receives payment providers' settlement webhooks, records each event exactly once \
        by its natural key, and posts it as an immutable, balanced double-entry journal entry.",
    after_help = "Examples:\n  \
        settle demo                          a whole run on a throwaway embedded database\n  \
        settle serve --config settle.toml    everything in one process (SQLite by default)\n  \
        settle config check                  validate the file and environment, print the result\n  \
        settle dead-letters list             what needs a person\n\n\
        Configuration: --config FILE, else $SETTLE_CONFIG, else ./settle.toml when present; \
        then SETTLE_* variables (SETTLE_WORKERS__CONCURRENCY=64) and DATABASE_URL."
)]
pub struct Cli {
    /// Configuration file (default: $SETTLE_CONFIG, else ./settle.toml when present).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

impl Command {
    /// A long-running role (serve, ingress, worker, console), as opposed to a command that prints
    /// and exits.
    pub fn serves(&self) -> bool {
        matches!(
            self,
            Command::Serve { .. }
                | Command::Ingress { .. }
                | Command::Worker { .. }
                | Command::Console { .. }
        )
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ingress, workers, the ops/finance API, the dashboard and metrics in one process.
    #[command(after_help = "Example:\n  \
        DATABASE_URL=sqlite://settle.db settle serve --config settle.toml\n\n\
        On `listen` (public): webhooks at /webhooks/<source>, health at /healthz. On `ops_listen` \
        (internal, loopback by default): the dashboard at /dashboard, the API at /api, metrics at \
        /metrics, readiness at /readyz.")]
    Serve {
        #[command(flatten)]
        listeners: Listeners,
    },
    /// The ingress role only: webhooks and health on `listen`, metrics and readiness on
    /// `ops_listen` (a fleet member on PostgreSQL).
    #[command(after_help = "Example:\n  \
        DATABASE_URL=postgres://settle@db/settle settle ingress --listen 0.0.0.0:8080")]
    Ingress {
        #[command(flatten)]
        listeners: Listeners,
    },
    /// The operator plane only: the API, the dashboard, metrics and readiness on `ops_listen`;
    /// no webhooks, no workers (beside an ingress and worker fleet).
    #[command(after_help = "Example:\n  \
        DATABASE_URL=postgres://settle@db/settle settle console --ops-listen 10.0.0.5:9090")]
    Console {
        #[command(flatten)]
        listeners: Listeners,
    },
    /// The worker role only: posts recorded events; no HTTP (a fleet member on PostgreSQL).
    #[command(after_help = "Example:\n  \
        DATABASE_URL=postgres://settle@db/settle settle worker --concurrency 128")]
    Worker {
        /// Jobs in flight at once in this process (default: workers.concurrency).
        #[arg(long, value_name = "N")]
        concurrency: Option<usize>,
    },
    /// A realistic run on a fresh embedded database: signed deliveries from three providers,
    /// the workers, and a summary. Exits 0 only if the outcome is the expected one.
    #[command(after_help = "Example:\n  \
        settle demo --keep-running    then open the dashboard at the printed URL")]
    Demo {
        /// Keep the database and the log in this directory (default: a new one under the
        /// system's temporary directory).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Afterwards, keep the demo's server running (with its dashboard) until Ctrl-C.
        #[arg(long)]
        keep_running: bool,
    },
    /// Send signed deliveries at a concurrency and rate; report throughput, latency and answers.
    #[command(after_help = "Example:\n  \
        settle loadgen --url http://127.0.0.1:8080 --source std --secret \"$SECRET\" --count 20000")]
    Loadgen {
        #[command(flatten)]
        load: crate::loadgen::LoadOptions,
        /// Afterwards, check the store (DATABASE_URL) holds exactly the run's events.
        #[arg(long)]
        verify: bool,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Apply settle's and the job queue's migrations, then exit.
    #[command(after_help = "Example:\n  \
        DATABASE_URL=postgres://settle@db/settle settle migrate")]
    Migrate,
    /// A fleet's database roles on PostgreSQL.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Drain the dead letter: list, show, requeue, discard.
    #[command(
        name = "dead-letters",
        after_help = "Examples:\n  \
        settle dead-letters list --error-code invalid_facts\n  \
        settle dead-letters requeue 12 --reason \"fixed the account mapping\"\n  \
        settle dead-letters discard --source std --error-code invalid_facts --reason \"test events\" --dry-run"
    )]
    DeadLetters {
        #[command(subcommand)]
        command: review::DeadLetterCommand,
    },
    /// Find events: by source, external id (or its prefix), kind, status, movement, reference,
    /// payout, received time or dead-letter class/code, newest first.
    #[command(after_help = "Examples:\n  \
        settle events search --source cards --external-id-prefix evt_1Q\n  \
        settle events search --reference order-42\n  \
        settle events search --error-code provider_auth --received-from 2026-12-01T00:00:00Z")]
    Events {
        #[command(subcommand)]
        command: review::EventCommand,
    },
    /// Expire the received payloads the retention policy (`retention.payload_days`, a source's
    /// `payload_days`) no longer allows; workers also do it every `retention.prune_every_secs`.
    #[command(after_help = "Examples:\n  \
        settle prune --dry-run\n  \
        settle prune")]
    Prune {
        /// Count what would expire, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Who (recorded with the erasure); default: the OS user.
        #[arg(long)]
        actor: Option<String>,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// The configured sources: which are paused; pause one (its deliveries are still recorded
    /// and acknowledged, nothing of it posts) or resume it (its waiting events drain).
    #[command(after_help = "Examples:\n  \
        settle sources list\n  \
        settle sources pause cards --reason \"provider incident INC-42\"\n  \
        settle sources resume cards --reason \"incident over\"")]
    Sources {
        #[command(subcommand)]
        command: review::SourceCommand,
    },
    /// Conflicting redeliveries: list, show, resolve.
    #[command(after_help = "Example:\n  \
        settle conflicts resolve 3 --reason \"provider confirmed the original\"")]
    Conflicts {
        #[command(subcommand)]
        command: review::ConflictCommand,
    },
    /// The journal: entries with their lines.
    #[command(after_help = "Example:\n  \
        settle journal list --from 2026-11-01 --to 2026-11-30 --account sales")]
    Journal {
        #[command(subcommand)]
        command: finance::JournalCommand,
    },
    /// Balances per account and currency.
    #[command(after_help = "Example:\n  \
        settle balances --as-of 2026-11-30")]
    Balances {
        /// As of this effective date (inclusive).
        #[arg(long, value_name = "DATE")]
        as_of: Option<chrono::NaiveDate>,
        /// Only entries recorded by this time (RFC 3339), to reproduce an earlier report.
        #[arg(long, value_name = "TIME")]
        recorded_at: Option<String>,
        /// Machine-readable output (JSON) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Reconciliation: payouts, receivables, a source's balance and coverage.
    #[command(after_help = "Example:\n  \
        settle reconcile payouts\n  \
        settle reconcile payout po_1SetTL...\n  \
        settle reconcile balance card-payments\n  \
        settle reconcile coverage card-payments --from 2026-11-01 --to 2026-11-30\n  \
        settle reconcile coverage batches-eu")]
    Reconcile {
        #[command(subcommand)]
        command: finance::ReconcileCommand,
    },
    /// Book a source's history from its provider's own list: every movement since DATE (a
    /// window a day, posted by the workers) and one opening balance per currency at DATE. Safe
    /// to run again; shows progress until done unless --no-wait.
    #[command(after_help = "Example:\n  \
        settle backfill card-payments --since 2026-01-01")]
    Backfill {
        /// The source's configured name.
        source: String,
        /// The first day (UTC) to book.
        #[arg(long)]
        since: NaiveDate,
        /// Record the backfill and return; the workers post it.
        #[arg(long)]
        no_wait: bool,
    },
    /// Export the journal for other tools.
    #[command(after_help = "Example:\n  \
        settle export --format beancount --from 2026-11-01 -o november.beancount")]
    Export {
        /// The format to write.
        #[arg(long, value_enum)]
        format: crate::export::Format,
        /// Entries effective on or after this date.
        #[arg(long, value_name = "DATE")]
        from: Option<chrono::NaiveDate>,
        /// Entries effective on or before this date.
        #[arg(long, value_name = "DATE")]
        to: Option<chrono::NaiveDate>,
        /// Write here instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Check every invariant on the configured store; exits non-zero if any fails.
    #[command(after_help = "Example:\n  \
        DATABASE_URL=postgres://settle@db/settle settle verify")]
    Verify {
        /// Machine-readable output on stdout.
        #[arg(long)]
        json: bool,
    },
    /// API and dashboard tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// The configuration: check it.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Exit 0 if a running settle answers its health check (for container health checks).
    #[command(
        after_help = "Example (a container's health check, no curl needed):\n  \
        HEALTHCHECK CMD [\"settle\", \"healthcheck\"]"
    )]
    Healthcheck {
        /// The URL to check (default: /healthz on the configured `listen` port, on loopback
        /// when it listens on every address).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Give up after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 5)]
        timeout_secs: u64,
    },
    /// Print a shell completion script.
    #[command(after_help = "Examples:\n  \
        settle completions bash > /etc/bash_completion.d/settle\n  \
        settle completions zsh > \"${fpath[1]}/_settle\"\n  \
        settle completions fish > ~/.config/fish/completions/settle.fish")]
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print settle's man page (roff), or write it and one page per command to a directory (the
    /// main page names each command's page).
    #[command(after_help = "Example:\n  \
        settle man --dir /usr/local/share/man/man1\n  \
        settle man | man -l -")]
    Man {
        /// Write settle.1 and every command's page (settle-serve.1, ...) here.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Create the runtime roles settle_ingress, settle_worker and settle_console (those
    /// missing; needs CREATEROLE) and grant each what its processes may do. Run as the role that
    /// migrates (it owns the tables); every later `settle migrate` grants again. Then make each
    /// process' login role a member of one (README.md, Database roles).
    #[command(
        name = "grant-roles",
        after_help = "Example:\n  \
        DATABASE_URL=postgres://settle_owner@db/settle settle db grant-roles\n  \
        psql -c \"CREATE ROLE settle_worker_1 LOGIN PASSWORD '...' IN ROLE settle_worker\""
    )]
    GrantRoles,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh random token and the configuration lines that hold only its hash.
    #[command(after_help = "Example:\n  \
        settle token new --role ops --name alice")]
    New {
        /// ops (reads and acts) or finance (reads).
        #[arg(long, value_enum)]
        role: TokenRole,
        /// Who holds it (recorded as the actor of their actions).
        #[arg(long, value_name = "NAME")]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the file and the environment; print the resolved configuration with every
    /// secret redacted. Exits non-zero, naming the key (and its line), if anything is wrong.
    #[command(after_help = "Example:\n  \
        SETTLE_CONFIG=/etc/settle/settle.toml settle config check")]
    Check,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum TokenRole {
    Ops,
    Finance,
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Token {
                command: TokenCommand::New { role, name },
            } => {
                print!("{}", new_token(role, &name)?);
                Ok(())
            }
            Command::Completions { shell } => {
                let mut command = Cli::command();
                clap_complete::generate(shell, &mut command, "settle", &mut std::io::stdout());
                Ok(())
            }
            // No `help` command page: its references would name a page never written.
            Command::Man { dir: None } => {
                clap_mangen::Man::new(Cli::command().disable_help_subcommand(true))
                    .render(&mut std::io::stdout())
                    .context("cannot write the man page")
            }
            Command::Man { dir: Some(dir) } => {
                clap_mangen::generate_to(Cli::command(), &dir)
                    .with_context(|| format!("cannot write the man pages to {}", dir.display()))?;
                println!("man pages written to {}", dir.display());
                Ok(())
            }
            Command::Demo { dir, keep_running } => demo::run(dir, keep_running).await,
            Command::Config {
                command: ConfigCommand::Check,
            } => config_check(self.config.as_deref()),
            command => {
                let loaded = Config::load(self.config.as_deref())?;
                if matches!(&command, Command::Serve { .. } | Command::Ingress { .. }) {
                    loaded.check_sources()?;
                }
                let config = match &command {
                    Command::Serve { .. } | Command::Ingress { .. } | Command::Worker { .. } => {
                        loaded.strict()?
                    }
                    _ => loaded.lenient(),
                };
                crate::telemetry::init(config.log.format);
                run_configured(command, config).await
            }
        }
    }
}

async fn run_configured(command: Command, mut config: Config) -> anyhow::Result<()> {
    match command {
        Command::Serve { listeners } => serve(config, listeners, Role::Serve).await,
        Command::Ingress { listeners } => serve(config, listeners, Role::Ingress).await,
        Command::Console { listeners } => serve(config, listeners, Role::Console).await,
        Command::Worker { concurrency } => {
            if let Some(concurrency) = concurrency {
                config.workers.concurrency = concurrency;
            }
            config.workers.validate().map_err(anyhow::Error::msg)?;
            serve(config, Listeners::default(), Role::Worker).await
        }
        Command::Loadgen { load, verify, json } => {
            crate::loadgen::command(load, verify.then(|| config.database_url.clone()), json).await
        }
        Command::Migrate => {
            let store = connect(&config).await?;
            store.migrate().await.context("migration failed")?;
            store.close().await;
            println!("migrations applied");
            Ok(())
        }
        Command::Db {
            command: DbCommand::GrantRoles,
        } => {
            let store = connect(&config).await?;
            store.migrate().await.context("migration failed")?;
            store
                .grant_roles()
                .await
                .context("cannot create or grant the runtime roles")?;
            store.close().await;
            println!(
                "runtime roles granted: {} (make each process' login role a member of one)",
                ledger::store::RUNTIME_ROLES.join(", ")
            );
            Ok(())
        }
        Command::Healthcheck { url, timeout_secs } => {
            healthcheck(
                url.unwrap_or_else(|| health_url(config.listen)),
                timeout_secs,
            )
            .await
        }
        Command::Verify { json } => {
            with_store(&config, |store| async move {
                crate::verify::run(&store, json).await
            })
            .await
        }
        Command::Journal { command } => {
            with_store(&config, |store| async move {
                finance::journal(&store, command).await
            })
            .await
        }
        Command::Balances {
            as_of,
            recorded_at,
            json,
        } => {
            with_store(&config, |store| async move {
                finance::balances(&store, as_of, recorded_at, json).await
            })
            .await
        }
        Command::Reconcile {
            command: finance::ReconcileCommand::Balance { source, json },
        } => {
            let shared = &config;
            with_store(&config, |store| async move {
                feeds::balance(shared, &store, &source, json).await
            })
            .await
        }
        Command::Reconcile {
            command:
                finance::ReconcileCommand::Coverage {
                    source,
                    from,
                    to,
                    json,
                },
        } => {
            let shared = &config;
            with_store(&config, |store| async move {
                feeds::coverage(shared, &store, &source, (from, to), json).await
            })
            .await
        }
        Command::Reconcile { command } => {
            let rules = config.posting_rules();
            with_store(&config, |store| async move {
                finance::reconcile(&store, &rules, command).await
            })
            .await
        }
        Command::Backfill {
            source,
            since,
            no_wait,
        } => {
            let shared = &config;
            with_store(&config, |store| async move {
                feeds::backfill(shared, &store, &source, since, no_wait).await
            })
            .await
        }
        Command::Export {
            format,
            from,
            to,
            output,
        } => {
            let rules = config.posting_rules();
            with_store(&config, |store| async move {
                finance::export(&store, rules, format, from, to, output).await
            })
            .await
        }
        Command::DeadLetters { command } => {
            with_store(&config, |store| async move {
                review::dead_letters(&store, command).await
            })
            .await
        }
        Command::Conflicts { command } => {
            with_store(&config, |store| async move {
                review::conflicts(&store, command).await
            })
            .await
        }
        Command::Events { command } => {
            with_store(&config, |store| async move {
                review::events(&store, command).await
            })
            .await
        }
        Command::Sources { command } => {
            let names: Vec<String> = config.sources.iter().map(|s| s.name.to_string()).collect();
            with_store(&config, |store| async move {
                review::sources(&store, &names, command).await
            })
            .await
        }
        Command::Prune {
            dry_run,
            actor,
            json,
        } => {
            let policy = config.retention_policy();
            with_store(&config, |store| async move {
                review::prune(&store, &policy, &actor, dry_run, json).await
            })
            .await
        }
        Command::Token { .. }
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::Demo { .. }
        | Command::Config { .. } => unreachable!("run without a configuration"),
    }
}

/// `settle config check`: the file and the environment validated as `serve` would (unknown
/// `SETTLE_*` variables refused, provider credentials present), then the resolved configuration
/// printed with every secret redacted.
fn config_check(file: Option<&Path>) -> anyhow::Result<()> {
    let loaded = Config::load(file)?;
    let origin = match &loaded.file {
        Some(file) => format!("{} and the environment", file.display()),
        None => "defaults and the environment, no file".to_owned(),
    };
    loaded.check_sources()?;
    let config = loaded.strict()?;
    config.resolvers()?;
    let notes = config.source_notes()?;
    print!(
        "# settle's configuration as resolved from {origin}; secrets redacted\n{}",
        config.to_redacted_toml()?
    );
    for (source, note) in notes {
        eprintln!("settle: source {source}: {note}");
    }
    eprintln!("settle: configuration valid ({origin})");
    Ok(())
}

#[cfg(test)]
mod tests;
