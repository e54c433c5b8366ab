//! One server: opens its stores, starts raft, builds the control plane,
//! serves gRPC and HTTP on listeners it is given, and stops cleanly when
//! `shutdown` resolves. [`config`] is the one home of every server default.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
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

pub mod config;
pub mod error;

use self::config::ServeOpts;
use self::error::ServerError;
use crate::api::http::HttpState;
use crate::api::{
    Api, Conn, ConnLimiter, ConnRefused, ConnTimeouts, GrpcAuthLayer, Guard, PeerApi, Port,
    ServerTls,
};
use crate::control::{ControlPlane, Foundations};
use crate::raft::contact;
use crate::raft::log_store::{Identity, LogStore};
use crate::raft::metrics::Metrics;
use crate::raft::runtime::RaftRuntime;
use crate::raft::Raft;
use crate::raft::{
    NetworkFactory, PeerChannels, Proposer, StateMachine, Tickets, RAFT_CONNECTION_MARKER,
    RAFT_H2_WINDOW,
};
use crate::state::contact::Contact;

/// Binds the addresses in `opts` and serves until Ctrl-C or SIGTERM.
pub async fn run(opts: ServeOpts) -> anyhow::Result<()> {
    opts.validate().map_err(anyhow::Error::msg)?;
    // Refuse a server without TLS or --insecure before binding anything.
    opts.security().map_err(anyhow::Error::msg)?;
    // Connections must never take the descriptors raft's storage needs:
    // the soft limit goes up to the hard one, and `--fd-reserve` of them
    // stay free (`api::limits`).
    match crate::api::limits::raise_nofile_limit() {
        Ok(n) => tracing::info!(
            "open file limit (RLIMIT_NOFILE) {n}; {} kept for raft's storage",
            opts.fd_reserve
        ),
        Err(e) => tracing::warn!("cannot raise the open file limit (RLIMIT_NOFILE): {e}"),
    }
    let rpc = TcpListener::bind(opts.rpc)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on --rpc {}: {e}", opts.rpc))?;
    let http = TcpListener::bind(opts.http)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on --http {}: {e}", opts.http))?;
    serve(opts, rpc, http, stampede_proto::shutdown_signal()).await?;
    Ok(())
}

/// Serves one server on already-bound listeners until `shutdown` resolves.
pub async fn serve(
    opts: ServeOpts,
    rpc: TcpListener,
    http: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let security = opts.security().map_err(ServerError::Security)?;
    let server_tls = security.tls.as_ref().map(ServerTls::new).transpose()?;
    // Peers are called with this server's own certificate.
    let peer_tls = security.tls.as_ref().map(|m| m.client_config());
    if let Some(tls) = &peer_tls {
        tonic::transport::Endpoint::from_static("https://127.0.0.1")
            .tls_config(tls.clone())
            .map_err(|e| ServerError::Security(format!("--tls-cert/--tls-key: {e}")))?;
    }
    if security.tls.is_none() {
        tracing::warn!(
            "serving without TLS (--insecure): anyone who can reach {} may call raft and every internal API",
            opts.rpc
        );
    }
    let guard = Guard::new(security.tls.is_some(), security.acl.clone());
    let metrics = Arc::new(Metrics::new());
    let edge = Edge {
        tls: server_tls,
        limiter: ConnLimiter::new(opts.edge_limits(), metrics.registry()),
    };
    let peer_addrs: Vec<String> = opts
        .peers
        .0
        .iter()
        .filter(|(id, _)| **id != opts.id)
        .map(|(_, a)| a.to_string())
        .chain(opts.dial_overrides().into_values())
        .collect();
    let limiter = edge.limiter.clone();
    let identity = Identity {
        server_id: opts.id,
        members: opts.peers.0.keys().copied().collect(),
    };
    let log_store = LogStore::open(&opts.data_dir.join("raft"), &identity)?;
    let control = opts.control_config();
    let (touch, contact) = Contact::channel();
    let foundations = Foundations::new(&control, metrics.registry(), contact.clone());
    foundations.store.replayed_until(log_store.last_index()?);
    let observer = {
        let hub = foundations.hub.clone();
        Arc::new(move |c: &crate::state::Changes| hub.applied(c))
    };
    let tickets = Arc::new(Tickets::default());
    let state_machine = StateMachine::open(
        &opts.data_dir.join("snapshots"),
        foundations.store.clone(),
        metrics.clone(),
        observer,
        tickets.clone(),
    )?
    .with_apply_delay(opts.apply_delay);

    let config = Arc::new(opts.raft_config().map_err(ServerError::RaftConfig)?);
    // Raft's network dials from raft's own threads; forwarded writes and
    // leader-only calls from the control plane's.
    let via = opts.dial_overrides();
    let network = NetworkFactory {
        channels: PeerChannels::for_raft(via.clone(), peer_tls.clone()),
        metrics: metrics.clone(),
    };
    let channels = PeerChannels::new(via, peer_tls);
    let leadership_to_log = log_store.clone();
    let raft_runtime = RaftRuntime::start().map_err(ServerError::RaftRuntime)?;
    let id = opts.id;
    let raft = raft_runtime
        .run(async move { Raft::new(id, config, network, log_store, state_machine).await })
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?;

    let proposer = Proposer::new(
        raft.clone(),
        foundations.store.clone(),
        channels.clone(),
        tickets,
        metrics.clone(),
        opts.leader_wait(),
        opts.raft_batching.is_on(),
    )
    .with_quotas(opts.quotas())
    .with_contact(contact, opts.touch_wait());
    let cp = ControlPlane::new(
        opts.id,
        raft.clone(),
        foundations,
        proposer.clone(),
        channels,
        control,
        metrics.registry(),
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(resolve_peers(limiter, peer_addrs, stop_rx.clone()));
    let api = Api {
        store: cp.store().clone(),
        blocking: cp.blocking.clone(),
        proposer: proposer.clone(),
        calls: cp.calls.clone(),
    };
    let peer = PeerApi {
        raft: raft.clone(),
        proposer,
        metrics: metrics.clone(),
        snapshots: Default::default(),
        members: Arc::new(opts.peers.0.keys().copied().collect()),
    };
    let grpc = tokio::spawn(serve_grpc(
        api,
        peer,
        Listening {
            listener: rpc,
            edge: edge.clone(),
            guard: guard.clone(),
        },
        raft_runtime.handle(),
        stop_rx.clone(),
    ));
    let http_state = HttpState {
        raft: raft.clone(),
        metrics: metrics.clone(),
        fleet: cp.fleet.clone(),
        workers: cp.workers.clone(),
        calls: cp.calls.clone(),
    };
    let http_task = tokio::spawn(serve_http(
        http_state,
        Listening {
            listener: http,
            edge,
            guard,
        },
        stop_rx.clone(),
    ));
    tokio::spawn(watch_raft(
        raft.clone(),
        metrics.clone(),
        leadership_to_log,
        stop_rx.clone(),
    ));
    tokio::spawn(contact::follow(
        raft.clone(),
        opts.contact_lease(),
        touch,
        stop_rx.clone(),
    ));
    tokio::spawn(cp.clone().run_leadership(stop_rx));

    // Static membership: every server proposes the same initial membership.
    // The entry is identical on all of them, so whoever wins the first
    // election, the cluster forms once a quorum is up. A server with any raft
    // state already is past this point and refuses, which is what we want.
    let members: BTreeMap<_, _> = opts
        .peers
        .0
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr.to_string())))
        .collect();
    if let Err(e) = raft.initialize(members).await {
        tracing::debug!("initialize: {e} (this server has raft state already)");
    }
    tracing::info!(id = opts.id, rpc = %opts.rpc, http = %opts.http, "server started");

    shutdown.await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    cp.shutdown();
    if let Err(e) = raft.shutdown().await {
        tracing::warn!("raft shutdown: {e}");
    }
    drop(raft_runtime);
    // Calls in flight get a moment to finish; blocking queries and streams
    // that would hold the server for minutes are cut at its end.
    match tokio::time::timeout(SHUTDOWN_GRACE, grpc).await {
        Ok(Ok(Err(e))) => return Err(e),
        Ok(_) => {}
        Err(_) => tracing::info!("calls still open after {SHUTDOWN_GRACE:?} are cut"),
    }
    if let Ok(Ok(Err(e))) = tokio::time::timeout(SHUTDOWN_GRACE, http_task).await {
        return Err(ServerError::Http(e));
    }
    tracing::info!("stopped");
    Ok(())
}

