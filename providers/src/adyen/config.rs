//! An Adyen source's own keys (README.md, `adyen`), read and checked.

use serde::{Deserialize, Serialize};

use super::download::{ReportAuth, ReportHost, ReportSettings};
use crate::config::{Key, Section, SectionError};

/// Every key an Adyen source's table may hold beside settle's own.
pub(super) const KEYS: &[Key] = &[
    Key::plain("money_from"),
    Key::plain("report_user"),
    Key::variable("report_user_env"),
    Key::secret("report_password"),
    Key::variable("report_password_env"),
    Key::secret("api_key"),
    Key::variable("api_key_env"),
    Key::plain("report_hosts"),
    Key::plain("report_bytes_max"),
    Key::plain("report_timeout_ms"),
    Key::plain("merchant_accounts"),
    Key::plain("feed_every_secs"),
];

/// The hosts Adyen serves reports from.
pub const REPORT_HOSTS: [&str; 2] = ["ca-live.adyen.com", "ca-test.adyen.com"];
/// A settlement details report is about 300 bytes a line: a million lines fit.
const REPORT_BYTES_MAX: u64 = 512 * 1024 * 1024;
const REPORT_TIMEOUT_MS: u64 = 300_000;
/// How often each merchant account's next batch is looked for when no notification came: a
/// batch closes at most a few times a day.
const FEED_EVERY_SECS: u64 = 900;

/// Where an Adyen source's money comes from: exactly one of the two, so nothing is booked twice.
/// A source with report credentials books from reports; one without them must choose
/// notifications explicitly (its books then hold gross amounts only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MoneyFrom {
    /// `CAPTURE`, `REFUND`, `CHARGEBACK`... post their amounts (no fees, the shopper's
    /// currency, no payouts); `REPORT_AVAILABLE` is acknowledged and not recorded.
    Notifications,
    /// Settlement details reports post every line (fees, settlement currency, payouts); the
    /// money notifications are acknowledged and not recorded.
    Reports,
}

/// What a source booking from notifications says at start, in `settle config check` and on
/// the dashboard.
pub const GROSS_ONLY: &str = "money_from = \"notifications\": the books hold the gross amounts Adyen's notifications carry only: no fees, no settlement currency, no payouts (set report credentials to book from settlement details reports)";

/// Reads and checks every key; answers where the money comes from.
pub(super) fn money_from(section: &Section<'_>) -> Result<MoneyFrom, SectionError> {
    let user = section.is_set("report_user") || section.is_set("report_user_env");
    let password = section.is_set("report_password") || section.is_set("report_password_env");
    let key = section.is_set("api_key") || section.is_set("api_key_env");
    if (user || password) && key {
        return Err(SectionError::key(
            "api_key_env",
            "report downloads authenticate with report_user_env and report_password_env, or with api_key_env, not both",
        ));
    }
    let both = |a: &str, b: &str| section.is_set(a) && section.is_set(b);
    if user != password
        || both("report_user", "report_user_env")
        || both("report_password", "report_password_env")
        || both("api_key", "api_key_env")
    {
        return Err(SectionError::key(
            "report_user",
            "a report user needs one of report_user / report_user_env and one of report_password / report_password_env",
        ));
    }
    hosts(section)?;
    for limit in ["report_bytes_max", "report_timeout_ms"] {
        if section.get::<u64>(limit)? == Some(0) {
            return Err(SectionError::key(limit, "report limits must be positive"));
        }
    }
    merchant_accounts(section)?;
    feed_every(section)?;
    match (section.get::<MoneyFrom>("money_from")?, user || key) {
        (None | Some(MoneyFrom::Reports), true) => Ok(MoneyFrom::Reports),
        (Some(MoneyFrom::Notifications), false) => Ok(MoneyFrom::Notifications),
        (Some(MoneyFrom::Notifications), true) => Err(SectionError::key(
            "money_from",
            "report credentials are set but money_from = \"notifications\": a source books from one of the two; remove money_from to book from the settlement details reports (fees, settlement currency, payouts)",
        )),
        (Some(MoneyFrom::Reports), false) => Err(SectionError::key(
            "money_from",
            "money_from = \"reports\" needs report credentials (report_user_env + report_password_env, or api_key_env) to download the reports",
        )),
        (None, false) => Err(SectionError::key(
            "money_from",
            "an Adyen source books from its settlement details reports, which need report credentials (report_user_env + report_password_env, or api_key_env); without them, say money_from = \"notifications\" and the books hold gross amounts only (no fees, settlement currency or payouts)",
        )),
    }
}

/// The merchant accounts a source books (`merchant_accounts`; unset: every one its
/// notifications name). Anything of another is acknowledged, counted and not booked.
pub(super) fn merchant_accounts(section: &Section<'_>) -> Result<Option<Vec<String>>, SectionError> {
    let Some(accounts) = section.get::<Vec<String>>("merchant_accounts")? else {
        return Ok(None);
    };
    if accounts.is_empty() || accounts.iter().any(|a| a.trim().is_empty()) {
        return Err(SectionError::key(
            "merchant_accounts",
            "merchant_accounts lists the merchant account codes to book; leave it out to book every one",
        ));
    }
    Ok(Some(accounts))
}

