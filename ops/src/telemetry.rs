//! Logs: to stderr (stdout is for command output), human-readable on a terminal and JSON
//! otherwise unless `log.format` says which. `RUST_LOG` filters (default `info`). Nothing logs a
//! payload, a secret or a token.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

static JSON: AtomicBool = AtomicBool::new(false);

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"))
}

/// Logs to stderr in `format` (`auto`: text on a terminal, JSON otherwise).
pub fn init(format: LogFormat) {
    let json = match format {
        LogFormat::Auto => !std::io::stderr().is_terminal(),
        LogFormat::Json => true,
        LogFormat::Text => false,
    };
    let builder = tracing_subscriber::fmt()
        // A log that cannot be written (stderr's reader gone) is dropped, not reported on stderr:
        // that report would panic the task that logged (the signal handler's, say).
        .log_internal_errors(false)
        .with_env_filter(filter())
        .with_writer(std::io::stderr);
    let result = match json {
        true => builder.json().flatten_event(true).try_init(),
        // Colour only on a terminal: a file or a collector gets plain text.
        false => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
    // Already initialised (tests start several apps in one process): keep the first.
    if result.is_ok() {
        JSON.store(json, Ordering::Relaxed);
    }
}

/// Whether this process logs JSON to stderr (a command's failure is then logged as well as
/// printed).
pub fn logs_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Logs appended to `path` instead of stderr: JSON for test runs whose logs are checked, text
/// for a person (the demo's log).
pub fn init_to_file(path: &std::path::Path, format: LogFormat) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let builder = tracing_subscriber::fmt()
        // As in `init`.
        .log_internal_errors(false)
        .with_env_filter(filter())
        .with_writer(std::sync::Mutex::new(file));
    let result = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Auto | LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
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
