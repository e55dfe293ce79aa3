//! Dashboard sessions, stored so that every operator process shares them and they survive a
//! restart: a row per session, keyed by the SHA-256 of its id (the id itself lives only in the
//! browser's cookie), with who opened it, the role it had, its CSRF token and when it expires.
//! The SQL is the same on both backends (`$N` parameters, times bound from Rust), expanded into
//! each store by `session_rows!`.

use chrono::{DateTime, Utc};

/// A session as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    /// The token's name the session was opened with.
    pub actor: String,
    /// The role that token had then.
    pub role: String,
    /// Which token it was (beyond its name): the session ends when it is replaced.
    pub token_tag: String,
    pub csrf: String,
    pub expires_at: DateTime<Utc>,
}

/// A session to open.
#[derive(Clone, Debug)]
pub struct NewSession<'a> {
    /// Lower-case hex SHA-256 of the session id.
    pub id_sha256: &'a str,
    pub actor: &'a str,
    pub role: &'a str,
    pub token_tag: &'a str,
    pub csrf: &'a str,
    pub now: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Implements `driver::Sessions` for `$store`.
macro_rules! session_rows {
    ($store:ty) => {
        impl crate::store::driver::Sessions for $store {
            /// Inserts the session, and removes the ones expired by `now`.
            async fn open_session(
                &self,
                session: &crate::store::sessions::NewSession<'_>,
            ) -> Result<(), crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                sqlx::query("DELETE FROM dashboard_sessions WHERE expires_at <= $1")
                    .bind(session.now)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO dashboard_sessions
                         (id_sha256, actor, role, token_tag, csrf, created_at, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(session.id_sha256)
                .bind(session.actor)
                .bind(session.role)
                .bind(session.token_tag)
                .bind(session.csrf)
                .bind(session.now)
                .bind(session.expires_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            /// The session under `id_sha256` if it has not expired by `now`.
            async fn session(
                &self,
                id_sha256: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Option<crate::store::sessions::StoredSession>, crate::store::StoreError>
            {
                let row: Option<(
                    String,
                    String,
                    String,
                    String,
                    chrono::DateTime<chrono::Utc>,
                )> = sqlx::query_as(
                    "SELECT actor, role, token_tag, csrf, expires_at FROM dashboard_sessions
                         WHERE id_sha256 = $1 AND expires_at > $2",
                )
                .bind(id_sha256)
                .bind(now)
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(|(actor, role, token_tag, csrf, expires_at)| {
                    crate::store::sessions::StoredSession {
                        actor,
                        role,
                        token_tag,
                        csrf,
                        expires_at,
                    }
                }))
            }

            /// Ends one session. Answers whether it was open.
            async fn close_session(
                &self,
                id_sha256: &str,
            ) -> Result<bool, crate::store::StoreError> {
                let done = sqlx::query("DELETE FROM dashboard_sessions WHERE id_sha256 = $1")
                    .bind(id_sha256)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            /// Ends every session of `actor`, wherever it was opened. Answers how many.
            async fn close_sessions_of(
                &self,
                actor: &str,
            ) -> Result<u64, crate::store::StoreError> {
                let done = sqlx::query("DELETE FROM dashboard_sessions WHERE actor = $1")
                    .bind(actor)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected())
            }
        }
    };
}

pub(crate) use session_rows;