/// How long settle waits, at most, between two looks for the batches it has not booked
/// (`feed_every_secs`).
pub(super) fn feed_every(section: &Section<'_>) -> Result<std::time::Duration, SectionError> {
    match section.get::<u64>("feed_every_secs")? {
        Some(0) => Err(SectionError::key(
            "feed_every_secs",
            "feed_every_secs must be at least 1",
        )),
        every => Ok(std::time::Duration::from_secs(
            every.unwrap_or(FEED_EVERY_SECS),
        )),
    }
}

/// The hosts reports may be downloaded from: the source's, or Adyen's.
fn hosts(section: &Section<'_>) -> Result<Vec<ReportHost>, SectionError> {
    match section.get::<Vec<String>>("report_hosts")? {
        None => Ok(REPORT_HOSTS
            .iter()
            .filter_map(|h| ReportHost::parse(h))
            .collect()),
        Some(hosts) => hosts
            .iter()
            .map(|host| {
                ReportHost::parse(host).ok_or_else(|| {
                    SectionError::key(
                        "report_hosts",
                        format!(
                            "report_hosts entry {host:?} is not host[:port] or http(s)://host[:port]"
                        ),
                    )
                })
            })
            .collect(),
    }
}

/// How workers download the source's reports, the secrets read (from their variables); `None`
/// for a source without report credentials.
pub(super) fn reports(section: &Section<'_>) -> Result<Option<ReportSettings>, SectionError> {
    money_from(section)?;
    let user = section.secret_or_variable("report_user", "report_user_env")?;
    let password = section.secret_or_variable("report_password", "report_password_env")?;
    let key = section.secret_or_variable("api_key", "api_key_env")?;
    let auth = match (user, password, key) {
        (Some(user), Some(password), _) => ReportAuth::Basic { user, password },
        (_, _, Some(key)) => ReportAuth::ApiKey(key),
        _ => return Ok(None),
    };
    Ok(Some(ReportSettings {
        source: section.source.clone(),
        auth,
        hosts: hosts(section)?,
        bytes_max: section
            .get("report_bytes_max")?
            .unwrap_or(REPORT_BYTES_MAX),
        timeout_ms: section
            .get("report_timeout_ms")?
            .unwrap_or(REPORT_TIMEOUT_MS),
    }))
}

#[cfg(test)]
mod tests {
    use ledger::SourceName;
    use serde_json::{Value, json};

    use super::*;

    fn check(keys: Value) -> Result<MoneyFrom, SectionError> {
        let source = SourceName::parse("adyen").expect("name");
        let keys = keys.as_object().cloned().expect("object");
        money_from(&Section {
            source: &source,
            secrets: &[],
            tolerance_secs: 300,
            keys: &keys,
        })
    }

    #[test]
    fn the_money_comes_from_one_place_with_the_credentials_it_needs() {
        assert_eq!(
            check(json!({"money_from": "notifications"})),
            Ok(MoneyFrom::Notifications)
        );
        assert_eq!(
            check(json!({"report_user": "u", "report_password": "p"})),
            Ok(MoneyFrom::Reports)
        );
        assert_eq!(
            check(json!({"money_from": "reports", "report_user": "u", "report_password": "p"})),
            Ok(MoneyFrom::Reports)
        );
        assert_eq!(
            check(json!({"money_from": "reports", "api_key_env": "ADYEN_KEY"})),
            Ok(MoneyFrom::Reports)
        );
        let refused = |keys: Value, key: &str, says: &str| {
            let error = check(keys).expect_err(says);
            assert_eq!(error.key, Some(key), "{error}");
            assert!(error.message.contains(says), "{error}");
        };
        refused(json!({}), "money_from", "say money_from = \"notifications\"");
        refused(
            json!({"money_from": "notifications", "report_user": "u", "report_password": "p"}),
            "money_from",
            "books from one of the two",
        );
        refused(
            json!({"money_from": "notifications", "merchant_accounts": []}),
            "merchant_accounts",
            "leave it out",
        );
        refused(
            json!({"money_from": "reports", "report_user": "u"}),
            "report_user",
            "one of report_password",
        );
        refused(
            json!({"money_from": "reports"}),
            "money_from",
            "needs report credentials",
        );
        refused(
            json!({"money_from": "notifications", "report_hosts": ["https://x/path"]}),
            "report_hosts",
            "report_hosts entry",
        );
        refused(
            json!({"money_from": "reports", "api_key": "k", "report_user": "u", "report_password": "p"}),
            "api_key_env",
            "not both",
        );
        refused(
            json!({"money_from": "notifications", "report_timeout_ms": 0}),
            "report_timeout_ms",
            "must be positive",
        );
    }
}
