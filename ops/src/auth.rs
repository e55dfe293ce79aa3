//! Bearer tokens for the ops/finance API: configured as SHA-256 hashes, never stored or logged in
//! clear. `finance` reads; `ops` reads and acts.

use sha2::{Digest, Sha256};

use serde::Deserialize;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads and acts (requeue, discard, resolve, erase, pause).
    Ops,
    /// Reads, and corrects the journal (reversals and corrections).
    Finance,
}

impl Role {
    pub fn may_act(self) -> bool {
        self == Role::Ops
    }

    /// Whether the role may reverse and correct journal entries.
    pub fn may_correct(self) -> bool {
        self == Role::Finance
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Ops => "ops",
            Role::Finance => "finance",
        }
    }
}

/// One configured token: `[[tokens]] name, role, token_sha256`.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub name: String,
    pub role: Role,
    /// Lower-case hex SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
    pub token_sha256: String,
}

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
    /// Which token it presented ([`token_tag`]): a session is bound to it.
    pub token_tag: String,
}

/// What identifies a configured token beyond its name, without being its configured hash: the
/// hex SHA-256 of `settle-session-token:` and that hash. A token replaced under the same name
/// has another tag.
fn token_tag(hash: &[u8; 32]) -> String {
    let mut digest = Sha256::new();
    digest.update(b"settle-session-token:");
    digest.update(hash);
    hex::encode(digest.finalize())
}

/// The configured tokens, checked at load.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    tokens: Vec<([u8; 32], Caller)>,
}

impl Tokens {
    pub fn new(configs: &[TokenConfig]) -> Result<Tokens, String> {
        let mut tokens = Vec::with_capacity(configs.len());
        for config in configs {
            if config.name.trim().is_empty() {
                return Err("tokens: every token needs a name".into());
            }
            let mut hash = [0u8; 32];
            hex::decode_to_slice(config.token_sha256.to_ascii_lowercase(), &mut hash).map_err(
                |_| format!("token {}: token_sha256 must be 64 hex digits", config.name),
            )?;
            if tokens
                .iter()
                .any(|(_, caller): &([u8; 32], Caller)| caller.name == config.name)
            {
                return Err(format!("token {} is configured twice", config.name));
            }
            tokens.push((
                hash,
                Caller {
                    name: config.name.clone(),
                    role: config.role,
                    token_tag: token_tag(&hash),
                },
            ));
        }
        Ok(Tokens { tokens })
    }

    /// The caller a presented token belongs to. Every configured hash is compared, each in
    /// constant time, whatever matches.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (hash, caller) in &self.tokens {
            let difference = hash
                .iter()
                .zip(presented.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if difference == 0 && found.is_none() {
                found = Some(caller.clone());
            }
        }
        found
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The caller the configured token with this tag ([`Caller::token_tag`]) stands for, if
    /// it is still configured.
    pub fn tagged(&self, tag: &str) -> Option<Caller> {
        self.tokens
            .iter()
            .map(|(_, caller)| caller)
            .find(|caller| !tag.is_empty() && caller.token_tag == tag)
            .cloned()
    }
}

/// The hex SHA-256 of a token, as configured.
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_by_hash_only() {
        let configs = [
            TokenConfig {
                name: "alice".into(),
                role: Role::Ops,
                token_sha256: token_sha256("a-secret"),
            },
            TokenConfig {
                name: "bob".into(),
                role: Role::Finance,
                token_sha256: token_sha256("b-secret").to_uppercase(),
            },
        ];
        let tokens = Tokens::new(&configs).expect("tokens");
        assert_eq!(
            tokens.caller("a-secret").map(|c| (c.name, c.role)),
            Some(("alice".into(), Role::Ops))
        );
        assert_eq!(
            tokens.caller("b-secret").map(|c| c.role),
            Some(Role::Finance)
        );
        assert_eq!(tokens.caller("a-secre"), None);
        let alice = tokens.caller("a-secret").expect("alice");
        assert_eq!(tokens.tagged(&alice.token_tag), Some(alice.clone()));
        assert_ne!(
            alice.token_tag,
            token_sha256("a-secret"),
            "not the configured hash"
        );
        let replaced = Tokens::new(&[TokenConfig {
            name: "alice".into(),
            role: Role::Ops,
            token_sha256: token_sha256("a-new-secret"),
        }])
        .expect("tokens");
        assert_eq!(
            replaced.tagged(&alice.token_tag),
            None,
            "another token, same name"
        );
        assert_eq!(tokens.tagged(""), None);
        assert_eq!(tokens.caller(""), None);
        assert!(
            Tokens::new(&[TokenConfig {
                name: "x".into(),
                role: Role::Ops,
                token_sha256: "abc".into()
            }])
            .is_err()
        );
    }
}
