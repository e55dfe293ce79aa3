//! Logs: to stderr (stdout is for command output), human-readable on a terminal, JSON otherwise.
//! `RUST_LOG` filters (default `info`). Nothing logs a payload, a secret or a token.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if std::io::stderr().is_terminal() {
        builder.try_init()
    } else {
        builder.json().flatten_event(true).try_init()
    };
    // Already initialised (tests start several apps in one process): keep the first.
    drop(result);
}

/// JSON logs appended to `path` instead of stderr (for test runs whose logs are checked).
pub fn init_to_file(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"));
    let result = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::sync::Mutex::new(file))
        .json()
        .flatten_event(true)
        .try_init();
    drop(result);
    Ok(())
}

/// The process' Prometheus recorder, installed on first use (once per process, whatever the
/// number of apps in it).
pub fn metrics() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| {
        const SECONDS: &[f64] = &[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            60.0, 300.0,
        ];
        let builder = metrics_exporter_prometheus::PrometheusBuilder::new();
        let builder = builder
            .set_buckets(SECONDS)
            .unwrap_or_else(|_| metrics_exporter_prometheus::PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Another recorder may already be installed (a host embedding settle): keep it.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}
