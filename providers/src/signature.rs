//! What every provider's signature check shares: keys never printed, HMAC-SHA256 compared in
//! constant time after a length check, a timestamp tolerance that holds both ways, and headers
//! read as text.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::config::{Section, SectionError};

/// A key derived from a secret the way the provider derives it. Never printed.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl SigningKey {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(<redacted>)")
    }
}

/// The fewest bytes a signing key may have: shorter ones can be guessed offline from one signed
/// delivery.
pub const KEY_BYTES_MIN: usize = 16;

/// Secrets published as examples (the Standard Webhooks documentation's, which examples copy):
/// anyone can sign with them.
const PUBLISHED_SECRETS: &[&str] = &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"];

/// Each of a source's secrets as a key, derived the provider's way (`derive` says why a secret
/// is not one). Several secrets allow rotation; none is an error. A published example secret,
/// or one whose key is shorter than [`KEY_BYTES_MIN`] bytes, is refused.
pub(crate) fn signing_keys(
    section: &Section<'_>,
    provider: &str,
    derive: fn(&str) -> Result<SigningKey, &'static str>,
) -> Result<Vec<SigningKey>, SectionError> {
    if section.secrets.is_empty() {
        return Err(SectionError::key(
            "secrets",
            "at least one secret is required",
        ));
    }
    section
        .secrets
        .iter()
        .enumerate()
        .map(|(index, secret)| {
            if PUBLISHED_SECRETS.contains(&secret.expose()) {
                return Err(SectionError::secret(
                    index,
                    provider,
                    "a published example secret: anyone can sign with it; use your own",
                ));
            }
            let key = derive(secret.expose())
                .map_err(|why| SectionError::secret(index, provider, why))?;
            if key.bytes().len() < KEY_BYTES_MIN {
                return Err(SectionError::secret(
                    index,
                    provider,
                    "shorter than 16 bytes: too easily guessed",
                ));
            }
            Ok(key)
        })
        .collect()
}

/// A header's value as text; absent or not visible ASCII counts as missing.
pub(crate) fn header<'h>(
    headers: &'h HeaderMap,
    name: &'static str,
) -> Result<&'h str, SignatureError> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .ok_or(SignatureError::Missing(name))
}

/// Why a delivery is not authentic. Messages say which rule failed, never what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing signature header {0}")]
    Missing(&'static str),
    #[error("signature header {0} is malformed")]
    Malformed(&'static str),
    #[error("no signature matches any active secret")]
    Mismatch,
    #[error("signature timestamp is outside the tolerance window")]
    OutOfTolerance,
    /// A signed field is not of the form the provider documents for it, so its signature
    /// could vouch for more than one reading of the fields.
    #[error("signed field {0} is not of the provider's documented form")]
    FieldForm(&'static str),
}

impl SignatureError {
    pub fn code(&self) -> &'static str {
        match self {
            SignatureError::Missing(_) => "missing_signature",
            SignatureError::Malformed(_)
            | SignatureError::Mismatch
            | SignatureError::FieldForm(_) => "invalid_signature",
            SignatureError::OutOfTolerance => "timestamp_out_of_tolerance",
        }
    }
}

/// Whether any candidate tag is the HMAC-SHA256 of `parts` (concatenated) under any key.
/// Each comparison checks the length first (an empty tag never matches) and then compares in
/// constant time.
pub(crate) fn any_matches(keys: &[SigningKey], parts: &[&[u8]], candidates: &[Vec<u8>]) -> bool {
    let mut matched = false;
    for key in keys {
        let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key.bytes()) else {
            continue;
        };
        for part in parts {
            mac.update(part);
        }
        for candidate in candidates {
            // No early exit: the time taken does not depend on which key or candidate matched.
            matched |= mac.clone().verify_slice(candidate).is_ok();
        }
    }
    matched
}

/// A signed timestamp must be within `tolerance_secs` of now, in the past or the future.
pub(crate) fn check_tolerance(
    timestamp: i64,
    now: i64,
    tolerance_secs: u64,
) -> Result<(), SignatureError> {
    let skew = now.abs_diff(timestamp);
    if skew > tolerance_secs {
        Err(SignatureError::OutOfTolerance)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every provider's secrets go through one gate: a published example and a key under 16
    /// bytes are refused, naming the secret by its place only.
    #[test]
    fn weak_secrets_are_refused_whatever_the_provider() {
        let source = ledger::SourceName::parse("s").expect("name");
        let keys = serde_json::Map::new();
        let as_bytes = |secret: &str| Ok(SigningKey::new(secret.as_bytes().to_vec()));
        let keys_of = |secret: &str| {
            let secrets = [crate::config::Secret::new(secret)];
            let section = Section {
                source: &source,
                secrets: &secrets,
                tolerance_secs: 300,
                keys: &keys,
            };
            signing_keys(&section, "any", as_bytes).map(|keys| keys.len())
        };
        assert_eq!(keys_of("a-secret-of-sixteen-bytes-or-more"), Ok(1));
        for (secret, why) in [
            ("whsec_short", "shorter than 16 bytes"),
            (PUBLISHED_SECRETS[0], "a published example secret"),
        ] {
            let error = keys_of(secret).expect_err(secret);
            assert!(error.message.contains(why), "{error}");
            assert!(!error.message.contains(secret), "{error}");
        }
    }

    #[test]
    fn tolerance_holds_both_ways() {
        assert!(check_tolerance(1000, 1000, 300).is_ok());
        assert!(check_tolerance(700, 1000, 300).is_ok());
        assert!(check_tolerance(1300, 1000, 300).is_ok());
        assert_eq!(
            check_tolerance(699, 1000, 300),
            Err(SignatureError::OutOfTolerance)
        );
        assert_eq!(
            check_tolerance(1301, 1000, 300),
            Err(SignatureError::OutOfTolerance)
        );
        assert_eq!(
            check_tolerance(i64::MIN, 1000, 300),
            Err(SignatureError::OutOfTolerance)
        );
    }

    #[test]
    fn empty_and_truncated_tags_never_match() {
        let key = SigningKey::new(b"key".to_vec());
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"key").expect("mac");
        mac.update(b"msg");
        let tag = mac.finalize().into_bytes().to_vec();
        assert!(any_matches(
            std::slice::from_ref(&key),
            &[b"msg"],
            std::slice::from_ref(&tag)
        ));
        assert!(any_matches(
            std::slice::from_ref(&key),
            &[b"m", b"sg"],
            std::slice::from_ref(&tag)
        ));
        assert!(!any_matches(
            std::slice::from_ref(&key),
            &[b"msg"],
            &[Vec::new()]
        ));
        assert!(!any_matches(
            std::slice::from_ref(&key),
            &[b"msg"],
            &[tag[..31].to_vec()]
        ));
        assert!(!any_matches(std::slice::from_ref(&key), &[b"msh"], &[tag]));
    }
}
