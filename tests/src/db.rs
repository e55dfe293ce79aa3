//! A fresh PostgreSQL database per test, dropped when the test ends (even when it fails).

use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::postgres::{PgPool, PgPoolOptions};

/// The server the suite uses; override with `SETTLE_TEST_PG` (a URL without a database name
/// at the end is not supported: give e.g. `postgres://postgres@127.0.0.1:5432/postgres`).
fn admin_url() -> String {
    std::env::var("SETTLE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Databases this harness made are named `settle_t_<unix secs>_<random>`; leftovers of a killed
/// run older than this are dropped by the next run.
const LEFTOVER_AGE_SECS: u64 = 3 * 3600;

#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// The server's maintenance database, which creates and drops it.
    admin: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        TestDb::create_with("").await
    }

    /// A fresh database made with these `CREATE DATABASE` options (a locale, say).
    pub async fn create_with(options: &str) -> TestDb {
        TestDb::create_on(&admin_url(), options).await
    }

    /// A fresh database on the server whose maintenance database is `admin_url`
    /// (`postgres://user@host:port/postgres`).
    pub async fn create_on(admin_url: &str, options: &str) -> TestDb {
        let admin = admin_pool_at(admin_url).await;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        drop_leftovers(&admin, now).await;
        let name = format!("settle_t_{now}_{:016x}", rand::random::<u64>());
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {name} {options}"
        )))
        .execute(&admin)
        .await
        .expect("create test database");
        admin.close().await;
        let url = match admin_url.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("SETTLE_TEST_PG must end with /<database>"),
        };
        TestDb {
            name,
            url,
            admin: admin_url.to_owned(),
        }
    }

    /// A handle that owns no database (dropping it drops nothing).
    pub fn detached() -> TestDb {
        TestDb {
            name: String::new(),
            url: String::new(),
            admin: String::new(),
        }
    }

    /// Cuts settle off this database (new connections refused, its open ones terminated), or
    /// lets it back in: the database as seen by settle is down, while the test's own
    /// connections stay open.
    pub async fn set_reachable(&self, reachable: bool) {
        let admin = admin_pool_at(&self.admin).await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS {reachable}",
            self.name
        )))
        .execute(&admin)
        .await
        .expect("alter database");
        if !reachable {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND application_name = 'settle'",
            )
            .bind(&self.name)
            .execute(&admin)
            .await
            .expect("terminate settle's connections");
        }
        admin.close().await;
    }

    /// Migrates this database and grants the runtime roles as `settle db grant-roles` does,
    /// with a login role for each ([`as_role`]) made once for the server.
    pub async fn grant_runtime_roles(&self) {
        let admin = admin_pool_at(&self.admin).await;
        let mut tx = admin.begin().await.expect("begin");
        // One test at a time creates the server's roles (a role is the server's, not a
        // database's: they stay, as fixtures, for the next run).
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('settle test roles'))")
            .execute(&mut *tx)
            .await
            .expect("lock");
        for role in RUNTIME_ROLES {
            let login = login_role(role);
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DO $$ BEGIN
                     IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
                         CREATE ROLE {role} NOLOGIN;
                     END IF;
                     IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}') THEN
                         CREATE ROLE {login} LOGIN IN ROLE {role};
                     END IF;
                 END $$"
            )))
            .execute(&mut *tx)
            .await
            .expect("create the runtime and login roles");
        }
        tx.commit().await.expect("commit");
        admin.close().await;
        let store = ledger::Store::connect(&self.url, &ledger::StoreOptions::default())
            .await
            .expect("connect");
        store.migrate().await.expect("migrate");
        store.grant_roles().await.expect("grant the runtime roles");
        store.close().await;
    }

    /// A pool for the test's own assertions.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(4)
            .connect(&self.url)
            .await
            .expect("connect to test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.name.is_empty() {
            return;
        }
        let name = self.name.clone();
        let admin_url = self.admin.clone();
        // Drop runs outside any runtime guarantee: use a small runtime on its own thread.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let admin = admin_pool_at(&admin_url).await;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&admin)
                .await
                .map(|_| ())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
        }
    }
}

async fn admin_pool_at(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect to the PostgreSQL server (is it running? see .ci/run)")
}

async fn drop_leftovers(admin: &PgPool, now: u64) {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'settle\\_t\\_%'")
            .fetch_all(admin)
            .await
            .unwrap_or_default();
    for name in names {
        let created = name
            .split('_')
            .nth(2)
            .and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|secs| secs + LEFTOVER_AGE_SECS < now) {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(admin)
            .await;
        }
    }
}

/// The runtime roles (`settle db grant-roles`).
pub const RUNTIME_ROLES: [&str; 3] = ledger::store::RUNTIME_ROLES;

/// The test login role that is a member of `runtime_role` (`settle_worker` -> `settle_t_worker`).
fn login_role(runtime_role: &str) -> String {
    runtime_role.replacen("settle_", "settle_t_", 1)
}

/// `url` connecting as the test login role of `runtime_role` (see
/// [`TestDb::grant_runtime_roles`]).
pub fn as_role(url: &str, runtime_role: &str) -> String {
    let mut url = reqwest::Url::parse(url).expect("a database URL");
    url.set_username(&login_role(runtime_role))
        .expect("a URL with a user");
    url.set_password(None).expect("a URL with a password");
    url.to_string()
}

/// A fresh SQLite file per test (in the temp dir), removed with its WAL files when dropped.
#[derive(Debug)]
pub struct SqliteFile {
    pub path: std::path::PathBuf,
}

impl SqliteFile {
    pub fn create() -> SqliteFile {
        let path =
            std::env::temp_dir().join(format!("settle-test-{:016x}.db", rand::random::<u64>()));
        SqliteFile { path }
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

impl Drop for SqliteFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}

/// The database a test runs on.
#[derive(Debug)]
pub enum Database {
    Postgres(TestDb),
    Sqlite(SqliteFile),
}

impl Database {
    pub fn url(&self) -> String {
        match self {
            Database::Postgres(db) => db.url.clone(),
            Database::Sqlite(file) => file.url(),
        }
    }
}
