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
    /// Ingress, workers and the operator plane in one process.
    Serve,
    /// The ingress alone (a fleet member).
    Ingress,
    /// Workers alone (a fleet member); no HTTP.
    Worker,
    /// The operator plane alone: API, dashboard, metrics (no webhooks, no workers).
    Console,
}

impl Role {
    /// Serves webhooks on the public listener.
    fn serves_webhooks(self) -> bool {
        matches!(self, Role::Serve | Role::Ingress)
    }

    /// Serves the API and dashboard on the internal listener.
    fn serves_operators(self) -> bool {
        matches!(self, Role::Serve | Role::Console)
    }

    fn serves_http(self) -> bool {
        self != Role::Worker
    }

    fn runs_workers(self) -> bool {
        matches!(self, Role::Serve | Role::Worker)
    }
}

/// One bound listener and what it serves.
#[derive(Debug)]
struct Plane {
    listener: TcpListener,
    router: Router,
    /// What it serves, logged once listening.
    endpoints: Vec<(&'static str, String)>,
}

/// A built, bound, not yet running settle process.
#[derive(Debug)]
pub struct App {
    /// `listen`: webhooks and `/healthz`, for the providers (the internet).
    public: Option<Plane>,
    /// `ops_listen`: the API, the dashboard, `/metrics` and `/readyz`, for operators and the
    /// platform (a private network; loopback by default).
    internal: Option<Plane>,
    store: Store,
    workers: Option<Workers>,
    /// Where workers run: the sources' balances checked against their providers'.
    balance_checks: Option<crate::feeds::BalanceChecks>,
    http: HttpSettings,
}

/// Connections the internal listener keeps for itself out of the process' cap: operators and
/// scrapers are few, and a flood on the public listener never locks them out.
fn internal_share(cap: usize) -> usize {
    (cap / 16).clamp(8, 256)
}

async fn bind(addr: std::net::SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({what})"))
}

impl App {
    /// Binds the listeners first (port 0 picks a free one), then connects and migrates.
    pub async fn build(config: &Config, role: Role) -> anyhow::Result<App> {
        // The recorder first: what is counted before the first scrape must not be lost.
        crate::telemetry::metrics();
        let public = match role.serves_webhooks() {
            true => Some(bind(config.listen, "listen").await?),
            false => None,
        };
        let internal = match role.serves_http() {
            true => Some(bind(config.ops_listen, "ops_listen").await?),
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
        // Only a role that verifies webhooks reads their signing secrets.
        let sources = match role.serves_webhooks() {
            true => Some(config.sources()?),
            false => None,
        };
        for (source, note) in config.source_notes()? {
            tracing::warn!(%source, "{note}");
        }
        let workers = match role.runs_workers() {
            true => Some(build_workers(config, &store).await?),
            false => None,
        };
        let balance_checks = match role.runs_workers() {
            true => Some(crate::feeds::BalanceChecks {
                store: store.clone(),
                sources: config.sources.iter().map(|s| s.name.clone()).collect(),
                resolvers: config.resolvers()?,
                rules: config.posting_rules(),
            }),
            false => None,
        };
        tracing::info!(?role, sources = config.sources.len(), backend = ?store.kind(), "settle built");
        let worker_health = workers.as_ref().map(Workers::health);
        let public = public.zip(sources).map(|(listener, sources)| {
            let router = health::public_router().merge(
                Ingress::new(
                    store.clone(),
                    sources,
                    config.body_bytes_max,
                    &config.ingress,
                )
                .router(),
            );
            Plane {
                listener,
                router: crate::request_id::layer(router),
                endpoints: public_endpoints(config),
            }
        });
        let internal = match internal {
            Some(listener) => Some(Plane {
                router: crate::request_id::layer(internal_router(
                    config,
                    role,
                    &store,
                    worker_health,
                )?),
                listener,
                endpoints: internal_endpoints(role),
            }),
            None => None,
        };
        Ok(App {
            public,
            internal,
            store,
            workers,
            balance_checks,
            http: config.http.clone(),
        })
    }

    /// The public listener's address (webhooks); roles without it have none.
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        let plane = self
            .public
            .as_ref()
            .context("this role serves no webhooks")?;
        Ok(plane.listener.local_addr()?)
    }

