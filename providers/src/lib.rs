//! settle's payment providers. Each is one module (a folder of this crate) implementing the
//! traits of [`seam`]: verify a delivery on its raw bytes and headers, name what it is about,
//! fetch and check the provider's money and map it to the chart of accounts, read its own
//! configuration keys. The rest of settle (ingress, workers, store, configuration, dashboard)
//! knows providers only through [`PROVIDERS`] and the seam's traits, and a provider knows
//! settle's store only through the values it hands over (events, triggers, drafted entries).
//!
//! Adding a provider: its module here, its fixtures and tests, and one line in the list below
//! (ARCHITECTURE.md, "Adding a provider").

pub mod budget;
pub mod config;
pub mod demo;
pub mod fuzzing;
mod http;
pub mod seam;
pub mod signature;

pub use budget::{Budget, JobTurn};
pub use config::{Key, KeyKind, Secret, Section, SectionError};
pub use seam::{
    Acknowledgement, Adapted, Chunks, FeedSettings, FuzzTarget, Ignore, Listed, Provider,
    ProviderLedger, Receive, Rejection, Resolution, Resolve, Sample, Sequence, Unparseable,
};
pub use signature::SignatureError;

/// Declares each provider's module and lists its `PROVIDER` in [`PROVIDERS`], in order.
macro_rules! register {
    ($($module:ident),+ $(,)?) => {
        $(pub mod $module;)+

        /// Every provider settle speaks, each once.
        pub static PROVIDERS: &[&dyn Provider] = &[$(&$module::PROVIDER),+];
    };
}

// The registration list: one line per provider.
register![standard, stripe, adyen];

/// The provider `provider = "<name>"` selects.
pub fn find(name: &str) -> Option<&'static dyn Provider> {
    PROVIDERS.iter().copied().find(|p| p.name() == name)
}

/// Every provider's name, in the registration order.
pub fn names() -> Vec<&'static str> {
    PROVIDERS.iter().map(|p| p.name()).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_keys_and_trigger_tags_are_each_once_and_tags_are_never_canonical() {
        let names: HashSet<&str> = PROVIDERS.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), PROVIDERS.len(), "a name is registered twice");
        let mut tags = HashSet::new();
        for provider in PROVIDERS {
            assert!(find(provider.name()).is_some());
            let keys: HashSet<&str> = provider.keys().iter().map(|k| k.name).collect();
            assert_eq!(keys.len(), provider.keys().len(), "{}", provider.name());
            for tag in provider.trigger_tags() {
                assert_ne!(*tag, ledger::trigger::CANONICAL_MEMBER);
                assert!(tags.insert(*tag), "tag {tag} is used twice");
            }
        }
        assert!(find("paypal").is_none());
    }
}
