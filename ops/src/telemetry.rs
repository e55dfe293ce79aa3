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
