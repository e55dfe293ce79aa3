//! A source's configuration as a provider reads it: the keys every source has are settle's, the
//! rest of its `[[sources]]` table is the provider's ([`Provider::keys`](crate::Provider::keys)),
//! read here by name so that every error names the key it is about.

use std::fmt;

use ledger::SourceName;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// One key a provider reads in its sources' tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub name: &'static str,
    pub kind: KeyKind,
}

/// What a key holds, for printing the configuration and reading the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// A setting, printed as it is.
    Plain,
    /// A secret (a password, an API key): printed as `<redacted>`.
    Secret,
    /// The name of an environment variable that holds a secret: not itself a `SETTLE_*`
    /// setting, even when its name starts so.
    Variable,
}

impl Key {
    pub const fn plain(name: &'static str) -> Self {
        Self {
            name,
            kind: KeyKind::Plain,
        }
    }

    pub const fn secret(name: &'static str) -> Self {
        Self {
            name,
            kind: KeyKind::Secret,
        }
    }

    pub const fn variable(name: &'static str) -> Self {
        Self {
            name,
            kind: KeyKind::Variable,
        }
    }
}

/// A secret as configured (a webhook signing secret, an HMAC key, an API key or password). Its
/// Debug and Display never print it, and it serializes as `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// What a secret is printed as.
pub const REDACTED: &str = "<redacted>";

/// One configured source, as its provider reads it.
#[derive(Clone, Copy, Debug)]
pub struct Section<'a> {
    pub source: &'a SourceName,
    /// The webhook secrets (`secrets`, and those of `secrets_env`), in order.
    pub secrets: &'a [Secret],
    /// How far a signed timestamp may be from now, either way.
    pub tolerance_secs: u64,
    /// The provider's own keys as configured (the table's other keys are settle's).
    pub keys: &'a Map<String, Value>,
}

impl Section<'_> {
    /// The value of `key`, if set; a value of the wrong type is an error naming the key.
    pub fn get<T: DeserializeOwned>(&self, key: &'static str) -> Result<Option<T>, SectionError> {
        match self.keys.get(key) {
            None => Ok(None),
            Some(value) => serde_json::from_value(value.clone())
                .map(Some)
                .map_err(|error| SectionError::key(key, without_value(&error.to_string()))),
        }
    }

    pub fn is_set(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// A secret given inline (`inline`, a [`KeyKind::Secret`]) or in the environment variable
    /// `variable` names; `None` when neither key is set.
    pub fn secret_or_variable(
        &self,
        inline: &'static str,
        variable: &'static str,
    ) -> Result<Option<String>, SectionError> {
        if let Some(secret) = self.get::<Secret>(inline)? {
            return Ok(Some(secret.expose().trim().to_owned()));
        }
        let Some(name) = self.get::<String>(variable)? else {
            return Ok(None);
        };
        std::env::var(&name)
            .ok()
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
            .map(Some)
            .ok_or_else(|| {
                SectionError::key(
                    variable,
                    format!("environment variable {name} ({variable}) is not set"),
                )
            })
    }
}

/// A deserializer's message without the value it was given (`invalid type: string "…",
/// expected …`): the key may hold a secret, and errors are printed and logged.
fn without_value(message: &str) -> String {
    match message.rsplit_once(", expected ") {
        Some((_, expected)) => format!("wrong type or value: expected {expected}"),
        None => message.to_owned(),
    }
}

/// Why a source's configuration was refused: a sentence, and the key it is about (whose line
/// the configuration's error names).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SectionError {
    pub key: Option<&'static str>,
    pub message: String,
}

impl SectionError {
    /// About one key.
    pub fn key(key: &'static str, message: impl Into<String>) -> Self {
        Self {
            key: Some(key),
            message: message.into(),
        }
    }

    /// About the secrets.
    pub fn secret(index: usize, provider: &str, why: &str) -> Self {
        Self {
            key: Some("secrets"),
            message: format!("secret #{index} is not a valid {provider} secret ({why})"),
        }
    }

    /// About the source as a whole.
    pub fn source(message: impl Into<String>) -> Self {
        Self {
            key: None,
            message: message.into(),
        }
    }
}

/// The provider's keys of a table, the secrets among them redacted (for printing).
pub fn redacted(keys: &Map<String, Value>, declared: &[Key]) -> Map<String, Value> {
    keys.iter()
        .map(|(name, value)| {
            let secret = declared
                .iter()
                .any(|key| key.name == name && key.kind == KeyKind::Secret);
            let value = match secret {
                true => Value::String(REDACTED.to_owned()),
                false => value.clone(),
            };
            (name.clone(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_never_print_and_keys_are_read_by_name() {
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert!(!format!("{secret:?}").contains("MfKQ"));
        assert_eq!(
            serde_json::to_value(&secret).expect("json"),
            json!("<redacted>")
        );
        let source = SourceName::parse("s").expect("name");
        let keys = json!({"flag": "no", "api_key": "k_1", "limit": 3})
            .as_object()
            .cloned()
            .expect("object");
        let section = Section {
            source: &source,
            secrets: &[],
            tolerance_secs: 300,
            keys: &keys,
        };
        assert_eq!(section.get::<u32>("limit"), Ok(Some(3)));
        assert_eq!(section.get::<u32>("absent"), Ok(None));
        let error = section.get::<bool>("flag").expect_err("not a boolean");
        assert_eq!(error.key, Some("flag"));
        assert!(error.message.contains("expected a boolean"), "{error}");
        let error = section.get::<u32>("api_key").expect_err("not a number");
        assert!(!error.message.contains("k_1"), "no value printed: {error}");
        assert_eq!(
            section.secret_or_variable("api_key", "api_key_env"),
            Ok(Some("k_1".to_owned()))
        );
        let shown = redacted(&keys, &[Key::secret("api_key"), Key::plain("limit")]);
        assert_eq!(shown["api_key"], "<redacted>");
        assert_eq!(shown["limit"], 3);
    }
}
