//! `/metrics` over HTTP for the tools (nodesim, loadgen); the servers serve
//! theirs beside `/v1/status` in `cluster::http`.

use std::net::SocketAddr;

/// Prometheus's text exposition format, version 0.0.4.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4";

/// Serves `GET /metrics` on `addr` until the process ends, answering with
/// whatever `render` returns; returns the bound address (`addr` may ask for port 0).
pub async fn serve_metrics<F>(addr: SocketAddr, render: F) -> std::io::Result<SocketAddr>
where
    F: Fn() -> String + Clone + Send + Sync + 'static,
{
    use axum::{http::header, routing::get, Router};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move { ([(header::CONTENT_TYPE, TEXT_FORMAT)], render()) }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("metrics server stopped: {e}");
        }
    });
    Ok(bound)
}
