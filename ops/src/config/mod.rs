//! Configuration: typed, layered (defaults, then `settle.toml`, then `SETTLE_*` environment
//! variables), validated at load. Secrets are wrapped so they cannot be printed; the resolved
//! configuration serializes with every secret redacted (`settle config check`).

mod env;
mod errors;
mod source;

pub use env::UnknownVariable;
pub use errors::redact_url;
pub use source::{SourceConfig, SourceConfigError};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use ingress::{IngressSettings, Source, Sources};
use ledger::posting::Accounts;
use ledger::{PostingRules, StoreOptions};
use providers::{Provider, Section};
use serde::{Deserialize, Serialize};
use workers::{Resolvers, WorkerSettings};

use crate::auth::{TokenConfig, Tokens};
use crate::dashboard::DashboardSettings;
use crate::server::HttpSettings;

/// A loaded configuration, the file it came from, and the `SETTLE_*` variables that name no
/// setting (left out of it).
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    pub file: Option<PathBuf>,
    pub unknown_variables: Vec<UnknownVariable>,
}

impl Loaded {
    /// Every source's receiving half built (its webhook secrets read), an error located by its
    /// line in the file: what `config check` and the roles that verify webhooks check first.
    pub fn check_sources(&self) -> anyhow::Result<()> {
        let text = self
            .file
            .as_ref()
            .and_then(|file| std::fs::read_to_string(file).ok());
        self.config
            .sources()
            .map(drop)
            .map_err(|error| errors::locate(error, self.file.as_deref().zip(text.as_deref())))
    }

    /// For the long-running roles (`serve`, `ingress`, `worker`): a variable that names no
    /// setting refuses start-up, since a misspelt setting of a process that posts money must
    /// not be silently ignored.
    pub fn strict(self) -> anyhow::Result<Config> {
        if self.unknown_variables.is_empty() {
            return Ok(self.config);
        }
        let list: Vec<String> = self
            .unknown_variables
            .iter()
            .map(ToString::to_string)
            .collect();
        bail!(
            "invalid configuration: {} (remove it, or check it with `settle config check`)",
            list.join("; ")
        )
    }

    /// For every other command: a variable that names no setting is reported on stderr and
    /// otherwise ignored.
    pub fn lenient(self) -> Config {
        for variable in &self.unknown_variables {
            eprintln!("settle: warning: {variable}; ignored");
        }
        self.config
    }
}

/// The embedded default database when `DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://settle.db";
const DEFAULT_CONFIG_FILE: &str = "settle.toml";

/// Everything settle can be told. Every limit carries its unit in its name.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The public listener: webhooks and `/healthz`, what providers reach.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The internal listener: the API, the dashboard, `/metrics` and `/readyz`, for operators
    /// and the platform; loopback unless set.
    #[serde(default = "default_ops_listen")]
    pub ops_listen: SocketAddr,
    /// `DATABASE_URL`: PostgreSQL (`postgres://...`) or SQLite (`sqlite://...`).
    #[serde(
        default = "default_database_url",
        serialize_with = "errors::serialize_redacted_url"
    )]
    pub database_url: String,
    /// `WORKER_DATABASE_URL`: a session-mode connection for workers, when `DATABASE_URL` goes
    /// through a transaction pooler.
    #[serde(default, serialize_with = "errors::serialize_redacted_url_option")]
    pub worker_database_url: Option<String>,
    #[serde(default = "default_body_bytes_max")]
    pub body_bytes_max: usize,
    /// `serve` applies migrations on start unless this is false.
    #[serde(default = "default_true")]
    pub migrate_on_start: bool,
    #[serde(default)]
    pub database: DatabaseConfig,
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
    #[serde(default)]
    pub ingress: IngressSettings,
    #[serde(default)]
    pub workers: WorkerSettings,
    /// The HTTP edge: timeouts, the connection cap, shutdown, failed-authentication limits.
    #[serde(default)]
    pub http: HttpSettings,
    #[serde(default)]
    pub dashboard: DashboardSettings,
    /// How long received payloads are kept.
    #[serde(default)]
    pub retention: RetentionSettings,
    /// Bearer tokens of the ops/finance API.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    #[serde(default)]
    pub log: LogConfig,
}

/// The `[retention]` settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// Days a received payload is kept (a source's `payload_days` overrides it); 0 keeps them
    /// for ever. What the invariants need (key, fingerprint, facts, entries, audit) is never
    /// expired.
    pub payload_days: u32,
    /// How often workers expire what is due (every worker process may; they share the work).
    pub prune_every_secs: u64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            payload_days: 90,
            prune_every_secs: 3_600,
        }
    }
}

