//! `spawn_app()`: the real settle app (router, store, and later workers) on a random port over a
//! fresh database.

use std::net::SocketAddr;

use std::sync::Arc;

use ops::{App, Config, Role};
use providers::stripe::fake::FakeStripe;
use sqlx::{PgPool, SqlitePool};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::db::{Database, SqliteFile, TestDb};
use crate::sign;

/// The `std` source's current secret (the Standard Webhooks public test secret).
pub const STANDARD_SECRET: &str = "whsec_hp09L9NNueRHag3OnXaH+c0BE/vNuSrr";
/// A second active secret of the `std` source (rotation).
pub const STANDARD_SECRET_OLD: &str = "whsec_b2xkIHNlY3JldCBvZiB0aGUgdGVzdHM=";
/// The `stripe` source's secrets (current, and a second active one for rotation).
pub const STRIPE_SECRET: &str = "whsec_test_secret";
pub const STRIPE_SECRET_OLD: &str = "whsec_old_test_secret";
/// The `adyen` source's HMAC keys (hex), current and rotated.
pub const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
pub const ADYEN_KEY_OLD: &str = "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF";

/// API bearer tokens of the test configuration, by role.
pub const OPS_TOKEN: &str = "ops-token-4f1c9a7e2b";
pub const FINANCE_TOKEN: &str = "finance-token-8d3e6b0a91";

/// A well-formed secret no source has.
pub const STANDARD_SECRET_UNKNOWN: &str = "whsec_bm90IGEgc2VjcmV0IG9mIG91cnM=";

#[derive(Debug)]
pub struct TestApp {
    /// The public listener (webhooks, `/healthz`).
    pub addr: SocketAddr,
    /// The internal listener (API, dashboard, `/metrics`, `/readyz`).
    pub ops_addr: SocketAddr,
    pub http: reqwest::Client,
    pub database: Database,
    pool: Pool,
    /// The app's own store, for driving jobs directly.
    pub store: ledger::Store,
    /// The fake Stripe API its `stripe` source calls.
    pub stripe: Arc<FakeStripe>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

/// Worker settings that make tests quick: short heartbeats, short backoffs, frequent polls.
pub const FAST_WORKERS: &str = r#"
heartbeat_interval_ms = 500
missed_heartbeats = 4
poll_interval_ms = 100
backoff_base_ms = 100
backoff_max_ms = 1000
sweep_interval_secs = 1
sweep_grace_secs = 1
drain_timeout_secs = 5
"#;

/// Which store a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    #[default]
    Postgres,
    Sqlite,
}

/// Runs the same query on whichever pool the test has (the SQL must suit both).
macro_rules! on_pool {
    ($self:ident, $pool:ident => $call:expr) => {
        match &$self.pool {
            Pool::Postgres($pool) => $call,
            Pool::Sqlite($pool) => $call,
        }
    };
}

/// The test's own connection, for assertions.
#[derive(Debug)]
enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// How to start the app under test.
#[derive(Debug, Clone)]
pub struct AppOptions {
    pub backend: Backend,
    pub role: Role,
    /// Top-level TOML appended to the test configuration (limits, `[database]`...).
    pub extra: String,
    /// The body of the `[workers]` table.
    pub workers: String,
    /// The fake Stripe API the `stripe` source calls; `None`: the app starts its own.
    pub stripe: Option<Arc<FakeStripe>>,
    /// The host (`http://127.0.0.1:<port>`) the `adyen` source downloads reports from, as the
    /// fake report server's user; `None`: it has no report credentials.
    pub adyen_reports: Option<String>,
    /// More keys of the `adyen` source's table (`feed_every_secs = 1`...).
    pub adyen_keys: String,
    /// The `stripe` source's budget: requests a second in all and to one endpoint.
    pub stripe_requests_per_sec: u32,
}

