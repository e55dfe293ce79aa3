//! What the jobs of events that name provider movements read on SQLite before resolving them,
//! and the fleet's calls (one process: nothing to do).

use super::SqliteStore;
use crate::store::StoreError;

/// One process and one user: the fleet's calls have nothing to do.
impl crate::store::driver::Fleet for SqliteStore {
    async fn grant_roles(&self) -> Result<(), StoreError> {
        Err(StoreError::Unsupported(
            "an SQLite database has one user (its file's owner): roles are PostgreSQL's",
        ))
    }

    async fn keep_worker_alive(&self, _name: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn live_workers(
        &self,
        _window: std::time::Duration,
        _own_prefix: &str,
    ) -> Result<u32, StoreError> {
        Ok(1)
    }
}
