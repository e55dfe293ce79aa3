//! The composition root: binds, connects, migrates, and wires the roles together.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use ingress::Ingress;
use ledger::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use workers::Workers;

use crate::abuse::AuthGuard;
use crate::api::{self, ApiState};
use crate::config::Config;
use crate::health;
use crate::server::{self, HttpSettings};

/// Which parts of settle a process runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// Ingress, workers and the ops API in one process.
    Serve,
    /// The ingress alone (a fleet member).
    Ingress,
    /// Workers alone (a fleet member); no HTTP.
    Worker,
}

impl Role {
    fn serves_http(self) -> bool {
        matches!(self, Role::Serve | Role::Ingress)
    }

    fn runs_workers(self) -> bool {
        matches!(self, Role::Serve | Role::Worker)
    }
}

/// A built, bound, not yet running settle process.
#[derive(Debug)]
pub struct App {
    listener: Option<TcpListener>,
    store: Store,
    router: Router,
    workers: Option<Workers>,
    http: HttpSettings,
    /// What this role serves and where, logged once listening.
    endpoints: Vec<(&'static str, String)>,
}

impl App {
    /// Binds the listener first (port 0 picks a free one), then connects and migrates.
    pub async fn build(config: &Config, role: Role) -> anyhow::Result<App> {
        // The recorder first: what is counted before the first scrape must not be lost.
        crate::telemetry::metrics();
        let listener = match role.serves_http() {
            true => Some(
                TcpListener::bind(config.listen)
                    .await
                    .with_context(|| format!("cannot listen on {}", config.listen))?,
            ),
            false => None,
        };
        let store = Store::connect(&config.database_url, &config.store_options())
            .await
            .context("cannot connect to the database")?;
        if config.migrate_on_start {
            store
                .migrate()
                .await
                .context("cannot migrate the database")?;
        }
        let sources = config.sources()?;
        let workers = match role.runs_workers() {
            true => Some(build_workers(config, &store).await?),
            false => None,
        };
        tracing::info!(?role, sources = sources.len(), backend = ?store.kind(), "settle built");
        let worker_health = workers.as_ref().map(Workers::health);
        let mut router = Router::new()
            .merge(health::router(store.clone(), worker_health))
            .merge(
                Ingress::new(
                    store.clone(),
                    sources,
                    config.body_bytes_max,
                    &config.ingress,
                )
                .router(),
            );
        if role == Role::Serve {
            let tokens = Arc::new(config.api_tokens()?);
            let guard = Arc::new(AuthGuard::new(config.http.auth_failures_per_minute));
            let timeout = Duration::from_millis(config.http.request_timeout_ms);
            let api = api::router(ApiState {
                store: store.clone(),
                tokens: tokens.clone(),
                rules: config.posting_rules(),
                guard: guard.clone(),
            });
            let dashboard =
                crate::dashboard::router(store.clone(), tokens, guard, &config.dashboard);
            router = router.route(
                "/",
                axum::routing::get(|| async { axum::response::Redirect::to("/dashboard") }),
            );
            router = router.merge(api.merge(dashboard).layer(axum::middleware::from_fn(
                move |request, next| request_deadline(timeout, request, next),
            )));
        }
        let router = router.layer(axum::middleware::from_fn(crate::request_id::propagate));
        Ok(App {
            listener,
            store,
            router,
            workers,
            http: config.http.clone(),
            endpoints: endpoints(config, role),
        })
    }

    /// The bound address (roles without HTTP have none).
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        let listener = self.listener.as_ref().context("this role serves no HTTP")?;
        Ok(listener.local_addr()?)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs until `shutdown` is cancelled: the HTTP server stops taking requests and finishes
    /// the ones in flight; the workers stop fetching and finish their jobs. A worker role that
    /// cannot start cancels the whole process.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let workers = self.workers.map(|workers| {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let result = workers.run(shutdown.clone()).await;
                if result.is_err() {
                    shutdown.cancel();
                }
                result
            })
        });
        match self.listener {
            Some(listener) => {
                let addr = listener.local_addr()?;
                for (what, path) in self.endpoints {
                    tracing::info!("{what:<9} http://{addr}{path}");
                }
                server::serve(listener, self.router, &self.http, shutdown.clone()).await;
            }
            None => {
                tracing::info!("no HTTP in this role: it posts recorded events");
                shutdown.cancelled().await
            }
        }
        if let Some(workers) = workers {
            workers.await.context("worker task panicked")??;
        }
        self.store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// What a role serves over HTTP, one line each: webhooks (with the configured sources), then the
/// API and dashboard (`serve` only), metrics and health.
fn endpoints(config: &Config, role: Role) -> Vec<(&'static str, String)> {
    if !role.serves_http() {
        return Vec::new();
    }
    let sources: Vec<String> = config.sources.iter().map(|s| s.name.to_string()).collect();
    let mut endpoints = vec![(
        "webhooks",
        format!(
            "/webhooks/<source>  (sources: {})",
            match sources.is_empty() {
                true => "none configured".to_owned(),
                false => sources.join(", "),
            }
        ),
    )];
    if role == Role::Serve {
        endpoints.push(("API", "/api".to_owned()));
        endpoints.push(("dashboard", "/dashboard".to_owned()));
    }
    endpoints.push(("metrics", "/metrics".to_owned()));
    endpoints.push(("health", "/healthz and /readyz".to_owned()));
    endpoints
}

/// An API or dashboard request gets `timeout` in all; past it, 408 with a typed body (and the
/// request's work is dropped), counted.
async fn request_deadline(
    timeout: Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            metrics::counter!("settle_http_request_timeouts_total").increment(1);
            (
                axum::http::StatusCode::REQUEST_TIMEOUT,
                axum::Json(serde_json::json!({"error": "request_timeout",
                    "message": format!("the request took longer than {} ms", timeout.as_millis())})),
            )
                .into_response()
        }
    }
}

async fn build_workers(config: &Config, store: &Store) -> anyhow::Result<Workers> {
    let worker_store = match &config.worker_database_url {
        Some(url) => Store::connect(url, &config.store_options())
            .await
            .context("cannot connect to WORKER_DATABASE_URL")?,
        None => store.clone(),
    };
    Ok(Workers::new(
        worker_store,
        config.posting_rules(),
        config.provider_apis()?,
        config.workers.clone(),
    )?)
}
