//! `/metrics` in Prometheus's text format: rendered for every binary, and
//! served over HTTP for the tools (nodesim, loadgen); the servers serve theirs
//! beside `/v1/status` in `cluster::http`.

use std::net::SocketAddr;

use prometheus::{Encoder, Registry, TextEncoder};

/// A registry's metrics in Prometheus's text format.
pub fn render_metrics(registry: &Registry) -> String {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .expect("text encoding into a Vec cannot fail");
    String::from_utf8(buf).expect("Prometheus text format is UTF-8")
}

/// Serves `GET /metrics` on `addr` until the process ends; returns the bound
/// address (`addr` may ask for port 0).
pub async fn serve_metrics(addr: SocketAddr, registry: Registry) -> std::io::Result<SocketAddr> {
    use axum::{http::header, routing::get, Router};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
                    render_metrics(&registry),
                )
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("metrics server stopped: {e}");
        }
    });
    Ok(bound)
}