    /// The internal listener's address (API, dashboard, metrics); roles without HTTP have none.
    pub fn ops_addr(&self) -> anyhow::Result<SocketAddr> {
        let plane = self.internal.as_ref().context("this role serves no HTTP")?;
        Ok(plane.listener.local_addr()?)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs until `shutdown` is cancelled: the HTTP servers stop taking requests and finish
    /// the ones in flight; the workers stop fetching and finish their jobs. A worker role that
    /// cannot start cancels the whole process.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        if let Some(checks) = self.balance_checks {
            tokio::spawn(checks.run(shutdown.clone()));
        }
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
        let planes: Vec<(Plane, bool)> = [(self.public, false), (self.internal, true)]
            .into_iter()
            .filter_map(|(plane, internal)| plane.map(|plane| (plane, internal)))
            .collect();
        if planes.is_empty() {
            tracing::info!("no HTTP in this role: it posts recorded events");
            shutdown.cancelled().await;
        } else {
            let cap = server::connections_max(&self.http);
            let mut servers = tokio::task::JoinSet::new();
            for (plane, internal) in planes {
                let addr = plane.listener.local_addr()?;
                for (what, path) in &plane.endpoints {
                    tracing::info!("{what:<9} http://{addr}{path}");
                }
                let share = match internal {
                    true => internal_share(cap),
                    false => cap.saturating_sub(internal_share(cap)).max(1),
                };
                let (http, shutdown) = (self.http.clone(), shutdown.clone());
                servers.spawn(async move {
                    server::serve(plane.listener, plane.router, &http, share, shutdown).await
                });
            }
            while let Some(served) = servers.join_next().await {
                served.context("an HTTP server task panicked")?;
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

/// The internal listener's routes for `role`: `/metrics` and `/readyz` always; the API and the
/// dashboard (and `/` sending a browser there) where the role serves operators.
fn internal_router(
    config: &Config,
    role: Role,
    store: &Store,
    worker_health: Option<workers::WorkerHealth>,
) -> anyhow::Result<Router> {
    // The ingress's database role reads nothing of the backlog (README.md, Database roles).
    let mut router = health::internal_router(store.clone(), worker_health, role.serves_operators());
    let hosts = crate::hosts::AllowedHosts::new(&config.http.ops_hosts);
    if role.serves_operators() {
        let tokens = Arc::new(config.api_tokens()?);
        let guard = Arc::new(AuthGuard::new(config.http.auth_failures_per_minute));
        let timeout = Duration::from_millis(config.http.request_timeout_ms);
        let sources = api::SourceNames(Arc::new(
            config.sources.iter().map(|s| s.name.to_string()).collect(),
        ));
        // The API's and the dashboard's reads of the providers (a balance, a coverage) share one
        // set of clients and budgets.
        let resolvers = config.resolvers()?;
        let api = api::router(ApiState {
            store: store.clone(),
            tokens: tokens.clone(),
            rules: config.posting_rules(),
            guard: guard.clone(),
            sources: sources.clone(),
            resolvers: resolvers.clone(),
        });
        let dashboard = crate::dashboard::router(
            store.clone(),
            tokens,
            guard,
            &config.dashboard,
            sources,
            (resolvers, config.posting_rules(), config.source_notes()?),
        );
        router = router.route(
            "/",
            axum::routing::get(|| async { axum::response::Redirect::to("/dashboard") }),
        );
        router = router.merge(api.merge(dashboard).layer(axum::middleware::from_fn(
            move |request, next| request_deadline(timeout, request, next),
        )));
    }
    Ok(
        router.layer(axum::middleware::from_fn(move |request, next| {
            crate::hosts::check(hosts.clone(), request, next)
        })),
    )
}

/// What the public listener serves: webhooks (with the configured sources) and health.
fn public_endpoints(config: &Config) -> Vec<(&'static str, String)> {
    let sources: Vec<String> = config.sources.iter().map(|s| s.name.to_string()).collect();
    vec![
        (
            "webhooks",
            format!(
                "/webhooks/<source>  (sources: {})",
                match sources.is_empty() {
                    true => "none configured".to_owned(),
                    false => sources.join(", "),
                }
            ),
        ),
        ("health", "/healthz".to_owned()),
    ]
}

/// What the internal listener serves for `role`.
fn internal_endpoints(role: Role) -> Vec<(&'static str, String)> {
    let mut endpoints = Vec::new();
    if role.serves_operators() {
        endpoints.push(("API", "/api".to_owned()));
        endpoints.push(("dashboard", "/dashboard".to_owned()));
    }
    endpoints.push(("metrics", "/metrics".to_owned()));
    endpoints.push(("readiness", "/readyz".to_owned()));
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
        config.resolvers()?,
        config.workers.clone(),
    )?
    .with_retention(
        config.retention_policy(),
        std::time::Duration::from_secs(config.retention.prune_every_secs),
    ))
}
