//! Store errors, classified once where they are born: transient (try again later) or not.

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or asked us to try again (connection lost, pool
    /// timeout, serialization failure, deadlock, lock timeout, shutdown in progress).
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// Any other database error: a bug or a broken invariant, not something a retry fixes.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database schema is behind this build: {0}")]
    MigrationsPending(String),
    /// The schema was made by migrations this build does not have: the ones a single baseline
    /// replaced before the first release. There is no upgrade path from them.
    #[error(
        "this database was made by migrations this build no longer has ({0}); they were replaced \
         by one baseline before the first release and cannot be upgraded: recreate the database \
         (drop it, or for SQLite move the file away) and let settle migrate the new one"
    )]
    SchemaSuperseded(String),
    /// A stored row that this build cannot read (it was not written by settle).
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Unsupported(&'static str),
    /// Connected to a database that takes no writes (a standby, or `default_transaction_read_only`):
    /// nothing can be recorded or posted until the connection reaches a primary.
    #[error(
        "the database is read-only (a standby, or default_transaction_read_only): nothing can be written"
    )]
    ReadOnly,
    /// The call never reached an answer inside this process (the group it waited in was lost);
    /// nothing is known to have been written, and trying again is safe.
    #[error("interrupted: {0}")]
    Interrupted(&'static str),
    /// Another transaction posted (or tied) one of the movements a transaction was posting while
    /// it ran: nothing of it was kept, and posting again compares the other transaction's facts
    /// before anything is written.
    #[error("a movement was posted by another transaction meanwhile")]
    Raced,
    /// A LISTEN did not hear its own NOTIFY: the connection does not keep session state (a
    /// transaction-mode pooler).
    #[error("LISTEN/NOTIFY did not round-trip on this connection")]
    SessionStateLost,
    /// A state change that the state machine does not allow, or whose precondition no longer
    /// holds (another process changed the row first).
    #[error("cannot move from {from} to {to}")]
    InvalidTransition {
        from: &'static str,
        to: &'static str,
    },
}

impl StoreError {
    /// Whether trying the same thing again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Interrupted(_)
                | StoreError::Raced
                | StoreError::ReadOnly
        )
    }

    /// Whether PostgreSQL gave up waiting for a lock another transaction held (a lock timeout,
    /// or a deadlock it broke): nothing was kept, and the same work in smaller pieces may go
    /// through at once.
    pub fn is_lock_wait(&self) -> bool {
        match self {
            StoreError::Unavailable(sqlx::Error::Database(db)) => {
                matches!(db.code().as_deref(), Some(LOCK_TIMEOUT | DEADLOCK))
            }
            _ => false,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        if is_transient(&error) {
            StoreError::Unavailable(error)
        } else {
            StoreError::Database(error)
        }
    }
}

const LOCK_TIMEOUT: &str = "55P03";
const DEADLOCK: &str = "40P01";

/// SQLSTATE classes and codes that mean "not now" rather than "never".
const TRANSIENT_SQLSTATES: &[&str] = &[
    "40001",      // serialization_failure
    DEADLOCK,     // deadlock_detected
    LOCK_TIMEOUT, // lock_not_available (lock_timeout)
    "57014",      // query_canceled (statement_timeout)
    "57P01",      // admin_shutdown
    "57P02",      // crash_shutdown
    "57P03",      // cannot_connect_now
    "25P03",      // idle_in_transaction_session_timeout
    // read_only_sql_transaction: connected to a standby (or a database set read-only), as during
    // a failover until the address moves to the promoted primary.
    "25006",
];

fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
                code.parse::<u32>()
                    .is_ok_and(|code| matches!(code & 0xff, 5 | 6))
            } else {
                // 08: connection exceptions; 53: insufficient resources (too many connections).
                code.starts_with("08")
                    || code.starts_with("53")
                    || TRANSIENT_SQLSTATES.contains(&code.as_ref())
            }
        }
        _ => false,
    }
}
