//! What the jobs of events that name provider movements read on SQLite before resolving them.

use std::collections::HashMap;

use super::SqliteStore;
use crate::store::StoreError;

impl SqliteStore {
    /// The source and stored facts of each event (`None` for an event recorded invalid).
    pub(in crate::store) async fn facts_of(
        &self,
        events: &[crate::ids::EventId],
    ) -> Result<HashMap<i64, (String, Option<serde_json::Value>)>, StoreError> {
        let ids: Vec<i64> = events.iter().map(|e| e.get()).collect();
        let rows: Vec<(i64, String, Option<serde_json::Value>)> = sqlx::query_as(
            "SELECT id, source, facts FROM settlement_events WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_default())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, source, facts)| (id, (source, facts)))
            .collect())
    }
}
