//! Configured webhook sources: a name, a provider, its signing keys, its tolerance.

use std::collections::HashMap;
use std::fmt;

use base64::Engine;
use ledger::SourceName;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A secret as configured (`whsec_...`, an Adyen HMAC key). Its Debug and Display never print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The secret itself, for the one place that derives a key from it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Serialized as `<redacted>`: a configuration printed back never shows a secret.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// Which provider's signing scheme and payload shape a source speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// The canonical settlement schema, signed with Standard Webhooks (Svix-compatible).
    Standard,
    /// Stripe events, signed with `Stripe-Signature`.
    Stripe,
    /// Adyen classic notifications, each item signed with its `hmacSignature`.
    Adyen,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Standard => "standard",
            Provider::Stripe => "stripe",
            Provider::Adyen => "adyen",
        }
    }
}

/// A key derived from a secret the way the provider derives it. Never printed.
#[derive(Clone)]
pub(crate) struct SigningKey(Vec<u8>);

impl SigningKey {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    #[cfg(test)]
    pub(crate) fn for_tests(key: &[u8]) -> Self {
        Self(key.to_vec())
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(<redacted>)")
    }
}

/// Why a source's configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("source {source_name}: secret #{index} is not a valid {provider} secret ({why})")]
    BadSecret {
        source_name: SourceName,
        provider: &'static str,
        index: usize,
        why: &'static str,
    },
    #[error("source {0}: at least one secret is required")]
    NoSecrets(SourceName),
    #[error("source {0} is configured twice")]
    Duplicate(SourceName),
}

/// What a Stripe source records: events of its own mode only, and events of connected
/// accounts only when it posts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StripeRules {
    /// The mode of the account's key: live events at a live source, test events at a test one.
    pub livemode: bool,
    pub connect: Connect,
}

/// What a Stripe source does with events of connected accounts (`event.account`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Connect {
    /// Acknowledged and counted, never recorded: a connected account's money is not the
    /// platform's.
    #[default]
    Ignore,
    /// Recorded and posted to accounts namespaced by the connected account.
    Post,
}

/// Where an Adyen source's money comes from: exactly one of the two, so nothing is booked twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MoneyFrom {
    /// `CAPTURE`, `REFUND`, `CHARGEBACK`... post their amounts (no fees, the shopper's
    /// currency); `REPORT_AVAILABLE` is acknowledged and not recorded.
    #[default]
    Notifications,
    /// Settlement details reports post every line (fees, settlement currency, payouts); the
    /// money notifications are acknowledged and not recorded.
    Reports,
}

/// One configured source, with its keys derived and checked.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: SourceName,
    pub provider: Provider,
    pub tolerance_secs: u64,
    pub(crate) keys: Vec<SigningKey>,
    /// For `provider = "stripe"`.
    pub stripe: Option<StripeRules>,
    /// For `provider = "adyen"`.
    pub money_from: MoneyFrom,
    /// The longest this source is expected to go without a delivery, if one is expected (for
    /// the shipped alert on a silent source).
    pub expected_within_secs: Option<u64>,
}

impl Source {
    /// Derives each secret's key as the provider does; several secrets allow rotation.
    pub fn new(
        name: SourceName,
        provider: Provider,
        secrets: &[Secret],
        tolerance_secs: u64,
    ) -> Result<Self, SourceError> {
        if secrets.is_empty() {
            return Err(SourceError::NoSecrets(name));
        }
        let mut keys = Vec::with_capacity(secrets.len());
        for (index, secret) in secrets.iter().enumerate() {
            let key =
                derive_key(provider, secret.expose()).map_err(|why| SourceError::BadSecret {
                    source_name: name.clone(),
                    provider: provider.as_str(),
                    index,
                    why,
                })?;
            keys.push(key);
        }
        Ok(Self {
            name,
            provider,
            tolerance_secs,
            keys,
            stripe: None,
            money_from: MoneyFrom::default(),
            expected_within_secs: None,
        })
    }

    /// An Adyen source's money: from its notifications or from its settlement details reports.
    pub fn with_money_from(mut self, money_from: MoneyFrom) -> Self {
        self.money_from = money_from;
        self
    }

    /// A delivery is expected at least every `secs` seconds.
    pub fn with_expected_within(mut self, secs: u64) -> Self {
        self.expected_within_secs = Some(secs);
        self
    }

    /// A Stripe source's mode and Connect rule.
    pub fn with_stripe(mut self, rules: StripeRules) -> Self {
        self.stripe = Some(rules);
        self
    }
}

fn derive_key(provider: Provider, secret: &str) -> Result<SigningKey, &'static str> {
    match provider {
        // Standard Webhooks: base64 after an optional `whsec_` prefix.
        Provider::Standard => {
            let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
            let key = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|_| "expected whsec_ followed by base64")?;
            if key.is_empty() {
                return Err("empty key");
            }
            Ok(SigningKey(key))
        }
        // Stripe: the UTF-8 bytes of the whole `whsec_...` string.
        Provider::Stripe => {
            if secret.is_empty() {
                return Err("empty secret");
            }
            Ok(SigningKey(secret.as_bytes().to_vec()))
        }
        // Adyen: the HMAC key as hex (from the Customer Area), decoded.
        Provider::Adyen => {
            let key = hex::decode(secret).map_err(|_| "expected the HMAC key as hex")?;
            if key.is_empty() {
                return Err("empty key");
            }
            Ok(SigningKey(key))
        }
    }
}

/// The configured sources by name.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    by_name: HashMap<String, Source>,
}

impl Sources {
    pub fn new(sources: Vec<Source>) -> Result<Self, SourceError> {
        let mut by_name = HashMap::with_capacity(sources.len());
        for source in sources {
            let name = source.name.clone();
            if by_name.insert(name.as_str().to_owned(), source).is_some() {
                return Err(SourceError::Duplicate(name));
            }
        }
        Ok(Self { by_name })
    }

    pub fn get(&self, name: &str) -> Option<&Source> {
        self.by_name.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Source> {
        self.by_name.values()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert!(!format!("{secret:?}").contains("MfKQ"));
        let name = SourceName::parse("std").expect("name");
        let source = Source::new(name, Provider::Standard, &[secret], 300).expect("source");
        assert!(!format!("{source:?}").contains("MfKQ"));
    }

    #[test]
    fn bad_standard_secrets_are_refused() {
        let name = SourceName::parse("std").expect("name");
        for bad in ["whsec_!!!", "whsec_", ""] {
            let error = Source::new(name.clone(), Provider::Standard, &[Secret::new(bad)], 300);
            assert!(error.is_err(), "{bad}");
        }
        assert!(Source::new(name, Provider::Standard, &[], 300).is_err());
    }
}
