//! The only place with SQL. One [`Store`] over the backends: PostgreSQL for fleets, SQLite for
//! the embedded default. Callers (ingress, workers, ops) never see which one they talk to.

mod error;
mod postgres;

use std::time::Duration;

pub use error::StoreError;

use crate::record::{NewEvent, Recorded};

/// The queue (apalis `job_type`) that carries `PostSettlement` jobs.
pub const POST_SETTLEMENT_QUEUE: &str = "settle::PostSettlement";

/// How a store connects. Every limit has its unit in its name.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub connections_max: u32,
    pub acquire_timeout_ms: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            connections_max: 16,
            acquire_timeout_ms: 3_000,
        }
    }
}

impl StoreOptions {
    fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.acquire_timeout_ms)
    }
}

/// Which database a URL names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BackendKind {
    Postgres,
    Sqlite,
}

impl BackendKind {
    pub fn of_url(url: &str) -> Option<BackendKind> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(BackendKind::Postgres)
        } else if url.starts_with("sqlite:") {
            Some(BackendKind::Sqlite)
        } else {
            None
        }
    }
}

/// settle's storage: events, conflicts, jobs (through the queue's tables), and later the journal.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Backend,
}

#[derive(Clone, Debug)]
enum Backend {
    Postgres(postgres::PgStore),
}

impl Store {
    /// Connects lazily-checked: the pool is built and one connection is opened to prove the URL.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        match BackendKind::of_url(url) {
            Some(BackendKind::Postgres) => Ok(Store {
                backend: Backend::Postgres(postgres::PgStore::connect(url, options).await?),
            }),
            Some(BackendKind::Sqlite) => Err(StoreError::Unsupported(
                "the embedded SQLite store is not available yet; set DATABASE_URL to PostgreSQL",
            )),
            None => Err(StoreError::Unsupported(
                "database URL must start with postgres://, postgresql:// or sqlite:",
            )),
        }
    }

    pub fn kind(&self) -> BackendKind {
        match &self.backend {
            Backend::Postgres(_) => BackendKind::Postgres,
        }
    }

    /// Applies the queue's migrations and ours (`migrations/<backend>`), once, even when several
    /// processes start together.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Postgres(store) => store.migrate().await,
        }
    }

    /// Reachable, and every migration this build knows is applied.
    pub async fn ready(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Postgres(store) => store.ready().await,
        }
    }

    /// Records the events of one delivery atomically: each new event is inserted by its natural
    /// key together with its `PostSettlement` job in the same transaction; a replay writes
    /// nothing; a conflict keeps the delivery in `event_conflicts`. Returns only after COMMIT.
    pub async fn record(&self, events: &[NewEvent]) -> Result<Vec<Recorded>, StoreError> {
        match &self.backend {
            Backend::Postgres(store) => store.record(events).await,
        }
    }

    pub async fn close(&self) {
        match &self.backend {
            Backend::Postgres(store) => store.close().await,
        }
    }
}
