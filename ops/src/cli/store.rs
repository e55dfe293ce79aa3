//! How a command reaches the store: an existing, migrated one for reads and decisions.

use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::config::Config;

/// Runs a command with an existing, migrated store, and closes the store after.
pub(super) async fn with_store<F, Fut>(config: &Config, command: F) -> anyhow::Result<()>
where
    F: FnOnce(ledger::Store) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let store = connect_existing(config).await?;
    let result = command(store.clone()).await;
    store.close().await;
    result
}

pub(super) async fn connect(config: &Config) -> anyhow::Result<ledger::Store> {
    ledger::Store::connect(&config.database_url, &config.store_options())
        .await
        .context("cannot connect to the database")
}

/// A store that already exists and is migrated; anything else is said in one sentence, and an
/// SQLite file that is not there is not created.
pub(super) async fn connect_existing(config: &Config) -> anyhow::Result<ledger::Store> {
    let shown = crate::config::redact_url(&config.database_url);
    if let Some(path) = sqlite_file(&config.database_url)
        && !path.exists()
    {
        bail!(
            "no settle store at {shown}: the file {} does not exist (`settle migrate` or `settle serve` creates it)",
            path.display()
        );
    }
    let store = connect(config).await?;
    if let Err(error) = store.ready().await {
        store.close().await;
        bail!(
            "the store at {shown} is not ready for settle ({error}); run `settle migrate` with this DATABASE_URL"
        );
    }
    Ok(store)
}

/// The file of an SQLite URL (`sqlite://settle.db`, `sqlite:settle.db?mode=rwc`, its path
/// percent-decoded as sqlx reads it); none for an in-memory database or another backend.
pub(super) fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let in_memory = path == ":memory:" || query.split('&').any(|p| p == "mode=memory");
    let path = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .ok()?;
    (!path.is_empty() && !in_memory).then(|| PathBuf::from(path.as_ref()))
}