impl Default for AppOptions {
    fn default() -> Self {
        Self {
            backend: Backend::Postgres,
            role: Role::Serve,
            extra: String::new(),
            workers: FAST_WORKERS.to_owned(),
            stripe: None,
            adyen_reports: None,
            adyen_keys: String::new(),
            stripe_requests_per_sec: 2_000,
        }
    }
}

/// The `stripe` source's API key at the fake Stripe API.
pub const STRIPE_API_KEY: &str = "rk_test_settle_fake_api_key_7d41";

/// A fake Stripe API for a test app: it accepts [`STRIPE_API_KEY`] and makes up a charge's
/// balance transaction for any `txn_<suffix>` it was not given (so load-shaped Stripe events
/// post without set-up).
pub async fn fake_stripe() -> Arc<FakeStripe> {
    let fake = FakeStripe::start(STRIPE_API_KEY)
        .await
        .expect("the fake Stripe API starts");
    fake.synthesize_charges(true);
    Arc::new(fake)
}

/// The app (ingress, workers) with the default test sources.
pub async fn spawn_app() -> TestApp {
    spawn(AppOptions::default()).await
}

/// The app with `extra` appended to the test configuration (more sources, limits...).
pub async fn spawn_app_with(extra: &str) -> TestApp {
    spawn(AppOptions {
        extra: extra.to_owned(),
        ..AppOptions::default()
    })
    .await
}

/// The ingress alone (no workers): what is recorded stays as recorded.
pub async fn spawn_ingress_with(extra: &str) -> TestApp {
    spawn(AppOptions {
        role: Role::Ingress,
        extra: extra.to_owned(),
        ..AppOptions::default()
    })
    .await
}

/// The test configuration for a database, as TOML.
pub fn config_toml(url: &str, options: &AppOptions) -> String {
    format!(
        r#"
        listen = "127.0.0.1:0"
        ops_listen = "127.0.0.1:0"
        database_url = "{url}"
        {extra}

        [workers]
        {workers}

        [[sources]]
        name = "std"
        provider = "standard"
        secrets = ["{STANDARD_SECRET}", "{STANDARD_SECRET_OLD}"]

        [[sources]]
        name = "stripe"
        provider = "stripe"
        secrets = ["{STRIPE_SECRET}", "{STRIPE_SECRET_OLD}"]
        livemode = false
        api_key = "{STRIPE_API_KEY}"
        api_base = "{stripe_api}"
        api_requests_per_sec = {stripe_budget}
        api_endpoint_requests_per_sec = {stripe_budget}
        api_request_timeout_ms = 2000
        feed = false

        [[sources]]
        name = "adyen"
        provider = "adyen"
        secrets = ["{ADYEN_KEY}", "{ADYEN_KEY_OLD}"]
        {adyen_reports}
        {adyen_keys}

        [[tokens]]
        name = "olivia"
        role = "ops"
        token_sha256 = "{ops}"

        [[tokens]]
        name = "fred"
        role = "finance"
        token_sha256 = "{finance}"
        "#,
        extra = options.extra,
        adyen_reports = options.adyen_reports.as_ref().map_or_else(|| "money_from = \"notifications\"".to_owned(), |host| format!(
            "money_from = \"reports\"\n        report_user = \"{}\"\n        report_password = \"{}\"\n        report_hosts = [\"{host}\"]\n        report_timeout_ms = 5000",
            crate::adyen::REPORT_USER,
            crate::adyen::REPORT_PASSWORD
        )),
        adyen_keys = options.adyen_keys,
        stripe_budget = options.stripe_requests_per_sec,
        workers = options.workers,
        stripe_api = options
            .stripe
            .as_ref()
            .map_or_else(|| "http://127.0.0.1:9".to_owned(), |fake| fake.url()),
        ops = ops::auth::token_sha256(OPS_TOKEN),
        finance = ops::auth::token_sha256(FINANCE_TOKEN),
    )
}

impl AppOptions {
    /// The defaults, on `backend`.
    pub fn on(backend: Backend) -> Self {
        Self {
            backend,
            ..Self::default()
        }
    }
}

