//! Configuration: typed, layered (defaults, then `settle.toml`, then `SETTLE_*` environment
//! variables), validated at load. Secrets are wrapped so they cannot be printed; the resolved
//! configuration serializes with every secret redacted (`settle config check`).

mod env;
mod errors;

pub use env::UnknownVariable;
pub use errors::redact_url;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use ingress::{
    Connect, IngressSettings, MoneyFrom, Provider, Secret, Source, Sources, StripeRules,
};
use ledger::posting::{AccountOverrides, Accounts};
use ledger::{PostingRules, SourceName, StoreOptions};
use serde::{Deserialize, Serialize};
use workers::{
    ADYEN_REPORT_HOSTS, AdyenReportSettings, ApiKey, ProviderApis, ReportAuth, ReportHost,
    StripeApiSettings, WorkerSettings,
};

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

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub name: SourceName,
    pub provider: Provider,
    #[serde(default)]
    pub secrets: Vec<Secret>,
    /// The name of an environment variable holding comma-separated secrets.
    #[serde(default)]
    pub secrets_env: Option<String>,
    #[serde(default = "default_tolerance_secs")]
    pub tolerance_secs: u64,
    /// The longest the source is expected to go without a delivery (the shipped alert
    /// `SettleSourceSilent` fires past it); unset: no expectation.
    #[serde(default)]
    pub expect_delivery_within_secs: Option<u64>,
    /// Days this source's payloads are kept, overriding `retention.payload_days` (0: for ever).
    #[serde(default)]
    pub payload_days: Option<u32>,
    /// Accounts this source posts to; unset names keep their defaults.
    #[serde(default)]
    pub accounts: AccountOverrides,
    /// Stripe: the mode of the account's key; events of the other mode are ignored. Required.
    #[serde(default)]
    pub livemode: Option<bool>,
    /// Stripe: events of connected accounts are ignored (the default) or posted to accounts
    /// namespaced by the connected account.
    #[serde(default)]
    pub connect: Option<Connect>,
    /// Stripe: the environment variable holding a restricted API key with read access to
    /// balance transactions, charges, refunds, disputes and payouts. Required.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Stripe: the key itself, when it is not in the environment (never printed).
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Stripe: where its API is reached (tests and proxies point it elsewhere).
    #[serde(default)]
    pub api_base: Option<String>,
    /// Stripe: API requests per second the whole fleet may send for this source (Stripe allows
    /// about 100 read requests a second in live mode and 25 in test mode).
    #[serde(default)]
    pub api_requests_per_sec: Option<u32>,
    /// Stripe: API requests per second the whole fleet may send to any one endpoint (Stripe
    /// limits each endpoint to 25 a second unless it documents otherwise).
    #[serde(default)]
    pub api_endpoint_requests_per_sec: Option<u32>,
    /// Stripe: the longest wait for a connection, and for a whole request.
    #[serde(default)]
    pub api_connect_timeout_ms: Option<u64>,
    #[serde(default)]
    pub api_request_timeout_ms: Option<u64>,
    /// Adyen: the report user settlement details reports are downloaded as
    /// (`report@Company.<company account>`), or the environment variable holding it; with
    /// `report_password_env` (or `report_password`). `api_key_env` (or `api_key`) sends an
    /// `X-API-Key` instead. Without either, reports are recorded and their jobs wait for it.
    #[serde(default)]
    pub report_user: Option<String>,
    /// Adyen: where the source's money comes from, `"notifications"` (the default: amounts as
    /// notified, no fees) or `"reports"` (settlement details reports: fees, settlement currency,
    /// payouts). One of the two, never both.
    #[serde(default)]
    pub money_from: Option<MoneyFrom>,
    #[serde(default)]
    pub report_user_env: Option<String>,
    #[serde(default)]
    pub report_password_env: Option<String>,
    #[serde(default)]
    pub report_password: Option<Secret>,
    /// Adyen: the hosts a report may be downloaded from (`host[:port]` over https, or
    /// `http://host[:port]`); a URL elsewhere is refused, credentials unsent. Default: Adyen's
    /// `ca-live.adyen.com` and `ca-test.adyen.com`.
    #[serde(default)]
    pub report_hosts: Option<Vec<String>>,
    /// Adyen: the largest report downloaded, and the longest a download may take.
    #[serde(default)]
    pub report_bytes_max: Option<u64>,
    #[serde(default)]
    pub report_timeout_ms: Option<u64>,
}

