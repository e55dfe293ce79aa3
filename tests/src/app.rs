//! `spawn_app()`: the real settle app (router, store, and later workers) on a random port over a
//! fresh database.

use std::net::SocketAddr;

use ops::{App, Config, Role};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::db::TestDb;
use crate::sign;

/// The `std` source's current secret (the Standard Webhooks public test secret).
pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A second active secret of the `std` source (rotation).
pub const STANDARD_SECRET_OLD: &str = "whsec_b2xkIHNlY3JldCBvZiB0aGUgdGVzdHM=";
/// A well-formed secret no source has.
pub const STANDARD_SECRET_UNKNOWN: &str = "whsec_bm90IGEgc2VjcmV0IG9mIG91cnM=";

#[derive(Debug)]
pub struct TestApp {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    pub db: TestDb,
    pub pool: PgPool,
    shutdown: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

/// The app with the default test sources.
pub async fn spawn_app() -> TestApp {
    spawn_app_with("").await
}

/// The app with `extra` appended to the test configuration (more sources, limits...).
pub async fn spawn_app_with(extra: &str) -> TestApp {
    let db = TestDb::create().await;
    let config = Config::from_toml(&format!(
        r#"
        listen = "127.0.0.1:0"
        database_url = "{url}"
        {extra}

        [[sources]]
        name = "std"
        provider = "standard"
        secrets = ["{STANDARD_SECRET}", "{STANDARD_SECRET_OLD}"]
        "#,
        url = db.url,
    ))
    .expect("test configuration");
    ops::telemetry::init();
    let app = App::build(&config, Role::Serve).await.expect("app builds");
    let addr = app.local_addr().expect("bound");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(app.run(shutdown.clone()));
    let pool = db.pool().await;
    TestApp {
        addr,
        http: reqwest::Client::new(),
        db,
        pool,
        shutdown,
        task: Some(task),
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
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

    /// Rows in a table, for assertions on what was (not) written.
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }

    /// Rows of our queue in apalis' jobs table.
    pub async fn jobs(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM apalis.jobs WHERE job_type = 'settle::PostSettlement'",
        )
        .fetch_one(&self.pool)
        .await
        .expect("count jobs")
    }

    /// Stops the app and waits for it to finish.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.await.expect("app task").expect("app stops cleanly");
        }
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