pub async fn spawn(options: AppOptions) -> TestApp {
    let database = match options.backend {
        Backend::Postgres => Database::Postgres(TestDb::create().await),
        Backend::Sqlite => Database::Sqlite(SqliteFile::create()),
    };
    start(database, options).await
}

/// Starts the app over an existing database (for example after a previous app stopped).
pub async fn start(database: Database, mut options: AppOptions) -> TestApp {
    let stripe = match &options.stripe {
        Some(fake) => fake.clone(),
        None => fake_stripe().await,
    };
    options.stripe = Some(stripe.clone());
    // A fleet's process connects as its runtime role (README.md, Database roles); `serve`, the
    // single-node mode, as the owner.
    let runtime_role = match options.role {
        Role::Ingress => Some("settle_ingress"),
        Role::Worker => Some("settle_worker"),
        Role::Console => Some("settle_console"),
        Role::Serve => None,
    };
    // The runtime roles are granted on every PostgreSQL test database: a fleet of worker
    // processes may join any app.
    if let Database::Postgres(db) = &database {
        db.grant_runtime_roles().await;
    }
    let url = match (&database, runtime_role) {
        (Database::Postgres(db), Some(role)) => crate::db::as_role(&db.url, role),
        _ => database.url(),
    };
    let mut config = Config::from_toml(&config_toml(&url, &options)).expect("test configuration");
    config.migrate_on_start &= url == database.url();
    crate::logs::init();
    let app = App::build(&config, options.role).await.expect("app builds");
    let none = SocketAddr::from(([127, 0, 0, 1], 0));
    let addr = app.local_addr().unwrap_or(none);
    let ops_addr = app.ops_addr().unwrap_or(none);
    // The test's own reads and checks go through the owner.
    let store = match url == database.url() {
        true => app.store().clone(),
        false => ledger::Store::connect(&database.url(), &ledger::StoreOptions::default())
            .await
            .expect("connect as the owner"),
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(app.run(shutdown.clone()));
    let pool = match &database {
        Database::Postgres(db) => Pool::Postgres(db.pool().await),
        Database::Sqlite(file) => Pool::Sqlite(
            SqlitePool::connect(&file.url())
                .await
                .expect("open the test's SQLite file"),
        ),
    };
    TestApp {
        addr,
        ops_addr,
        http: reqwest::Client::new(),
        database,
        pool,
        store,
        stripe,
        shutdown,
        task: Some(task),
    }
}

impl TestApp {
    /// The PostgreSQL pool of a PostgreSQL test (for PostgreSQL-only assertions).
    pub fn pg(&self) -> &PgPool {
        match &self.pool {
            Pool::Postgres(pool) => pool,
            Pool::Sqlite(_) => panic!("this test needs PostgreSQL"),
        }
    }

    /// The PostgreSQL database of a PostgreSQL test.
    pub fn pg_db(&self) -> &TestDb {
        match &self.database {
            Database::Postgres(db) => db,
            Database::Sqlite(_) => panic!("this test needs PostgreSQL"),
        }
    }

    pub fn database_url(&self) -> String {
        self.database.url()
    }

    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Postgres(_) => Backend::Postgres,
            Pool::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// The app's `/metrics` page (Prometheus text).
    pub async fn metrics_page(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// The value of one series of `/metrics` (`name{labels}` exactly as printed), 0 if absent.
    pub async fn metric(&self, series: &str) -> f64 {
        self.metrics_page()
            .await
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// The value of a series once it reads `value` (the gauges read from the store are
    /// refreshed at most every few seconds), or the last value seen after fifteen seconds
    /// (`None`: absent).
    pub async fn metric_becoming(&self, series: &str, value: f64) -> Option<f64> {
        let mut seen = None;
        for _ in 0..30 {
            seen = self.metrics_page().await.lines().find_map(|line| {
                line.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .parse::<f64>()
                    .ok()
            });
            if seen == Some(value) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        seen
    }

    /// Runs `sql` (portable between the backends) returning one integer.
    pub async fn scalar(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        on_pool!(self, pool => sqlx::query_scalar(sql).fetch_one(pool).await).expect("scalar query")
    }

    /// Runs a statement; the database's refusal comes back as its message.
    pub async fn exec(&self, sql: &str) -> Result<u64, String> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        on_pool!(self, pool => sqlx::raw_sql(sql).execute(pool).await.map(|r| r.rows_affected()))
            .map_err(|error| error.to_string())
    }

    /// Runs one statement in a transaction that is rolled back: whether the database accepts it.
    pub async fn try_rolled_back(&self, sql: &str) -> Result<u64, String> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        on_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let done = sqlx::query(sql).execute(&mut *tx).await?;
            tx.rollback().await?;
            Ok::<u64, sqlx::Error>(done.rows_affected())
        }.await)
        .map_err(|error| error.to_string())
    }

    /// `path` on the listener that serves it: the internal one for the API, the dashboard,
    /// `/metrics` and `/readyz` (and `/`), the public one for the rest.
    pub fn url(&self, path: &str) -> String {
        let internal = ["/api", "/dashboard", "/metrics", "/readyz"]
            .iter()
            .any(|prefix| path.starts_with(prefix))
            || path == "/";
        let addr = if internal { self.ops_addr } else { self.addr };
        format!("http://{addr}{path}")
    }

    /// `path` on the public listener, whatever it is (to show what it refuses).
    pub fn public_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `path` on the internal listener, whatever it is.
    pub fn ops_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.ops_addr)
    }

    /// POSTs `body` with `headers` and `Content-Type: application/json`.
    pub async fn post(
        &self,
        path: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_owned());
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request.send().await.expect("request reaches the app")
    }

    /// A Standard Webhooks delivery to the `std` source, signed now with the current secret.
    pub async fn post_standard(&self, id: &str, body: &str) -> reqwest::Response {
        let headers = sign::standard_headers(STANDARD_SECRET, id, sign::now(), body.as_bytes());
        self.post("/webhooks/std", &headers, body).await
    }

    /// A Stripe delivery to the `stripe` source, signed now with the current secret.
    pub async fn post_stripe(&self, body: &str) -> reqwest::Response {
        let header = sign::stripe_header(STRIPE_SECRET, sign::now(), body.as_bytes());
        self.post(
            "/webhooks/stripe",
            &[("stripe-signature".into(), header)],
            body,
        )
        .await
    }

    /// An Adyen notification to the `adyen` source with `items`, each signed with the current key.
    pub async fn post_adyen(&self, items: &[serde_json::Value]) -> reqwest::Response {
        let body = sign::adyen_notification(ADYEN_KEY, items);
        self.post("/webhooks/adyen", &[], &body).await
    }

    /// The dashboard's login form submitted with `token`, its answer as sent (a 303 to the
    /// overview is not followed).
    pub async fn log_in(&self, token: &str) -> reqwest::Response {
        no_redirects()
            .post(self.url("/dashboard/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
            .await
            .expect("login")
    }

    /// `GET path` with a bearer token (`None`: no Authorization header); status and JSON body.
    /// A dashboard page, logged in (over HTTP, no browser) with the ops token.
    pub async fn dashboard_page(&self, path: &str) -> String {
        let login = self.log_in(OPS_TOKEN).await;
        let cookie = login
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .expect("a session cookie")
            .to_owned();
        no_redirects()
            .get(self.url(path))
            .header("cookie", cookie)
            .send()
            .await
            .expect("the page")
            .text()
            .await
            .expect("its text")
    }

    pub async fn api_get(&self, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
        let mut request = self.http.get(self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("request reaches the app");
        (
            response.status().as_u16(),
            response.json().await.unwrap_or(serde_json::Value::Null),
        )
    }

    /// `POST path` with a JSON body and a bearer token; status and JSON body.
    pub async fn api_post(
        &self,
        path: &str,
        token: Option<&str>,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut request = self.http.post(self.url(path)).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("request reaches the app");
        (
            response.status().as_u16(),
            response.json().await.unwrap_or(serde_json::Value::Null),
        )
    }

    /// The id of the open dead letter of the event with `external_id`.
    pub async fn open_dead_letter(&self, external_id: &str) -> i64 {
        const SQL: &str =
            "SELECT d.id FROM dead_letters d JOIN settlement_events e ON e.id = d.event_id
                           WHERE e.external_id = $1 AND d.state = 'open'";
        on_pool!(self, pool => sqlx::query_scalar(SQL).bind(external_id).fetch_one(pool).await)
            .expect("an open dead letter")
    }

    /// Rows in a table, for assertions on what was (not) written.
    /// The first column of every row of `sql`, as text (SQL both backends speak).
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        on_pool!(self, pool => sqlx::query_scalar(sql).fetch_all(pool).await).expect("texts")
    }

    pub async fn count(&self, table: &str) -> i64 {
        self.scalar(&format!("SELECT count(*) FROM {table}")).await
    }

    /// Rows of our queue in the job queue's table.
    pub async fn jobs(&self) -> i64 {
        let table = match self.backend() {
            Backend::Postgres => "apalis.jobs",
            Backend::Sqlite => "Jobs",
        };
        self.scalar(&format!(
            "SELECT count(*) FROM {table} WHERE job_type = 'settle::PostSettlement'"
        ))
        .await
    }

    /// The queue row of the event's current job: `(status, unlocked, due later than now)`, or
    /// `None` when the row is gone.
    pub async fn job_row(&self, external_id: &str) -> Option<(String, bool, bool)> {
        let sql = match self.backend() {
            Backend::Postgres => {
                "SELECT j.status, j.lock_by IS NULL, j.run_at > now() FROM apalis.jobs j
                 JOIN settlement_events e ON e.job_id = j.id WHERE e.external_id = $1"
            }
            Backend::Sqlite => {
                "SELECT j.status, j.lock_by IS NULL, j.run_at > CAST(strftime('%s', 'now') AS INTEGER)
                 FROM Jobs j JOIN settlement_events e ON e.job_id = j.id WHERE e.external_id = $1"
            }
        };
        on_pool!(self, pool => sqlx::query_as(sql).bind(external_id).fetch_optional(pool).await)
            .expect("job row")
    }

    /// Stops the app, waits for it to finish, and hands back its database.
    pub async fn stop(mut self) -> Database {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.await.expect("app task").expect("app stops cleanly");
        }
        on_pool!(self, pool => pool.close().await);
        std::mem::replace(&mut self.database, Database::Postgres(TestDb::detached()))
    }

    /// Waits until `sql` (a query returning one boolean, portable between the backends) is true,
    /// checking every 50 ms; panics with `what` after `timeout_secs`. A bound on waiting, not a
    /// speed assertion.
    pub async fn wait_for(&self, what: &str, timeout_secs: u64, sql: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout_secs);
        loop {
            let sql = sqlx::AssertSqlSafe(sql.to_owned());
            let done: bool = on_pool!(self, pool => sqlx::query_scalar(sql).fetch_one(pool).await)
                .expect("wait query");
            if done {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Waits until settle itself has paused `source` (a key its provider refused), with a
    /// reason `LIKE reason_like`, and the pause is in force.
    pub async fn wait_paused_by_settle(&self, source: &str, reason_like: &str) {
        self.wait_for(
            "the source paused by settle",
            30,
            &format!(
                "SELECT count(*) = 1 FROM source_pauses WHERE source = '{source}' AND resumed_at IS NULL
                   AND paused_by = 'settle' AND pause_reason LIKE '{reason_like}'"
            ),
        )
        .await;
    }

    /// Waits until every event is out of `recorded` (posted, abandoned or discarded).
    pub async fn wait_settled(&self, timeout_secs: u64) {
        self.wait_for(
            "every event to settle",
            timeout_secs,
            "SELECT NOT EXISTS (SELECT 1 FROM settlement_events WHERE status = 'recorded')",
        )
        .await;
    }

    /// `(status, error_code of its open dead letter)` of the event with `external_id`.
    pub async fn event_state(&self, external_id: &str) -> (String, Option<String>) {
        const SQL: &str = "SELECT e.status, d.error_code FROM settlement_events e
                           LEFT JOIN dead_letters d ON d.event_id = e.id AND d.state = 'open'
                           WHERE e.external_id = $1";
        on_pool!(self, pool => sqlx::query_as(SQL).bind(external_id).fetch_one(pool).await)
            .expect("event state")
    }

    /// The job that posts the event with `external_id`, as the store knows it.
    pub async fn job_of(&self, external_id: &str) -> ledger::job::JobRef {
        const SQL: &str = "SELECT id, job_id FROM settlement_events WHERE external_id = $1";
        let (event_id, job_id): (i64, String) =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(external_id).fetch_one(pool).await)
                .expect("event's job");
        ledger::job::JobRef {
            job_id,
            event_id: ledger::EventId::new(event_id),
        }
    }

    /// The lines of the entry posted for `movement_id` (a Stripe `txn_...`), as
    /// `account CURRENCY amount` with the amount normalised (`96.8`, `-100`), in line order.
    pub async fn lines_of(&self, movement_id: &str) -> Vec<String> {
        const SQL: &str =
            "SELECT l.account, l.currency, CAST(l.amount AS TEXT) FROM journal_lines l
                           JOIN journal_entries je ON je.id = l.entry_id
                           WHERE je.movement_id = $1 ORDER BY je.id, l.line_no";
        let rows: Vec<(String, String, String)> =
            on_pool!(self, pool => sqlx::query_as(SQL).bind(movement_id).fetch_all(pool).await)
                .expect("lines");
        rows.into_iter()
            .map(|(account, currency, amount)| {
                let amount: rust_decimal::Decimal = amount.parse().expect("decimal");
                format!("{account} {currency} {}", amount.normalize())
            })
            .collect()
    }

    /// Runs `settle verify` over the store and returns the names of failed checks.
    pub async fn failed_invariants(&self) -> Vec<String> {
        self.store
            .verify()
            .await
            .expect("verify runs")
            .into_iter()
            .filter(|check| check.violations > 0)
            .map(|check| format!("{}: {:?}", check.name, check.samples))
            .collect()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The canonical schema's delivery body for `kind` with `data` fields.
pub fn canonical(kind: &str, data: serde_json::Value) -> String {
    serde_json::json!({"type": format!("settlement.{kind}"), "timestamp": "2026-11-30T12:00:00Z", "data": data})
        .to_string()
}

/// A valid `charge_settled` body.
pub fn charge(movement_id: &str, gross: &str, fee: &str, net: &str) -> String {
    canonical(
        "charge_settled",
        serde_json::json!({
            "movement_id": movement_id, "occurred_at": "2026-11-30T11:59:00Z", "currency": "USD",
            "gross": gross, "fee": fee, "net": net, "payout_id": "po_9", "reference": "order-42"
        }),
    )
}

/// A `charge_settled` event of the `std` source, as the ingress would hand it to the store.
pub fn new_charge(external_id: &str, movement_id: &str, gross: &str) -> ledger::NewEvent {
    let body: serde_json::Value =
        serde_json::from_str(&charge(movement_id, gross, "0.00", gross)).expect("json");
    let data = body["data"].as_object().expect("data").clone();
    let event = ledger::SettlementEvent::from_canonical(ledger::Kind::ChargeSettled, &data)
        .expect("valid facts");
    ledger::NewEvent {
        source: ledger::SourceName::parse("std").expect("source"),
        external_id: ledger::ExternalId::parse(external_id).expect("id"),
        payload: body.to_string(),
        content: ledger::Content::Valid(event),
    }
}

/// An HTTP client that answers a redirect as it comes.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}
