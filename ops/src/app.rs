//! The composition root: binds, connects, migrates, and wires the roles together.

use std::net::SocketAddr;

use anyhow::Context;
use axum::Router;
use ingress::Ingress;
use jobs::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::health;

/// Which parts of settle a process runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// Ingress, workers and the ops API in one process.
    Serve,
    /// The ingress alone (a fleet member).
    Ingress,
}

/// A built, bound, not yet running settle process.
#[derive(Debug)]
pub struct App {
    listener: TcpListener,
    store: Store,
    router: Router,
}

impl App {
    /// Binds the listener first (port 0 picks a free one), then connects and migrates.
    pub async fn build(config: &Config, role: Role) -> anyhow::Result<App> {
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
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
        tracing::info!(?role, sources = sources.len(), backend = ?store.kind(), "settle built");
        let router = Router::new()
            .merge(health::router(store.clone()))
            .merge(Ingress::new(store.clone(), sources, config.body_bytes_max).router());
        Ok(App {
            listener,
            store,
            router,
        })
    }

    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Serves until `shutdown` is cancelled, then lets in-flight requests finish.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let addr = self.local_addr()?;
        tracing::info!(%addr, "listening");
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .context("HTTP server failed")?;
        self.store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}
