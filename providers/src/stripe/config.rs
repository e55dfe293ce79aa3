//! A Stripe source's own keys (README.md, "Connecting Stripe"), read and checked.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Key, Section, SectionError};
use crate::seam::FeedSettings;

/// Every key a Stripe source's table may hold beside settle's own.
pub(super) const KEYS: &[Key] = &[
    Key::plain("livemode"),
    Key::plain("connect"),
    Key::variable("api_key_env"),
    Key::secret("api_key"),
    Key::plain("api_base"),
    Key::plain("api_requests_per_sec"),
    Key::plain("api_endpoint_requests_per_sec"),
    Key::plain("api_connect_timeout_ms"),
    Key::plain("api_request_timeout_ms"),
    Key::plain("feed"),
    Key::plain("feed_every_secs"),
    Key::plain("feed_overlap_secs"),
];

/// Stripe's API, unless a source says otherwise.
pub const API_BASE: &str = "https://api.stripe.com";
/// The request budgets a source gets unless it sets one: Stripe's documented limits
/// (docs.stripe.com/rate-limits): per account 100 a second in live mode and 25 in test mode, and
/// 25 a second to any one endpoint.
const REQUESTS_PER_SEC_LIVE: u32 = 100;
const REQUESTS_PER_SEC_TEST: u32 = 25;
const ENDPOINT_REQUESTS_PER_SEC: u32 = 25;
/// The longest a source's feed waits between two sweeps when no webhook wakes it.
const FEED_EVERY_SECS: u64 = 60;
/// How far back each sweep reads again. Stripe does not publish how late a balance transaction
/// may appear in its listing after its `created` time; this covers a listing that lags by up to
/// this long.
const FEED_OVERLAP_SECS: u64 = 30;
const CONNECT_TIMEOUT_MS: u64 = 3_000;
const REQUEST_TIMEOUT_MS: u64 = 10_000;

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

/// How a worker reaches one Stripe source's API.
#[derive(Clone, Debug)]
pub struct ApiSettings {
    /// `https://api.stripe.com`, or a proxy's (or a test's) address.
    pub api_base: String,
    /// Requests per second the whole fleet may send for this source, in all and to any one
    /// endpoint.
    pub requests_per_sec: u32,
    pub endpoint_requests_per_sec: u32,
    /// Longest wait for a connection, and for a whole request (answer read included).
    pub connect_timeout_ms: u64,
    pub request_timeout_ms: u64,
}

/// How the source's feed is swept (`feed = false`: not at all, and each webhook's job fetches
/// what it names by id instead).
pub(super) fn feed(section: &Section<'_>) -> Result<Option<FeedSettings>, SectionError> {
    let seconds = |key: &'static str, default: u64, least: u64| -> Result<u64, SectionError> {
        match section.get::<u64>(key)? {
            Some(value) if value < least => Err(SectionError::key(
                key,
                format!("{key} must be at least {least}"),
            )),
            Some(value) => Ok(value),
            None => Ok(default),
        }
    };
    let every = seconds("feed_every_secs", FEED_EVERY_SECS, 1)?;
    let overlap = seconds("feed_overlap_secs", FEED_OVERLAP_SECS, 0)?;
    Ok(section
        .get::<bool>("feed")?
        .unwrap_or(true)
        .then_some(FeedSettings {
            every: Duration::from_secs(every),
            overlap: Duration::from_secs(overlap),
        }))
}

/// Reads and checks the source's rules (what the ingress needs) and the shape of its API
/// settings, without reading the key itself.
pub(super) fn rules(section: &Section<'_>) -> Result<StripeRules, SectionError> {
    let Some(livemode) = section.get::<bool>("livemode")? else {
        return Err(SectionError::key(
            "livemode",
            "livemode is required for a stripe source (true for a live-mode key, false for a test-mode key)",
        ));
    };
    if section.is_set("api_key_env") == section.is_set("api_key") {
        return Err(SectionError::key(
            "api_key_env",
            "a stripe source needs api_key_env (the environment variable holding a restricted, read-only API key) or api_key, not both",
        ));
    }
    api(section, livemode)?;
    feed(section)?;
    Ok(StripeRules {
        livemode,
        connect: section.get("connect")?.unwrap_or_default(),
    })
}

/// The API settings, defaults filled in.
pub(super) fn api(section: &Section<'_>, livemode: bool) -> Result<ApiSettings, SectionError> {
    let positive_u32 = |key: &'static str| -> Result<Option<u32>, SectionError> {
        match section.get::<u32>(key)? {
            Some(0) => Err(SectionError::key(
                key,
                "API request budgets must be positive",
            )),
            other => Ok(other),
        }
    };
    let positive_ms = |key: &'static str| -> Result<Option<u64>, SectionError> {
        match section.get::<u64>(key)? {
            Some(0) => Err(SectionError::key(key, "API timeouts must be positive")),
            other => Ok(other),
        }
    };
    let default_budget = match livemode {
        true => REQUESTS_PER_SEC_LIVE,
        false => REQUESTS_PER_SEC_TEST,
    };
    Ok(ApiSettings {
        api_base: section
            .get("api_base")?
            .unwrap_or_else(|| API_BASE.to_owned()),
        requests_per_sec: positive_u32("api_requests_per_sec")?.unwrap_or(default_budget),
        endpoint_requests_per_sec: positive_u32("api_endpoint_requests_per_sec")?
            .unwrap_or(ENDPOINT_REQUESTS_PER_SEC),
        connect_timeout_ms: positive_ms("api_connect_timeout_ms")?.unwrap_or(CONNECT_TIMEOUT_MS),
        request_timeout_ms: positive_ms("api_request_timeout_ms")?.unwrap_or(REQUEST_TIMEOUT_MS),
    })
}

#[cfg(test)]
mod tests {
    use ledger::SourceName;
    use serde_json::{Value, json};

    use super::*;

    fn check(keys: Value) -> Result<StripeRules, SectionError> {
        let source = SourceName::parse("stripe").expect("name");
        let keys = keys.as_object().cloned().expect("object");
        rules(&Section {
            source: &source,
            secrets: &[],
            tolerance_secs: 300,
            keys: &keys,
        })
    }

    #[test]
    fn rules_and_their_refusals_name_the_key() {
        assert_eq!(
            check(json!({"livemode": true, "api_key_env": "K", "connect": "post"})),
            Ok(StripeRules {
                livemode: true,
                connect: Connect::Post
            })
        );
        let refused = |keys: Value, key: &str, says: &str| {
            let error = check(keys).expect_err(says);
            assert_eq!(error.key, Some(key), "{error}");
            assert!(error.message.contains(says), "{error}");
        };
        refused(json!({"api_key_env": "K"}), "livemode", "livemode is required");
        refused(json!({"livemode": false}), "api_key_env", "api_key_env");
        refused(
            json!({"livemode": false, "api_key_env": "K", "api_key": "k"}),
            "api_key_env",
            "not both",
        );
        refused(
            json!({"livemode": "no", "api_key_env": "K"}),
            "livemode",
            "expected a boolean",
        );
        refused(
            json!({"livemode": false, "api_key_env": "K", "api_requests_per_sec": 0}),
            "api_requests_per_sec",
            "must be positive",
        );
        refused(
            json!({"livemode": false, "api_key_env": "K", "connect": "maybe"}),
            "connect",
            "expected `ignore` or `post`",
        );
    }
}
