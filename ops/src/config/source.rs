//! One `[[sources]]` table of the configuration.

use ledger::SourceName;
use ledger::posting::AccountOverrides;
use providers::{KeyKind, Provider, Secret};
use serde::{Deserialize, Serialize};

use super::default_tolerance_secs;
use super::errors;

/// One `[[sources]]` table: the keys every source has, and its provider's own (read and
/// checked by the provider's module, `providers::<name>`).
#[derive(Debug, Clone, Deserialize)]
pub struct SourceConfig {
    pub name: SourceName,
    /// A registered provider's name (`providers::PROVIDERS`).
    pub provider: String,
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
    /// Every other key of the table: the provider's own ([`Provider::keys`]).
    #[serde(flatten)]
    pub keys: serde_json::Map<String, serde_json::Value>,
}

/// The table as printed: the provider's secrets redacted.
impl Serialize for SourceConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            name: &'a SourceName,
            provider: &'a str,
            secrets: &'a [Secret],
            secrets_env: &'a Option<String>,
            tolerance_secs: u64,
            expect_delivery_within_secs: Option<u64>,
            payload_days: Option<u32>,
            accounts: &'a AccountOverrides,
            #[serde(flatten)]
            keys: serde_json::Map<String, serde_json::Value>,
        }
        let declared = providers::find(&self.provider).map_or(&[][..], |p| p.keys());
        // A key the provider does not declare is refused at load; printed anyway, it is
        // redacted too.
        let mut keys = providers::config::redacted(&self.keys, declared);
        for (name, value) in keys.iter_mut() {
            if !declared.iter().any(|key| key.name == name) {
                *value = serde_json::Value::String(providers::config::REDACTED.to_owned());
            }
        }
        Shown {
            name: &self.name,
            provider: &self.provider,
            secrets: &self.secrets,
            secrets_env: &self.secrets_env,
            tolerance_secs: self.tolerance_secs,
            expect_delivery_within_secs: self.expect_delivery_within_secs,
            payload_days: self.payload_days,
            accounts: &self.accounts,
            keys,
        }
        .serialize(serializer)
    }
}

/// Why a source's table was refused: which source, which key (for its line), and why.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.sentence())]
pub struct SourceConfigError {
    pub index: usize,
    pub source_name: SourceName,
    pub key: Option<String>,
    pub message: String,
}

impl SourceConfigError {
    fn sentence(&self) -> String {
        match &self.key {
            Some(key) => format!(
                "source {}, `sources.{}.{key}`: {}",
                self.source_name, self.index, self.message
            ),
            None => format!("source {}: {}", self.source_name, self.message),
        }
    }
}

impl SourceConfig {
    /// Its provider, or why there is none.
    pub(super) fn provider(&self) -> Result<&'static dyn Provider, String> {
        providers::find(&self.provider).ok_or_else(|| {
            format!(
                "unknown provider {:?}; settle knows: {}",
                self.provider,
                providers::names().join(", ")
            )
        })
    }

    /// A key its provider does not read, with what it may have meant.
    pub(super) fn unknown_key(&self, provider: &dyn Provider) -> Option<(String, String)> {
        let key = self
            .keys
            .keys()
            .find(|key| !provider.keys().iter().any(|k| k.name == key.as_str()))?;
        let owners: Vec<String> = providers::PROVIDERS
            .iter()
            .filter(|other| other.keys().iter().any(|k| k.name == key.as_str()))
            .map(|other| format!("provider = \"{}\"", other.name()))
            .collect();
        let hint = if !owners.is_empty() {
            format!("a setting of {} sources only", owners.join(" or "))
        } else {
            let known = provider.keys().iter().map(|k| k.name).chain([
                "name",
                "provider",
                "secrets",
                "secrets_env",
                "tolerance_secs",
                "expect_delivery_within_secs",
                "payload_days",
                "accounts",
            ]);
            match errors::closest(key, known) {
                Some(close) => format!("not a setting of a source (did you mean `{close}`?)"),
                None => "not a setting of a source".to_owned(),
            }
        };
        Some((key.clone(), format!("unknown key: {hint}")))
    }

    /// The environment variables its provider's keys name (they hold secrets, not settings).
    pub(super) fn variables(&self) -> Vec<&str> {
        let Ok(provider) = self.provider() else {
            return Vec::new();
        };
        provider
            .keys()
            .iter()
            .filter(|key| key.kind == KeyKind::Variable)
            .filter_map(|key| self.keys.get(key.name)?.as_str())
            .chain(self.secrets_env.as_deref())
            .collect()
    }

    /// The secrets of `secrets` and `secrets_env`.
    pub(super) fn secrets(&self) -> Result<Vec<Secret>, String> {
        let mut secrets = self.secrets.clone();
        if let Some(var) = &self.secrets_env {
            let value =
                std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))?;
            secrets.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(Secret::new),
            );
        }
        Ok(secrets)
    }
}
