//! Identities: what a source is called, what a provider calls its event and its money movement,
//! and what settle calls the rows it keeps.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// The longest provider identifier settle keeps (event ids, movement ids, references).
pub const PROVIDER_ID_BYTES_MAX: usize = 255;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error(
        "source name {0:?} must be 1-64 of a-z, 0-9, '-', '_' and start with a letter or digit"
    )]
    SourceName(String),
    #[error("{what} must be 1-{PROVIDER_ID_BYTES_MAX} bytes without control characters")]
    ProviderId { what: &'static str },
}

/// The name a webhook source is configured and addressed by (`POST /webhooks/{name}`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SourceName(String);

impl SourceName {
    pub fn parse(name: &str) -> Result<Self, IdError> {
        let ok = (1..=64).contains(&name.len())
            && name.bytes().enumerate().all(|(i, b)| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || (i > 0 && (b == b'-' || b == b'_'))
            });
        if ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(IdError::SourceName(name.chars().take(70).collect()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SourceName({})", self.0)
    }
}

impl<'de> Deserialize<'de> for SourceName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        SourceName::parse(&name).map_err(serde::de::Error::custom)
    }
}

fn provider_id(text: &str, what: &'static str) -> Result<String, IdError> {
    if (1..=PROVIDER_ID_BYTES_MAX).contains(&text.len()) && !text.chars().any(char::is_control) {
        Ok(text.to_owned())
    } else {
        Err(IdError::ProviderId { what })
    }
}

macro_rules! provider_id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize)]
        pub struct $name(String);

        impl $name {
            pub fn parse(text: &str) -> Result<Self, IdError> {
                provider_id(text, $what).map(Self)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                $name::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

provider_id_type!(
    /// The provider's identity of one event (its event id, a Standard Webhooks `webhook-id`, a
    /// notification item's code and reference). With the source it is the event's natural key.
    ExternalId,
    "external id"
);
provider_id_type!(
    /// The provider's identity of the money movement an event describes (payout, refund,
    /// dispute or charge id; the canonical `movement_id`).
    MovementId,
    "movement id"
);
provider_id_type!(
    /// The provider's payout identity, tying settled items to the payout that paid them out.
    PayoutId,
    "payout id"
);
provider_id_type!(
    /// A free reference the provider carries (an order number, a merchant reference).
    Reference,
    "reference"
);

macro_rules! row_id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(i64);

        impl $name {
            pub fn new(id: i64) -> Self {
                Self(id)
            }

            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

row_id_type!(
    /// A row of `settlement_events`.
    EventId
);
row_id_type!(
    /// A row of `event_conflicts`.
    ConflictId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names() {
        for good in ["cards", "bank-eu", "s3", "std_1"] {
            assert!(SourceName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "Cards", "-x", "_x", "a b", "a/b", "ä", &"x".repeat(65)] {
            assert!(SourceName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn provider_ids() {
        assert!(ExternalId::parse("evt_1").is_ok());
        assert!(ExternalId::parse("CAPTURE:8815").is_ok());
        assert!(ExternalId::parse("").is_err());
        assert!(ExternalId::parse("a\nb").is_err());
        assert!(ExternalId::parse(&"x".repeat(256)).is_err());
        assert!(MovementId::parse(&"x".repeat(255)).is_ok());
    }
}