/// How long calls in flight get to finish once a server is told to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Streams a client may reset before the server answers them, per
/// connection, before h2 treats it as an attack (CVE-2023-44487 "rapid
/// reset") and drops the connection.
const MAX_PENDING_RESETS: usize = 1_000;

/// A listener, how its connections are admitted, and the checks every call
/// on them passes.
struct Listening {
    listener: TcpListener,
    edge: Edge,
    guard: Guard,
}

/// How a connection gets in: its place under the caps, then its TLS
/// handshake (when the server has TLS).
#[derive(Clone)]
struct Edge {
    tls: Option<ServerTls>,
    limiter: Arc<ConnLimiter>,
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
async fn serve_grpc(
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

/// How often the peers' names are resolved again for the descriptor reserve
/// (a rescheduled pod comes back on a new address).
const PEER_RESOLVE_EVERY: Duration = Duration::from_secs(10);

/// Keeps the limiter's set of peer addresses current, for the descriptor
/// reserve (`api::limits::PEER_CONNS_IN_RESERVE`): the other servers'
/// `--peers` and `--peer-via` addresses, names resolved.
async fn resolve_peers(limiter: Arc<ConnLimiter>, addrs: Vec<String>, stop: watch::Receiver<bool>) {
    loop {
        let mut ips = std::collections::HashSet::new();
        for a in &addrs {
            match tokio::net::lookup_host(a.as_str()).await {
                Ok(found) => ips.extend(found.map(|s| s.ip())),
                Err(e) => tracing::debug!("resolving peer {a}: {e}"),
            }
        }
        limiter.set_peer_ips(ips);
        tokio::select! {
            _ = tokio::time::sleep(PEER_RESOLVE_EVERY) => {}
            _ = stopped(stop.clone()) => return,
        }
    }
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
async fn serve_http(
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

/// Mirrors raft's term and leadership into the raft gauges, and tells the
/// log store whether this server leads (how it syncs). It follows
/// openraft's server metrics, which change only with the vote or the
/// leadership; the log and applied indexes change with every entry, so
/// they are read when Prometheus scrapes ([`crate::api::http`]) rather
/// than waking this task for each one.
async fn watch_raft(
    raft: Raft,
    metrics: Arc<Metrics>,
    log_store: LogStore,
    mut stop: watch::Receiver<bool>,
) {
    let mut rx = raft.server_metrics();
    let mut leader = None;
    loop {
        {
            let m = rx.borrow_and_update();
            metrics.raft_term.set(m.vote.leader_id().get_term() as i64);
            let leading = m.current_leader == Some(m.id);
            metrics.raft_is_leader.set(i64::from(leading));
            log_store.set_leading(leading);
            if m.current_leader.is_some() && m.current_leader != leader {
                metrics.raft_leader_changes.inc();
            }
            leader = m.current_leader;
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
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
