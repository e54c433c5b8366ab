//! The edge of one server: its two listeners, how a connection gets in
//! (its place under the caps, its TLS handshake, raft's marker byte), and
//! the gRPC and HTTP servers the admitted connections are handed to.

use std::sync::Arc;
use std::time::Duration;

use stampede_proto::deployment_service_server::DeploymentServiceServer;
use stampede_proto::eval_service_server::EvalServiceServer;
use stampede_proto::job_service_server::JobServiceServer;
use stampede_proto::node_service_server::NodeServiceServer;
use stampede_proto::plan_service_server::PlanServiceServer;
use stampede_proto::raft_service_server::RaftServiceServer;
use stampede_proto::security::Role;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;

use super::error::ServerError;
use crate::api::http::HttpState;
use crate::api::{
    Api, Conn, ConnLimiter, ConnRefused, ConnTimeouts, GrpcAuthLayer, Guard, PeerApi, Port,
    ServerTls,
};
use crate::raft::RAFT_CONNECTION_MARKER;
use crate::raft::RAFT_H2_WINDOW;

/// Resolves once `stop` turns true.
pub(super) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Streams a client may reset before the server answers them, per
/// connection, before h2 treats it as an attack (CVE-2023-44487 "rapid
/// reset") and drops the connection.
const MAX_PENDING_RESETS: usize = 1_000;

/// A listener, how its connections are admitted, and the checks every call
/// on them passes.
pub(super) struct Listening {
    pub listener: TcpListener,
    pub edge: Edge,
    pub guard: Guard,
}

/// How a connection gets in: its place under the caps, then its TLS
/// handshake (when the server has TLS).
#[derive(Clone)]
pub(super) struct Edge {
    pub tls: Option<ServerTls>,
    pub limiter: Arc<ConnLimiter>,
}

impl Edge {
    fn timeouts(&self) -> ConnTimeouts {
        let l = self.limiter.limits();
        ConnTimeouts {
            handshake: l.handshake_timeout,
            first: l.header_timeout,
            idle: l.idle_timeout,
        }
    }

    /// The connection admitted and past its handshake, or `None` when it was
    /// refused (counted) or failed its handshake.
    async fn accept(&self, stream: TcpStream, port: Port) -> Option<Conn> {
        let ip = stream.peer_addr().ok()?.ip();
        let permit = self.limiter.admit(ip, port).ok()?;
        self.handshake(stream, permit).await
    }

    async fn handshake(
        &self,
        stream: TcpStream,
        permit: crate::api::limits::Permit,
    ) -> Option<Conn> {
        match Conn::accept(stream, self.tls.as_ref(), self.timeouts(), Some(permit)).await {
            Ok(conn) => Some(conn),
            Err(e) => {
                tracing::debug!("TLS handshake failed: {e}");
                None
            }
        }
    }

    /// Whether a connection is another server's, as the descriptor
    /// reserve requires: its certificate says so, or, without TLS, where
    /// roles are unknown, it is a raft connection.
    fn is_peer(&self, conn: &Conn, to_raft: bool) -> bool {
        match self.tls {
            Some(_) => conn.info.role == Some(Role::Server),
            None => to_raft,
        }
    }

    /// A raft connection goes on to raft's runtime only from a server (any
    /// caller without TLS, where roles are unknown).
    fn raft_may_take(&self, conn: &Conn) -> bool {
        let from_server = self.tls.is_none() || conn.info.role == Some(Role::Server);
        if !from_server {
            self.limiter.refused(&ConnRefused::RaftNotServer);
        }
        from_server
    }
}

