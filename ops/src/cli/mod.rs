//! The `settle` command line (DESIGN §7).

mod demo;
mod finance;
mod review;
mod table;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::app::{App, Role};
use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "settle",
    version,
    about = "Settlement webhooks in, balanced journal entries out."
)]
pub struct Cli {
    /// Configuration file (default: $SETTLE_CONFIG, else ./settle.toml when present).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ingress, workers and the ops API in one process.
    Serve {
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// The ingress role only (for a fleet on PostgreSQL).
    Ingress {
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// The worker role only (for a fleet on PostgreSQL).
    Worker {
        /// Jobs in flight at once in this process (default: workers.concurrency).
        #[arg(long, value_name = "N")]
        concurrency: Option<usize>,
    },
    /// A realistic run on a fresh embedded database: signed deliveries from three providers,
    /// the workers, and a summary. Exits 0 only if the outcome is the expected one.
    Demo {
        /// Keep the database in this directory (default: a temporary one, removed after).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Send signed deliveries at a concurrency and rate; report throughput, latency and answers.
    Loadgen {
        #[command(flatten)]
        load: crate::loadgen::LoadOptions,
        /// Afterwards, check the store (DATABASE_URL) holds exactly the run's events.
        #[arg(long)]
        verify: bool,
        #[arg(long)]
        json: bool,
    },
    /// Apply settle's and the job queue's migrations, then exit.
    Migrate,
    /// Drain the dead letter: list, show, requeue, discard.
    #[command(name = "dead-letters")]
    DeadLetters {
        #[command(subcommand)]
        command: review::DeadLetterCommand,
    },
    /// Conflicting redeliveries: list, show, resolve.
    Conflicts {
        #[command(subcommand)]
        command: review::ConflictCommand,
    },
    /// The journal: entries with their lines.
    Journal {
        #[command(subcommand)]
        command: finance::JournalCommand,
    },
    /// Balances per account and currency.
    Balances {
        /// As of this effective date (inclusive).
        #[arg(long, value_name = "DATE")]
        as_of: Option<chrono::NaiveDate>,
        /// Only entries recorded by this time (RFC 3339), to reproduce an earlier report.
        #[arg(long, value_name = "TIME")]
        recorded_at: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Payout reconciliation.
    Reconcile {
        #[command(subcommand)]
        command: finance::ReconcileCommand,
    },
    /// Export the journal for other tools.
    Export {
        #[arg(long, value_enum)]
        format: crate::export::Format,
        #[arg(long, value_name = "DATE")]
        from: Option<chrono::NaiveDate>,
        #[arg(long, value_name = "DATE")]
        to: Option<chrono::NaiveDate>,
        /// Write here instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Check every invariant on the configured store; exits non-zero if any fails.
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
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh random token and the configuration lines that hold only its hash.
    New {
        /// ops (reads and acts) or finance (reads).
        #[arg(long, value_enum)]
        role: TokenRole,
        /// Who holds it (recorded as the actor of their actions).
        #[arg(long, value_name = "NAME")]
        name: String,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum TokenRole {
    Ops,
    Finance,
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        if let Command::Token {
            command: TokenCommand::New { role, name },
        } = &self.command
        {
            print!("{}", new_token(*role, name)?);
            return Ok(());
        }
        let mut config = Config::load(self.config.as_deref())?;
        match self.command {
            Command::Serve { listen } => serve(config, listen, Role::Serve).await,
            Command::Ingress { listen } => serve(config, listen, Role::Ingress).await,
            Command::Worker { concurrency } => {
                if let Some(concurrency) = concurrency {
                    config.workers.concurrency = concurrency;
                }
                config.workers.validate().map_err(anyhow::Error::msg)?;
                serve(config, None, Role::Worker).await
            }
            Command::Demo { dir } => demo::run(dir).await,
            Command::Loadgen { load, verify, json } => {
                crate::loadgen::command(load, verify.then(|| config.database_url.clone()), json)
                    .await
            }
            Command::Migrate => {
                let store = connect(&config).await?;
                store.migrate().await.context("migration failed")?;
                store.close().await;
                println!("migrations applied");
                Ok(())
            }
            Command::Verify { json } => crate::verify::run(&connect(&config).await?, json).await,
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
            Command::Reconcile { command } => {
                with_store(&config, |store| async move {
                    finance::reconcile(&store, command).await
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
            Command::Token { .. } => Ok(()),
        }
    }
}

/// A fresh token (32 random bytes, URL-safe base64) and the `[[tokens]]` lines holding only its
/// SHA-256: the token is shown once and stored nowhere.
fn new_token(role: TokenRole, name: &str) -> anyhow::Result<String> {
    use base64::Engine;
    let name = name.trim();
    anyhow::ensure!(
        !name.is_empty() && !name.contains(['"', '\\', '\n']),
        "--name must be a non-empty plain name"
    );
    let role = match role {
        TokenRole::Ops => "ops",
        TokenRole::Finance => "finance",
    };
    let bytes: [u8; 32] = rand::random();
    let token = format!(
        "stl_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hash = crate::auth::token_sha256(&token);
    Ok(format!(
        "A new {role} token for {name}. Give it to {name}; it is shown only now:\n\n  {token}\n\n\
         Add these lines to settle.toml (they hold only its hash):\n\n\
         [[tokens]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n"
    ))
}

/// Runs a command with a store, and closes the store after.
async fn with_store<F, Fut>(config: &Config, command: F) -> anyhow::Result<()>
where
    F: FnOnce(jobs::Store) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let store = connect(config).await?;
    let result = command(store.clone()).await;
    store.close().await;
    result
}

async fn connect(config: &Config) -> anyhow::Result<jobs::Store> {
    jobs::Store::connect(&config.database_url, &config.store_options())
        .await
        .context("cannot connect to the database")
}

async fn serve(mut config: Config, listen: Option<SocketAddr>, role: Role) -> anyhow::Result<()> {
    if let Some(listen) = listen {
        config.listen = listen;
    }
    let app = App::build(&config, role).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    app.run(shutdown).await
}

/// SIGTERM or ctrl-c starts a graceful stop.
async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(error) => {
                    tracing::error!(%error, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("stop requested");
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_is_printed_once_beside_only_its_hash() {
        let printed = new_token(TokenRole::Finance, "fred").expect("token");
        let token = printed
            .split_whitespace()
            .find(|word| word.starts_with("stl_"))
            .expect("the token");
        assert!(token.len() > 40);
        let config = printed
            .split_once("[[tokens]]")
            .map(|(_, lines)| format!("[[tokens]]{lines}"))
            .expect("configuration lines");
        assert!(!config.contains(token), "the configuration holds no token");
        #[derive(serde::Deserialize)]
        struct File {
            tokens: Vec<crate::auth::TokenConfig>,
        }
        let file: File = toml_from(&config);
        let tokens = crate::auth::Tokens::new(&file.tokens).expect("valid lines");
        let caller = tokens.caller(token).expect("the token opens");
        assert_eq!(
            (caller.name.as_str(), caller.role.as_str()),
            ("fred", "finance")
        );
        assert_ne!(
            new_token(TokenRole::Ops, "alice").expect("token"),
            new_token(TokenRole::Ops, "alice").expect("token"),
            "fresh every time"
        );
        assert!(new_token(TokenRole::Ops, "a\"b").is_err());
    }

    fn toml_from<T: serde::de::DeserializeOwned>(text: &str) -> T {
        use figment::providers::Format;
        figment::Figment::from(figment::providers::Toml::string(text))
            .extract()
            .expect("toml")
    }
}
