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
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;

pub mod config;
pub mod error;

use self::config::ServeOpts;
use self::error::ServerError;
use crate::api::http::HttpState;
use crate::api::{Api, Conn, GrpcAuthLayer, Guard, PeerApi, ServerTls};
use crate::control::{ControlPlane, Foundations};
use crate::raft::log_store::{Identity, LogStore};
use crate::raft::metrics::Metrics;
use crate::raft::runtime::RaftRuntime;
use crate::raft::Raft;
use crate::raft::{
    NetworkFactory, PeerChannels, Proposer, StateMachine, Tickets, RAFT_CONNECTION_MARKER,
};

/// Binds the addresses in `opts` and serves until Ctrl-C or SIGTERM.
pub async fn run(opts: ServeOpts) -> anyhow::Result<()> {
    opts.validate().map_err(anyhow::Error::msg)?;
    // Refuse a server without TLS or --insecure before binding anything.
    opts.security().map_err(anyhow::Error::msg)?;
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
    let identity = Identity {
        server_id: opts.id,
        members: opts.peers.0.keys().copied().collect(),
    };
    let log_store = LogStore::open(&opts.data_dir.join("raft"), &identity)?;
    let control = opts.control_config();
    let foundations = Foundations::new(&control, metrics.registry());
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
    );
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
            tls: server_tls.clone(),
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
            tls: server_tls,
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
    if let Ok(Err(e)) = grpc.await {
        return Err(e);
    }
    if let Ok(Err(e)) = http_task.await {
        return Err(ServerError::Http(e));
    }
    Ok(())
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Streams a client may reset before the server answers them, per
/// connection, before h2 treats it as an attack (CVE-2023-44487 "rapid
/// reset") and drops the connection.
const MAX_PENDING_RESETS: usize = 1_000;

/// Serves gRPC: raft's own connections (they open with the raft marker) on
/// raft's threads, everything else on the main runtime.
/// A listener, the TLS its connections are accepted with, and the checks
/// every call on them passes.
struct Listening {
    listener: TcpListener,
    tls: Option<ServerTls>,
    guard: Guard,
}

async fn serve_grpc(
    api: Api,
    peer: PeerApi,
    listening: Listening,
    raft_threads: tokio::runtime::Handle,
    stop: watch::Receiver<bool>,
) -> Result<(), ServerError> {
    macro_rules! service {
        ($server:ident) => {
            stampede_proto::sized!($server::new(api.clone()))
        };
    }
    let (main_tx, main_rx) = mpsc::channel(64);
    let (raft_tx, raft_rx) = mpsc::channel(16);
    let auth = GrpcAuthLayer(listening.guard);
    tokio::spawn(route_connections(
        listening.listener,
        listening.tls,
        main_tx,
        raft_tx,
        stop.clone(),
    ));
    let raft_server = raft_threads.spawn(
        tonic::transport::Server::builder()
            .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
            .layer(auth.clone())
            .add_service(stampede_proto::sized!(RaftServiceServer::new(peer.clone())))
            .serve_with_incoming_shutdown(ReceiverStream::new(raft_rx), stopped(stop.clone())),
    );
    tonic::transport::Server::builder()
        // When a partition heals, clients cancel the calls they gave up on
        // all at once; h2's default of 20 such resets tears the connection
        // down, failing the calls still on it.
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
        .layer(auth)
        // Forwarded writes arrive here, on unmarked connections.
        .add_service(stampede_proto::sized!(RaftServiceServer::new(peer)))
        .add_service(service!(NodeServiceServer))
        .add_service(service!(JobServiceServer))
        .add_service(service!(EvalServiceServer))
        .add_service(service!(PlanServiceServer))
        .add_service(service!(DeploymentServiceServer))
        .serve_with_incoming_shutdown(ReceiverStream::new(main_rx), stopped(stop))
        .await?;
    match raft_server.await {
        Ok(result) => result?,
        Err(e) => tracing::warn!("raft's gRPC server stopped: {e}"),
    }
    Ok(())
}

/// How long a new connection may take to send its first byte.
const FIRST_BYTE_WAIT: Duration = Duration::from_secs(10);

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
async fn route_connections(
    listener: TcpListener,
    tls: Option<ServerTls>,
    main: mpsc::Sender<Accepted>,
    raft: mpsc::Sender<Accepted>,
    stop: watch::Receiver<bool>,
) {
    while let Some(mut stream) = next_connection(&listener, &stop).await {
        let _ = stream.set_nodelay(true);
        let (main, raft, tls) = (main.clone(), raft.clone(), tls.clone());
        tokio::spawn(async move {
            let mut first = [0u8; 1];
            let to = match tokio::time::timeout(FIRST_BYTE_WAIT, stream.peek(&mut first)).await {
                Ok(Ok(1)) if first[0] == RAFT_CONNECTION_MARKER => {
                    if stream.read_exact(&mut first).await.is_err() {
                        return;
                    }
                    raft
                }
                Ok(Ok(n)) if n > 0 => main,
                // Closed, failed or silent before its first byte.
                _ => return,
            };
            match Conn::accept(stream, tls.as_ref()).await {
                Ok(conn) => {
                    let _ = to.send(Ok(conn)).await;
                }
                Err(e) => tracing::debug!("TLS handshake failed: {e}"),
            }
        });
    }
}

/// Serves HTTP (`/metrics`, `/v1/status`, the worker admin calls), over
/// TLS when the server has it, each request passing the guard's checks.
async fn serve_http(
    state: HttpState,
    listening: Listening,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt;

    let app = crate::api::http::router(state).layer(axum::middleware::from_fn_with_state(
        listening.guard,
        crate::api::http_auth,
    ));
    while let Some(stream) = next_connection(&listening.listener, &stop).await {
        let (app, tls, stop) = (app.clone(), listening.tls.clone(), stop.clone());
        tokio::spawn(async move {
            let conn = match Conn::accept(stream, tls.as_ref()).await {
                Ok(conn) => conn,
                Err(e) => return tracing::debug!("HTTP TLS handshake failed: {e}"),
            };
            let info = conn.info.clone();
            let app =
                app.map_request(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(info.clone());
                    req
                });
            let builder = auto::Builder::new(TokioExecutor::new());
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
        let router = tokio::spawn(route_connections(listener, None, main_tx, raft_tx, stop_rx));

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