/// Serves gRPC: raft's own connections (they open with the raft marker) on
/// raft's threads, everything else on the main runtime.
pub(super) async fn serve_grpc(
    api: Api,
    peer: PeerApi,
    listening: Listening,
    raft_threads: tokio::runtime::Handle,
    stop: watch::Receiver<bool>,
) -> Result<(), ServerError> {
    let limits = listening.edge.limiter.limits().clone();
    // The public and node services take messages of up to
    // --max-request-bytes; raft and plans (server to server) the most any
    // stampede endpoint sends. Answers may be large either way (a list of
    // every node).
    macro_rules! service {
        ($server:ident) => {
            $server::new(api.clone())
                .max_decoding_message_size(limits.max_request_bytes)
                .max_encoding_message_size(stampede_proto::MAX_MESSAGE_BYTES)
        };
    }
    let (main_tx, main_rx) = mpsc::channel(64);
    let (raft_tx, raft_rx) = mpsc::channel(16);
    let auth = GrpcAuthLayer(listening.guard);
    tokio::spawn(route_connections(
        listening.listener,
        listening.edge,
        main_tx,
        raft_tx,
        stop.clone(),
    ));
    let raft_server = raft_threads.spawn(
        grpc_builder(&limits)
            .initial_stream_window_size(RAFT_H2_WINDOW)
            .initial_connection_window_size(RAFT_H2_WINDOW)
            .layer(auth.clone())
            .add_service(stampede_proto::sized!(RaftServiceServer::new(peer.clone())))
            .serve_with_incoming_shutdown(ReceiverStream::new(raft_rx), stopped(stop.clone())),
    );
    grpc_builder(&limits)
        .layer(auth)
        // Forwarded writes arrive here, on unmarked connections.
        .add_service(stampede_proto::sized!(RaftServiceServer::new(peer)))
        .add_service(service!(NodeServiceServer))
        .add_service(service!(JobServiceServer))
        .add_service(service!(EvalServiceServer))
        .add_service(stampede_proto::sized!(PlanServiceServer::new(api.clone())))
        .add_service(service!(DeploymentServiceServer))
        .serve_with_incoming_shutdown(ReceiverStream::new(main_rx), stopped(stop))
        .await?;
    match raft_server.await {
        Ok(result) => result?,
        Err(e) => tracing::warn!("raft's gRPC server stopped: {e}"),
    }
    Ok(())
}

/// A gRPC server with the edge's limits on every connection and call.
fn grpc_builder(limits: &crate::api::EdgeLimits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        // When a partition heals, clients cancel the calls they gave up on
        // all at once; h2's default of 20 such resets tears the connection
        // down, failing the calls still on it.
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
        .max_concurrent_streams(limits.max_streams)
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        // A unary call's deadline; a stream's answer begins at once.
        .timeout(limits.request_timeout)
}

type Accepted = std::io::Result<Conn>;

/// The next connection on `listener`, or `None` once `stop` turns true. A
/// failed accept (out of file descriptors, say) waits a moment rather than spin.
async fn next_connection(
    listener: &TcpListener,
    stop: &watch::Receiver<bool>,
) -> Option<tokio::net::TcpStream> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => return Some(stream),
                Err(e) => {
                    tracing::warn!("accepting a connection on {:?}: {e}", listener.local_addr().ok());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped(stop.clone()) => return None,
        }
    }
}

/// Accepts connections on the `--rpc` listener and hands each to the server
/// that serves it, by its first byte: [`RAFT_CONNECTION_MARKER`] (read and
/// dropped) to raft's, anything else (HTTP/2's preface, or a TLS hello) to
/// the main one. The marker comes before TLS; the handshake follows it.
///
/// Each connection is admitted under the caps before anything is read,
/// and a raft connection without a server certificate is closed after its
/// handshake, before raft's runtime sees it. When descriptors are short, a
/// few connections are let into the reserve, to stay only if they are
/// another server's (its raft or its forwarded writes).
async fn route_connections(
    listener: TcpListener,
    edge: Edge,
    main: mpsc::Sender<Accepted>,
    raft: mpsc::Sender<Accepted>,
    stop: watch::Receiver<bool>,
) {
    while let Some(stream) = next_connection(&listener, &stop).await {
        let _ = stream.set_nodelay(true);
        let Some(ip) = stream.peer_addr().ok().map(|a| a.ip()) else {
            continue;
        };
        let Ok(permit) = edge.limiter.admit(ip, Port::Rpc) else {
            continue;
        };
        let (main, raft, edge) = (main.clone(), raft.clone(), edge.clone());
        tokio::spawn(async move {
            let Some((stream, to_raft)) = first_byte(stream, edge.timeouts().handshake).await
            else {
                return;
            };
            let in_reserve = permit.in_reserve().cloned();
            let Some(conn) = edge.handshake(stream, permit).await else {
                return;
            };
            if let Some(why) = in_reserve {
                if !edge.is_peer(&conn, to_raft) {
                    return edge.limiter.refused(&why);
                }
            }
            if !to_raft {
                let _ = main.send(Ok(conn)).await;
            } else if edge.raft_may_take(&conn) {
                let _ = raft.send(Ok(conn)).await;
            }
        });
    }
}

