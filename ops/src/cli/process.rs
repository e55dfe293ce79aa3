//! A serving process: its listeners, its run until a signal stops it, and the local health check
//! a container runs against it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, bail};

use tokio_util::sync::CancellationToken;

use crate::app::{App, Role};
use crate::config::Config;

/// Where a serving role listens, over the configuration's `listen` and `ops_listen`.
#[derive(Debug, Default, clap::Args)]
pub struct Listeners {
    /// The public listener: webhooks and /healthz (default: `listen` of the configuration,
    /// 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// The internal listener: the API, the dashboard, /metrics and /readyz (default:
    /// `ops_listen` of the configuration, 127.0.0.1:9090).
    #[arg(long, value_name = "ADDR")]
    ops_listen: Option<SocketAddr>,
}

pub(super) async fn serve(
    mut config: Config,
    listeners: Listeners,
    role: Role,
) -> anyhow::Result<()> {
    if let Some(listen) = listeners.listen {
        config.listen = listen;
    }
    if let Some(ops_listen) = listeners.ops_listen {
        config.ops_listen = ops_listen;
    }
    let app = App::build(&config, role).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    app.run(shutdown).await
}

/// SIGTERM or ctrl-c starts a graceful stop.
pub(super) async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(error) => {
                    tracing::error!(%error, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("stop requested");
    shutdown.cancel();
}

/// Where a local health check looks: `/healthz` on the listen port, on loopback when settle
/// listens on every address.
pub(super) fn health_url(listen: SocketAddr) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}/healthz", SocketAddr::new(ip, listen.port()))
}

pub(super) async fn healthcheck(url: String, timeout_secs: u64) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        // A proxy from the environment (which a container may inherit) never sees a local check.
        .no_proxy()
        .timeout(Duration::from_secs(timeout_secs.max(1)))
        .build()
        .context("cannot build an HTTP client")?;
    let response = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("{url}: no answer"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("{url}: {status}");
    }
    println!("{url}: {status}");
    Ok(())
}
