//! The HTTP server (hyper 1 on tokio): `/metrics`, `/healthz` and `/`. It
//! only serves what the [`App`] holds; it never touches the host.
//! (Skeleton: the accept loop with limits lands with its tests.)

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::app::App;
use crate::config::WebLimits;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid listen address {0:?}: {1}")]
    Address(String, String),
    #[error("cannot listen on {0}: {1}")]
    Bind(String, std::io::Error),
}

/// Binds every listen address (`:9879`, `0.0.0.0:9879`, `[::1]:9879`).
pub async fn bind(addresses: &[String]) -> Result<Vec<TcpListener>, ServerError> {
    let _ = addresses;
    Ok(Vec::new())
}

/// Serves until `shutdown` resolves, then drains open connections.
pub async fn serve(
    listeners: Vec<TcpListener>,
    app: Arc<App>,
    limits: WebLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let _ = (listeners, app, limits);
    shutdown.await;
    Ok(())
}
