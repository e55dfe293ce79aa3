//! `settle token new`: a fresh API token, shown once, and the configuration lines holding only
//! its hash.

use super::TokenRole;

/// A fresh token (32 random bytes, URL-safe base64) and the `[[tokens]]` lines holding only its
/// SHA-256: the token is shown once and stored nowhere.
pub(super) fn new_token(role: TokenRole, name: &str) -> anyhow::Result<String> {
    let name = name.trim();
    anyhow::ensure!(
        !name.is_empty() && !name.contains(['"', '\\', '\n']),
        "--name must be a non-empty plain name"
    );
    let role = match role {
        TokenRole::Ops => "ops",
        TokenRole::Finance => "finance",
    };
    let (token, hash) = fresh_token();
    Ok(format!(
        "A new {role} token for {name}. Give it to {name}; it is shown only now:\n\n  {token}\n\n\
         Add these lines to settle.toml (they hold only its hash):\n\n\
         [[tokens]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n"
    ))
}

/// A fresh token (32 random bytes, URL-safe base64, `stl_` first) and its SHA-256 in hex.
pub(super) fn fresh_token() -> (String, String) {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    let token = format!(
        "stl_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hash = crate::auth::token_sha256(&token);
    (token, hash)
}