/// Stripe's API, unless a source says otherwise.
pub const STRIPE_API_BASE: &str = "https://api.stripe.com";
/// The request budgets the Stripe sources get unless they set one: Stripe's documented limits
/// (docs.stripe.com/rate-limits): per account 100 a second in live mode and 25 in test mode, and
/// 25 a second to any one endpoint.
const STRIPE_REQUESTS_PER_SEC_LIVE: u32 = 100;
const STRIPE_REQUESTS_PER_SEC_TEST: u32 = 25;
const STRIPE_ENDPOINT_REQUESTS_PER_SEC: u32 = 25;
const STRIPE_CONNECT_TIMEOUT_MS: u64 = 3_000;
const STRIPE_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// A settlement details report is about 300 bytes a line: a million lines fit.
const ADYEN_REPORT_BYTES_MAX: u64 = 512 * 1024 * 1024;
const ADYEN_REPORT_TIMEOUT_MS: u64 = 300_000;

/// A secret given inline or in an environment variable; `None` when neither is set.
fn secret_from(
    source: &SourceName,
    inline: Option<&str>,
    var: Option<&str>,
    key: &str,
) -> anyhow::Result<Option<String>> {
    match (inline, var) {
        (Some(value), _) => Ok(Some(value.trim().to_owned())),
        (None, Some(var)) => std::env::var(var)
            .ok()
            .filter(|value| !value.trim().is_empty())
            .map(|value| Some(value.trim().to_owned()))
            .with_context(|| {
                format!("source {source}: environment variable {var} ({key}_env) is not set")
            }),
        (None, None) => Ok(None),
    }
}