/// The `[log]` settings.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// How logs are written (to stderr): `auto` is human-readable on a terminal and JSON otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Auto,
    Json,
    Text,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    #[serde(default = "default_connections_max")]
    pub connections_max: u32,
    #[serde(default = "default_acquire_timeout_ms")]
    pub acquire_timeout_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            connections_max: default_connections_max(),
            acquire_timeout_ms: default_acquire_timeout_ms(),
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_ops_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9090))
}
fn default_database_url() -> String {
    DEFAULT_DATABASE_URL.to_owned()
}
fn default_body_bytes_max() -> usize {
    ingress::BODY_BYTES_MAX_DEFAULT
}
fn default_true() -> bool {
    true
}
fn default_connections_max() -> u32 {
    StoreOptions::default().connections_max
}
fn default_acquire_timeout_ms() -> u64 {
    StoreOptions::default().acquire_timeout_ms
}
pub(super) fn default_tolerance_secs() -> u64 {
    300
}

impl Config {
    /// Loads `file` (or `SETTLE_CONFIG`, or `./settle.toml` when present), then applies `SETTLE_*`
    /// overrides (nested keys with `__`, e.g. `SETTLE_DATABASE__CONNECTIONS_MAX=32`) and
    /// `DATABASE_URL` / `WORKER_DATABASE_URL`. A `SETTLE_*` variable that names no setting is
    /// left out and returned beside the configuration; the caller decides what it means.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Loaded> {
        let file: Option<PathBuf> = match file {
            Some(path) => Some(path.to_owned()),
            None => std::env::var_os("SETTLE_CONFIG")
                .map(PathBuf::from)
                .or_else(|| Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.exists())),
        };
        let mut figment = Figment::new();
        let mut text = None;
        if let Some(path) = &file {
            let read = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read config file {}", path.display()))?;
            text = Some(read);
            figment = figment.merge(Toml::file_exact(path));
        }
        let mut unknown_variables = env::unknown_variables();
        let figment = figment
            .merge(env::provider(&unknown_variables))
            .merge(Env::raw().only(&["DATABASE_URL", "WORKER_DATABASE_URL"]));
        let config: Config = figment
            .extract()
            .map_err(|error| errors::explain(error, file.as_deref().zip(text.as_deref())))?;
        // A variable a source names (`secrets_env`, a provider's `..._env`) is the
        // configuration's own.
        let named: Vec<&str> = config
            .sources
            .iter()
            .flat_map(SourceConfig::variables)
            .collect();
        unknown_variables.retain(|variable| !named.contains(&variable.name.as_str()));
        config
            .validate()
            .map_err(|error| errors::locate(error, file.as_deref().zip(text.as_deref())))?;
        Ok(Loaded {
            config,
            file,
            unknown_variables,
        })
    }

    /// The configuration as a TOML document, every secret and database password redacted.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        toml::to_string(self).context("cannot print the configuration")
    }

    /// Parses a TOML document with the same rules, without the environment (for tests and demos).
    pub fn from_toml(text: &str) -> anyhow::Result<Config> {
        let config: Config = Figment::from(Toml::string(text))
            .extract()
            .map_err(|error| errors::explain(error, None))?;
        config
            .validate()
            .map_err(|error| errors::locate(error, None))?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if ledger::store::BackendKind::of_url(&self.database_url).is_none() {
            bail!("database URL must start with postgres://, postgresql:// or sqlite:");
        }
        if self.body_bytes_max == 0 {
            bail!("body_bytes_max must be positive");
        }
        if self.dashboard.session_lifetime_secs == 0 {
            bail!("dashboard.session_lifetime_secs must be positive");
        }
        if self.retention.prune_every_secs == 0 {
            bail!("retention.prune_every_secs must be positive");
        }
        // Every source's table is checked here but its webhook secrets: those are read only by
        // the roles that verify webhooks (`sources`), and by `config check`.
        self.each_source(false, |_, _| Ok(()))?;
        for (index, source) in self.sources.iter().enumerate() {
            let receivables = source.accounts.receivables.as_deref();
            if receivables.is_some_and(|r| !r.starts_with(ledger::posting::RECEIVABLES_PREFIX)) {
                Err(SourceConfigError {
                    index,
                    source_name: source.name.clone(),
                    key: Some("accounts.receivables".into()),
                    message: format!(
                        "accounts.receivables must begin with `{}` (the open receivables are kept for those accounts)",
                        ledger::posting::RECEIVABLES_PREFIX
                    ),
                })?;
            }
            if source.expect_delivery_within_secs == Some(0) {
                Err(SourceConfigError {
                    index,
                    source_name: source.name.clone(),
                    key: Some("expect_delivery_within_secs".into()),
                    message: "expect_delivery_within_secs must be positive".into(),
                })?;
            }
        }
        self.ingress.validate().map_err(anyhow::Error::msg)?;
        self.workers.validate().map_err(anyhow::Error::msg)?;
        self.http.validate().map_err(anyhow::Error::msg)?;
        self.api_tokens()?;
        Ok(())
    }

    /// How long payloads are kept, per source and for the rest (0 days: for ever).
    pub fn retention_policy(&self) -> ledger::store::RetentionPolicy {
        let days = |days: u32| (days > 0).then_some(days);
        ledger::store::RetentionPolicy {
            default_days: days(self.retention.payload_days),
            sources: self
                .sources
                .iter()
                .filter_map(|s| s.payload_days.map(|d| (s.name.to_string(), days(d))))
                .collect(),
        }
    }

    /// Each source's table as its provider reads it, handed to `build`, with its webhook secrets
    /// when `with_secrets` (else none: nothing but the receiving half needs them); the first
    /// refusal names its source and key.
    fn each_source<T>(
        &self,
        with_secrets: bool,
        build: impl Fn(&dyn Provider, &Section<'_>) -> Result<T, providers::SectionError>,
    ) -> Result<Vec<T>, SourceConfigError> {
        let mut built = Vec::with_capacity(self.sources.len());
        for (index, source) in self.sources.iter().enumerate() {
            let refused = |key: Option<&str>, message: String| SourceConfigError {
                index,
                source_name: source.name.clone(),
                key: key.map(str::to_owned),
                message,
            };
            let provider = source
                .provider()
                .map_err(|message| refused(Some("provider"), message))?;
            if let Some((key, message)) = source.unknown_key(provider) {
                return Err(refused(Some(&key), message));
            }
            let secrets = match with_secrets {
                true => source
                    .secrets()
                    .map_err(|message| refused(Some("secrets_env"), message))?,
                false => Vec::new(),
            };
            let section = Section {
                source: &source.name,
                secrets: &secrets,
                tolerance_secs: source.tolerance_secs,
                keys: &source.keys,
            };
            built.push(
                build(provider, &section).map_err(|error| refused(error.key, error.message))?,
            );
        }
        Ok(built)
    }

    /// The configured sources, each with its provider's receiving half (its secrets turned into
    /// keys, its keys checked); secrets from `secrets_env` included.
    pub fn sources(&self) -> anyhow::Result<Sources> {
        let receivers = self.each_source(true, |provider, section| provider.receiver(section))?;
        let mut sources = Vec::with_capacity(receivers.len());
        for (config, receiver) in self.sources.iter().zip(receivers) {
            let mut source = Source::new(config.name.clone(), receiver);
            if let Some(secs) = config.expect_delivery_within_secs {
                source = source.with_expected_within(secs);
            }
            sources.push(source);
        }
        Ok(Sources::new(sources)?)
    }

    /// What each source's provider says a person running it should know (source, note), in
    /// the sources' order.
    pub fn source_notes(&self) -> anyhow::Result<Vec<(String, String)>> {
        let notes = self.each_source(false, |provider, section| provider.notes(section))?;
        Ok(self
            .sources
            .iter()
            .zip(notes)
            .flat_map(|(source, notes)| notes.into_iter().map(|n| (source.name.to_string(), n)))
            .collect())
    }

    /// What workers resolve triggers through: each source's provider's resolving half, its
    /// credentials read from their variables now.
    pub fn resolvers(&self) -> anyhow::Result<Resolvers> {
        let resolvers = self.each_source(false, |provider, section| provider.resolver(section))?;
        Ok(Resolvers::new(
            self.sources
                .iter()
                .zip(resolvers)
                .filter_map(|(source, resolver)| Some((source.name.clone(), resolver?)))
                .collect(),
        ))
    }

    /// Each configured source's accounts (others post to the defaults).
    pub fn posting_rules(&self) -> PostingRules {
        PostingRules::new(
            self.sources
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        Accounts::with_overrides(&s.name, &s.accounts),
                    )
                })
                .collect(),
        )
    }

    /// The URL workers connect with: `WORKER_DATABASE_URL` when set (a session-mode connection
    /// when `DATABASE_URL` is a transaction pooler), else `DATABASE_URL`.
    pub fn worker_database_url(&self) -> &str {
        self.worker_database_url
            .as_deref()
            .unwrap_or(&self.database_url)
    }

    pub fn api_tokens(&self) -> anyhow::Result<Tokens> {
        Tokens::new(&self.tokens).map_err(anyhow::Error::msg)
    }

    pub fn store_options(&self) -> StoreOptions {
        StoreOptions {
            connections_max: self.database.connections_max,
            acquire_timeout_ms: self.database.acquire_timeout_ms,
        }
    }
}

#[cfg(test)]
mod tests;