/// Whether a connection is raft's, by its first byte (the marker, read
/// and dropped); `None` if it closed, failed or stayed silent for `wait`.
async fn first_byte(mut stream: TcpStream, wait: Duration) -> Option<(TcpStream, bool)> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(wait, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == RAFT_CONNECTION_MARKER => {
            stream.read_exact(&mut first).await.ok()?;
            Some((stream, true))
        }
        Ok(Ok(n)) if n > 0 => Some((stream, false)),
        _ => None,
    }
}

/// Serves HTTP (`/metrics`, `/v1/status`, the worker admin calls), over
/// TLS when the server has it, each request passing the guard's checks.
pub(super) async fn serve_http(
    state: HttpState,
    listening: Listening,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt;

    let app = crate::api::http::router(state).layer(axum::middleware::from_fn_with_state(
        listening.guard,
        crate::api::http_auth,
    ));
    let limits = listening.edge.limiter.limits().clone();
    while let Some(stream) = next_connection(&listening.listener, &stop).await {
        let (app, edge, stop) = (app.clone(), listening.edge.clone(), stop.clone());
        let limits = limits.clone();
        tokio::spawn(async move {
            let Some(conn) = edge.accept(stream, Port::Http).await else {
                return;
            };
            let info = conn.info.clone();
            let app =
                app.map_request(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                    // In flight (the connection is not idle) while the
                    // request, and so this extension, lives.
                    req.extensions_mut().insert(Arc::new(info.activity.begin()));
                    req.extensions_mut().insert(info.clone());
                    req
                });
            let builder = http_builder(&limits);
            let serving =
                builder.serve_connection(TokioIo::new(conn), TowerToHyperService::new(app));
            tokio::select! {
                result = serving => if let Err(e) = result {
                    tracing::debug!("HTTP connection: {e}");
                },
                _ = stopped(stop) => {}
            }
        });
    }
    Ok(())
}

/// hyper's HTTP/1 and HTTP/2 with the edge's limits: a timer, so that the
/// header-read timeout and keepalive pings run at all.
fn http_builder(
    limits: &crate::api::EdgeLimits,
) -> hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor> {
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams)
        .keep_alive_interval(limits.keepalive_interval)
        .keep_alive_timeout(limits.keepalive_timeout);
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    #[tokio::test]
    async fn connections_are_routed_by_their_first_byte() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (main_tx, mut main_rx) = mpsc::channel(4);
        let (raft_tx, mut raft_rx) = mpsc::channel(4);
        let (stop_tx, stop_rx) = watch::channel(false);
        let edge = Edge {
            tls: None,
            limiter: ConnLimiter::new(
                crate::api::EdgeLimits {
                    max_conns_per_ip: 10,
                    max_conns: 10,
                    fd_reserve: 0,
                    handshake_timeout: Duration::from_secs(5),
                    header_timeout: Duration::from_secs(5),
                    idle_timeout: Duration::from_secs(5),
                    keepalive_interval: Duration::from_secs(5),
                    keepalive_timeout: Duration::from_secs(5),
                    max_streams: 10,
                    max_request_bytes: 1024,
                    request_timeout: Duration::from_secs(5),
                },
                &prometheus::Registry::new(),
            ),
        };
        let router = tokio::spawn(route_connections(listener, edge, main_tx, raft_tx, stop_rx));

        // A raft connection: the marker is consumed, what follows is intact.
        let mut raft_conn = TcpStream::connect(addr).await.unwrap();
        raft_conn
            .write_all(&[RAFT_CONNECTION_MARKER, b'P', b'R'])
            .await
            .unwrap();
        let mut routed = raft_rx.recv().await.unwrap().unwrap();
        let mut first = [0u8; 2];
        routed.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"PR");

        // Anything else (HTTP/2's preface) goes to the main server untouched.
        let mut plain = TcpStream::connect(addr).await.unwrap();
        plain.write_all(b"PRI * HTTP/2.0").await.unwrap();
        let mut routed = main_rx.recv().await.unwrap().unwrap();
        let mut first = [0u8; 3];
        routed.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"PRI");
        assert!(
            raft_rx.try_recv().is_err(),
            "the plain connection went to raft"
        );

        // A connection closed before its first byte goes nowhere: once the
        // router stops, no connection is left to hand on.
        drop(TcpStream::connect(addr).await.unwrap());
        let _ = stop_tx.send(true);
        router.await.unwrap();
        assert!(
            main_rx.recv().await.is_none(),
            "a closed connection was routed"
        );
        assert!(
            raft_rx.recv().await.is_none(),
            "a closed connection was routed"
        );
    }
}