impl SourceConfig {
    /// The Stripe-only keys this source sets.
    fn stripe_keys_set(&self) -> Vec<&'static str> {
        [
            ("livemode", self.livemode.is_some()),
            ("connect", self.connect.is_some()),
            ("api_key_env", self.api_key_env.is_some()),
            ("api_key", self.api_key.is_some()),
            ("api_base", self.api_base.is_some()),
            ("api_requests_per_sec", self.api_requests_per_sec.is_some()),
            (
                "api_endpoint_requests_per_sec",
                self.api_endpoint_requests_per_sec.is_some(),
            ),
            (
                "api_connect_timeout_ms",
                self.api_connect_timeout_ms.is_some(),
            ),
            (
                "api_request_timeout_ms",
                self.api_request_timeout_ms.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }

    /// The Adyen-only keys this source sets.
    fn adyen_keys_set(&self) -> Vec<&'static str> {
        [
            ("money_from", self.money_from.is_some()),
            ("report_user", self.report_user.is_some()),
            ("report_user_env", self.report_user_env.is_some()),
            ("report_password", self.report_password.is_some()),
            ("report_password_env", self.report_password_env.is_some()),
            ("report_hosts", self.report_hosts.is_some()),
            ("report_bytes_max", self.report_bytes_max.is_some()),
            ("report_timeout_ms", self.report_timeout_ms.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }

    fn validate_provider_keys(&self) -> anyhow::Result<()> {
        let name = &self.name;
        if self.provider != Provider::Adyen
            && let Some(key) = self.adyen_keys_set().first()
        {
            bail!("source {name}: {key} is a setting of provider = \"adyen\" sources only");
        }
        if self.provider != Provider::Stripe {
            // An Adyen source's API key authenticates its report downloads.
            let shared = |key: &&str| {
                self.provider == Provider::Adyen && matches!(*key, "api_key" | "api_key_env")
            };
            if let Some(key) = self.stripe_keys_set().into_iter().find(|k| !shared(k)) {
                bail!("source {name}: {key} is a setting of provider = \"stripe\" sources only");
            }
            if self.provider == Provider::Adyen {
                return self.validate_adyen_keys();
            }
            return Ok(());
        }
        if self.livemode.is_none() {
            bail!(
                "source {name}: livemode is required for a stripe source (true for a live-mode key, false for a test-mode key)"
            );
        }
        if self.api_key_env.is_some() == self.api_key.is_some() {
            bail!(
                "source {name}: a stripe source needs api_key_env (the environment variable holding a restricted, read-only API key) or api_key, not both"
            );
        }
        if self.api_requests_per_sec == Some(0) || self.api_endpoint_requests_per_sec == Some(0) {
            bail!("source {name}: API request budgets must be positive");
        }
        if self.api_request_timeout_ms == Some(0) || self.api_connect_timeout_ms == Some(0) {
            bail!("source {name}: API timeouts must be positive");
        }
        Ok(())
    }

    fn validate_adyen_keys(&self) -> anyhow::Result<()> {
        let name = &self.name;
        let user = self.report_user.is_some() || self.report_user_env.is_some();
        let password = self.report_password.is_some() || self.report_password_env.is_some();
        let key = self.api_key.is_some() || self.api_key_env.is_some();
        if (user || password) && key {
            bail!(
                "source {name}: report downloads authenticate with report_user_env and report_password_env, or with api_key_env, not both"
            );
        }
        if user != password
            || (self.report_user.is_some() && self.report_user_env.is_some())
            || (self.report_password.is_some() && self.report_password_env.is_some())
            || (self.api_key.is_some() && self.api_key_env.is_some())
        {
            bail!(
                "source {name}: a report user needs one of report_user / report_user_env and one of report_password / report_password_env"
            );
        }
        for host in self.report_hosts.iter().flatten() {
            if ReportHost::parse(host).is_none() {
                bail!(
                    "source {name}: report_hosts entry {host:?} is not host[:port] or http(s)://host[:port]"
                );
            }
        }
        if self.report_bytes_max == Some(0) || self.report_timeout_ms == Some(0) {
            bail!("source {name}: report limits must be positive");
        }
        if (user || key) && self.money_from != Some(MoneyFrom::Reports) {
            bail!(
                "source {name}: report credentials are set but money_from is not \"reports\": set money_from = \"reports\" (the money notifications are then not booked, so nothing is booked twice)"
            );
        }
        if self.money_from == Some(MoneyFrom::Reports) && !(user || key) {
            bail!(
                "source {name}: money_from = \"reports\" needs report credentials (report_user_env + report_password_env, or api_key_env) to download the reports"
            );
        }
        Ok(())
    }

    /// How workers download this source's settlement details reports (Adyen sources with
    /// report credentials), the secrets read from their variables.
    fn adyen_reports(&self) -> anyhow::Result<Option<AdyenReportSettings>> {
        if self.provider != Provider::Adyen {
            return Ok(None);
        }
        let name = &self.name;
        let user = secret_from(
            name,
            self.report_user.as_deref(),
            self.report_user_env.as_deref(),
            "report_user",
        )?;
        let password = secret_from(
            name,
            self.report_password.as_ref().map(Secret::expose),
            self.report_password_env.as_deref(),
            "report_password",
        )?;
        let key = secret_from(
            name,
            self.api_key.as_ref().map(Secret::expose),
            self.api_key_env.as_deref(),
            "api_key",
        )?;
        let auth = match (user, password, key) {
            (Some(user), Some(password), _) => ReportAuth::Basic { user, password },
            (_, _, Some(key)) => ReportAuth::ApiKey(key),
            _ => return Ok(None),
        };
        let hosts = match &self.report_hosts {
            Some(hosts) => hosts.iter().filter_map(|h| ReportHost::parse(h)).collect(),
            None => ADYEN_REPORT_HOSTS
                .iter()
                .filter_map(|h| ReportHost::parse(h))
                .collect(),
        };
        Ok(Some(AdyenReportSettings {
            source: name.clone(),
            auth,
            hosts,
            bytes_max: self.report_bytes_max.unwrap_or(ADYEN_REPORT_BYTES_MAX),
            timeout_ms: self.report_timeout_ms.unwrap_or(ADYEN_REPORT_TIMEOUT_MS),
        }))
    }

    /// How workers reach this source's API (Stripe sources), the key read from its variable.
    fn stripe_api(&self) -> anyhow::Result<Option<StripeApiSettings>> {
        if self.provider != Provider::Stripe {
            return Ok(None);
        }
        let name = &self.name;
        let key = match (&self.api_key, &self.api_key_env) {
            (Some(key), _) => key.expose().to_owned(),
            (None, var) => {
                let var = var.as_deref().unwrap_or_default();
                std::env::var(var)
                    .ok()
                    .filter(|key| !key.trim().is_empty())
                    .with_context(|| {
                        format!(
                            "source {name}: environment variable {var} (api_key_env) is not set"
                        )
                    })?
            }
        };
        let livemode = self.livemode.unwrap_or(false);
        let default_budget = match livemode {
            true => STRIPE_REQUESTS_PER_SEC_LIVE,
            false => STRIPE_REQUESTS_PER_SEC_TEST,
        };
        Ok(Some(StripeApiSettings {
            source: self.name.clone(),
            api_key: ApiKey::new(key.trim()),
            api_base: self
                .api_base
                .clone()
                .unwrap_or_else(|| STRIPE_API_BASE.to_owned()),
            requests_per_sec: self.api_requests_per_sec.unwrap_or(default_budget),
            endpoint_requests_per_sec: self
                .api_endpoint_requests_per_sec
                .unwrap_or(STRIPE_ENDPOINT_REQUESTS_PER_SEC),
            connect_timeout_ms: self
                .api_connect_timeout_ms
                .unwrap_or(STRIPE_CONNECT_TIMEOUT_MS),
            request_timeout_ms: self
                .api_request_timeout_ms
                .unwrap_or(STRIPE_REQUEST_TIMEOUT_MS),
        }))
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
fn default_tolerance_secs() -> u64 {
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
        // A variable a source names (`secrets_env`, `api_key_env`) is the configuration's own.
        let named: Vec<&str> = config
            .sources
            .iter()
            .flat_map(|s| [s.secrets_env.as_deref(), s.api_key_env.as_deref()])
            .flatten()
            .collect();
        unknown_variables.retain(|variable| !named.contains(&variable.name.as_str()));
        config.validate()?;
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
            .context("invalid configuration")?;
        config.validate()?;
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
        self.sources()?;
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

    /// The configured sources with their keys derived; secrets from `secrets_env` included.
    pub fn sources(&self) -> anyhow::Result<Sources> {
        let mut sources = Vec::with_capacity(self.sources.len());
        for source in &self.sources {
            let mut secrets = source.secrets.clone();
            if let Some(var) = &source.secrets_env {
                let value = std::env::var(var).with_context(|| {
                    format!(
                        "source {}: environment variable {var} is not set",
                        source.name
                    )
                })?;
                secrets.extend(
                    value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(Secret::new),
                );
            }
            let mut built = Source::new(
                source.name.clone(),
                source.provider,
                &secrets,
                source.tolerance_secs,
            )?;
            source.validate_provider_keys()?;
            if let Some(money_from) = source.money_from {
                built = built.with_money_from(money_from);
            }
            match source.expect_delivery_within_secs {
                Some(0) => bail!(
                    "source {}: expect_delivery_within_secs must be positive",
                    source.name
                ),
                Some(secs) => built = built.with_expected_within(secs),
                None => {}
            }
            if source.provider == Provider::Stripe {
                built = built.with_stripe(StripeRules {
                    livemode: source.livemode.unwrap_or(false),
                    connect: source.connect.unwrap_or_default(),
                });
            }
            sources.push(built);
        }
        Ok(Sources::new(sources)?)
    }

    /// The provider APIs workers call (each Stripe source's client, its key read from
    /// `api_key_env` now).
    pub fn provider_apis(&self) -> anyhow::Result<ProviderApis> {
        let (mut stripe, mut reports) = (Vec::new(), Vec::new());
        for source in &self.sources {
            if let Some(api) = source.stripe_api()? {
                stripe.push(api);
            }
            if let Some(settings) = source.adyen_reports()? {
                reports.push(settings);
            }
        }
        Ok(ProviderApis::new(stripe, reports)?)
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
mod tests {
    use super::*;

    #[test]
    fn a_minimal_file_gets_defaults() {
        let config = Config::from_toml(
            r#"
            [[sources]]
            name = "std"
            provider = "standard"
            secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
            "#,
        )
        .expect("config");
        assert_eq!(config.listen.port(), 8080);
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(config.body_bytes_max, 256 * 1024);
        assert_eq!(config.sources[0].tolerance_secs, 300);
        assert!(!format!("{config:?}").contains("MfKQ9r8"));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        for (text, reason) in [
            ("lisen = \"x\"", "unknown field"),
            (
                "[[sources]]\nname = \"Bad Name\"\nprovider = \"standard\"",
                "source name",
            ),
            (
                "[[sources]]\nname = \"s\"\nprovider = \"paypal\"",
                "unknown variant",
            ),
            (
                "[[sources]]\nname = \"s\"\nprovider = \"standard\"",
                "at least one secret",
            ),
            ("database_url = \"mysql://x\"", "database URL"),
            (
                "[[sources]]\nname = \"a\"\nprovider = \"adyen\"\nsecrets = [\"00ff\"]\nreport_user = \"u\"\nreport_password = \"p\"",
                "money_from is not \"reports\"",
            ),
            (
                "[[sources]]\nname = \"a\"\nprovider = \"adyen\"\nsecrets = [\"00ff\"]\nmoney_from = \"reports\"\nreport_user = \"u\"",
                "one of report_password",
            ),
            (
                "[[sources]]\nname = \"a\"\nprovider = \"adyen\"\nsecrets = [\"00ff\"]\nmoney_from = \"reports\"",
                "needs report credentials",
            ),
            (
                "[[sources]]\nname = \"a\"\nprovider = \"adyen\"\nsecrets = [\"00ff\"]\nreport_hosts = [\"https://x/path\"]",
                "report_hosts entry",
            ),
            (
                "[[sources]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nmoney_from = \"reports\"",
                "provider = \"adyen\" sources only",
            ),
        ] {
            let error = format!("{:#}", Config::from_toml(text).expect_err(text));
            assert!(error.contains(reason), "{text}: {error}");
        }
    }
}
