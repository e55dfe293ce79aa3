//! `GET /healthz` (the process is up; on the public listener), `GET /readyz` (the database is
//! reachable, every migration is applied, and this process' workers are running where it runs
//! them) and `GET /metrics` (Prometheus), both on the internal listener.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ledger::Store;
use serde_json::json;
use tokio::sync::Mutex;
use workers::WorkerHealth;

#[derive(Clone, Debug)]
struct Health {
    store: Store,
    /// `None` where this process runs no workers.
    workers: Option<WorkerHealth>,
    /// Whether `/metrics` reads the fleet's backlog (queue, dead letters, conflicts, suspense,
    /// pauses): not where the process' database role may not read them (the ingress's), where
    /// the database's reachability is read from the schema's version alone.
    reads_backlog: bool,
    /// When the store's gauges were last read: a scrape reads them again only after
    /// [`GAUGES_MAX_AGE`], so a flood of scrapes cannot load the database.
    gauges_read: Arc<Mutex<Option<Instant>>>,
}

/// How old the store's gauges on `/metrics` may be.
const GAUGES_MAX_AGE: Duration = Duration::from_secs(5);

/// The public listener's health: `/healthz`, which reads nothing (a load balancer's probe).
pub fn public_router() -> Router {
    Router::new().route("/healthz", get(healthz))
}

/// The internal listener's: `/readyz` and `/metrics`, which read the store (the fleet's backlog
/// too when `reads_backlog`).
pub fn internal_router(store: Store, workers: Option<WorkerHealth>, reads_backlog: bool) -> Router {
    Router::new()
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Health {
            store,
            workers,
            reads_backlog,
            gauges_read: Arc::default(),
        })
}

async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn readyz(State(health): State<Health>) -> Response {
    let not_ready = |reason: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready", "error": reason})),
        )
            .into_response()
    };
    if let Err(error) = health.store.ready().await {
        tracing::warn!(%error, "not ready");
        return not_ready(match error {
            ledger::StoreError::ReadOnly => "database_read_only",
            error if error.is_transient() => "database_unreachable",
            _ => "database_not_ready",
        });
    }
    if health.workers.as_ref().is_some_and(|w| !w.is_running()) {
        return not_ready("workers_not_running");
    }
    Json(json!({"status": "ready"})).into_response()
}

/// Counters and histograms as recorded; the backlog gauges read from the store now.
async fn metrics(State(health): State<Health>) -> Response {
    // One scrape at a time refreshes; the others answer from the figures already recorded.
    if let Ok(mut read) = health.gauges_read.try_lock()
        && read.is_none_or(|at| at.elapsed() >= GAUGES_MAX_AGE)
    {
        refresh_gauges(&health).await;
        *read = Some(Instant::now());
    }
    if let Some(workers) = &health.workers {
        metrics::gauge!("settle_workers_running").set(if workers.is_running() { 1.0 } else { 0.0 });
    }
    let body = crate::telemetry::metrics().render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// Reads the backlog gauges from the store into the recorder, or only whether the database
/// answers where the process does not read the backlog.
async fn refresh_gauges(health: &Health) {
    if !health.reads_backlog {
        let up = match health.store.ready().await {
            Ok(()) => 1.0,
            Err(error) => {
                tracing::warn!(%error, "metrics: database unavailable");
                0.0
            }
        };
        metrics::gauge!("settle_database_up").set(up);
        return;
    }
    match health.store.gauges().await {
        Ok(gauges) => {
            metrics::gauge!("settle_queue_depth").set(gauges.queue_depth as f64);
            metrics::gauge!("settle_queue_oldest_pending_age_seconds")
                .set(gauges.oldest_pending_age_secs as f64);
            metrics::gauge!("settle_conflicts_open").set(gauges.open_conflicts as f64);
            for class in ["permanent", "exhausted"] {
                let open = gauges
                    .open_dead_letters
                    .iter()
                    .find(|(c, _)| c == class)
                    .map_or(0, |(_, n)| *n);
                metrics::gauge!("settle_dead_letters_open", "error_class" => class)
                    .set(open as f64);
            }
            for (source, open) in &gauges.provider_auth {
                metrics::gauge!("settle_dead_letters_open_provider_auth", "source" => source.clone())
                    .set(*open as f64);
            }
            for (account, entries) in &gauges.suspense {
                metrics::gauge!("settle_suspense_entries", "account" => account.clone())
                    .set(*entries as f64);
            }
            metrics::gauge!("settle_database_up").set(1.0);
        }
        Err(error) => {
            tracing::warn!(%error, "metrics: store gauges unavailable");
            metrics::gauge!("settle_database_up").set(0.0);
        }
    }
    // 1 for a source paused now, 0 for one paused before and since resumed; the same for a
    // pause settle made because the source's provider refused its key.
    match health.store.source_pauses(false, 1_000).await {
        Ok(pauses) => {
            let mut seen: Vec<&str> = Vec::new();
            for pause in &pauses {
                if seen.contains(&pause.source.as_str()) {
                    continue;
                }
                seen.push(&pause.source);
                let paused = pauses
                    .iter()
                    .any(|p| p.source == pause.source && p.resumed_at.is_none());
                metrics::gauge!("settle_source_paused", "source" => pause.source.clone())
                    .set(if paused { 1.0 } else { 0.0 });
                let refused = pauses.iter().any(|p| {
                    p.source == pause.source && p.resumed_at.is_none() && p.is_provider_auth()
                });
                metrics::gauge!("settle_source_paused_provider_auth", "source" => pause.source.clone())
                    .set(if refused { 1.0 } else { 0.0 });
            }
        }
        Err(error) => tracing::warn!(%error, "metrics: source pauses unavailable"),
    }
}
