//! `SETTLE_*` environment variables: which name a setting, and which do not.

use std::collections::BTreeSet;
use std::fmt;

use figment::Figment;
use figment::providers::Env;

use super::Config;

const PREFIX: &str = "SETTLE_";
/// Names the file to load, not a setting.
const CONFIG_FILE_VARIABLE: &str = "SETTLE_CONFIG";

/// A `SETTLE_*` variable that names no setting, and the setting it most looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    pub name: String,
    pub suggestion: Option<String>,
}

impl fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "environment variable {} is not a setting of settle",
            self.name
        )?;
        if let Some(suggestion) = &self.suggestion {
            write!(f, " (did you mean {suggestion}?)")?;
        }
        Ok(())
    }
}

/// Every variable that sets something: `SETTLE_` and the key's path in capitals, levels joined by
/// `__` (`SETTLE_WORKERS__CONCURRENCY`), for every key of the configuration.
pub fn known_variables() -> BTreeSet<String> {
    let defaults: Config = Figment::new()
        .extract()
        .expect("every setting has a default");
    let tree = serde_json::to_value(&defaults).expect("the configuration serializes");
    let mut names = BTreeSet::from([CONFIG_FILE_VARIABLE.to_owned()]);
    collect(&tree, PREFIX.to_owned(), &mut names);
    names
}

fn collect(value: &serde_json::Value, name: String, names: &mut BTreeSet<String>) {
    match value.as_object() {
        Some(table) => {
            for (key, value) in table {
                let separator = if name == PREFIX { "" } else { "__" };
                collect(
                    value,
                    format!("{name}{separator}{}", key.to_uppercase()),
                    names,
                );
            }
        }
        None => {
            names.insert(name);
        }
    }
}

/// The `SETTLE_*` variables of this process that name no setting.
pub fn unknown_variables() -> Vec<UnknownVariable> {
    let known = known_variables();
    let mut unknown: Vec<UnknownVariable> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.to_uppercase().starts_with(PREFIX))
        .filter(|name| !known.contains(&name.to_uppercase()))
        .map(|name| UnknownVariable {
            suggestion: closest(&name.to_uppercase(), &known),
            name,
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown
}

/// The known name most like `name`, if any is close enough to be a likely misspelling.
fn closest(name: &str, known: &BTreeSet<String>) -> Option<String> {
    known
        .iter()
        .map(|candidate| (strsim::jaro_winkler(name, candidate), candidate))
        .filter(|(score, _)| *score >= 0.9)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate.clone())
}

/// The `SETTLE_*` variables as settings, without `SETTLE_CONFIG` and without `unknown`.
pub fn provider(unknown: &[UnknownVariable]) -> Env {
    let left_out: BTreeSet<String> = unknown
        .iter()
        .map(|v| v.name.to_uppercase())
        .chain([CONFIG_FILE_VARIABLE.to_owned()])
        .collect();
    Env::prefixed(PREFIX)
        .filter(move |key| !left_out.contains(&format!("{PREFIX}{}", key.as_str().to_uppercase())))
        .split("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_has_a_variable_and_misspellings_find_theirs() {
        let known = known_variables();
        for name in [
            "SETTLE_LISTEN",
            "SETTLE_DATABASE_URL",
            "SETTLE_WORKERS__CONCURRENCY",
            "SETTLE_HTTP__SHUTDOWN_TIMEOUT_SECS",
            "SETTLE_LOG__FORMAT",
            "SETTLE_SOURCES",
        ] {
            assert!(known.contains(name), "{name} in {known:?}");
        }
        assert!(
            !known.contains("SETTLE_WORKERS"),
            "a table is not a setting"
        );
        assert_eq!(
            closest("SETTLE_WORKERS__CONCURENCY", &known).as_deref(),
            Some("SETTLE_WORKERS__CONCURRENCY")
        );
        assert_eq!(
            closest("SETTLE_LOG_FORMAT", &known).as_deref(),
            Some("SETTLE_LOG__FORMAT")
        );
        assert_eq!(closest("SETTLE_TEST_LOG_DIR", &known), None);
    }
}
