//! Configured webhook sources: a name, and how its provider receives its deliveries.

use std::collections::HashMap;
use std::sync::Arc;

use ledger::SourceName;
use providers::Receive;

/// One configured source.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: SourceName,
    /// Its provider's receiving half, with the source's keys and rules.
    pub receiver: Arc<dyn Receive>,
    /// The longest this source is expected to go without a delivery, if one is expected (for
    /// the shipped alert on a silent source).
    pub expected_within_secs: Option<u64>,
}

impl Source {
    pub fn new(name: SourceName, receiver: Arc<dyn Receive>) -> Self {
        Self {
            name,
            receiver,
            expected_within_secs: None,
        }
    }

    /// A delivery is expected at least every `secs` seconds.
    pub fn with_expected_within(mut self, secs: u64) -> Self {
        self.expected_within_secs = Some(secs);
        self
    }
}

/// Why the configured sources were refused.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("source {0} is configured twice")]
    Duplicate(SourceName),
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
