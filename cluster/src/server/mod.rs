//! One server, put together as openraft's `raft-kv-rocksdb` example puts
//! its node together, one named step each: the edge's security and caps
//! (`Secured`), what raft keeps and applies to (`open_storage`), the
//! network between servers (`network`), raft on its own threads
//! (`Started`), the control plane and the writes' proposer (`App`), and the
//! servers and tasks that run until `shutdown` resolves (`Serving`).
//! [`config`] is the one home of every server default; `listen` admits
//! connections and serves gRPC and HTTP on them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::ClientTlsConfig;

pub mod config;
pub mod error;
mod listen;

use self::config::ServeOpts;
use self::error::ServerError;
use self::listen::{serve_grpc, serve_http, stopped, Edge, Listening};
use crate::api::http::HttpState;
use crate::api::{Api, ConnLimiter, Guard, PeerApi, ServerTls};
use crate::control::{ControlConfig, ControlPlane, Foundations};
use crate::raft::log_store::{Identity, LogStore};
use crate::raft::metrics::Metrics;
use crate::raft::runtime::RaftRuntime;
use crate::raft::Raft;
use crate::raft::{contact, election};
use crate::raft::{NetworkFactory, PeerChannels, Proposer, StateMachine, Tickets};
use crate::state::contact::{Contact, Touch};

/// `cluster serve`: [`run`] on a runtime of `opts.threads` worker threads
/// (else one per core). Here rather than in the binary so that the
/// server's async code is compiled once, in this crate: an optimised
/// build compiles an async fn's body again in each crate that polls it.
pub fn run_blocking(opts: ServeOpts) -> anyhow::Result<()> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = opts.threads {
        runtime.worker_threads(n as usize);
    }
    runtime.enable_all().build()?.block_on(run(opts))
}

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
    let metrics = Arc::new(Metrics::new());
    let secured = Secured::new(&opts, &metrics)?;
    let (log_store, state_machine, parts) = open_storage(&opts, &metrics)?;
    let (network, channels) = network(&opts, &secured, &metrics);
    let started = Started::raft(&opts, network, log_store, state_machine).await?;
    let app = App::build(&opts, &started.raft, parts, channels, &metrics);
    let serving = Serving::start(&opts, secured, &app, &started, rpc, http, metrics);
    join_cluster(&opts, &started.raft).await;
    tracing::info!(id = opts.id, rpc = %opts.rpc, http = %opts.http, "server started");

    shutdown.await;
    tracing::info!("shutting down");
    serving.stop(&app, started).await
}

/// How this server proves itself and admits others: its TLS on both
/// listeners, the certificate it calls its peers with, who may call what,
/// and the caps on connections.
struct Secured {
    /// How a connection gets in (the caps, then TLS).
    edge: Edge,
    /// The checks every call passes (certificate role, ACL token).
    guard: Guard,
    /// This server's own certificate, presented to its peers; `None` with
    /// `--insecure`.
    peer_tls: Option<ClientTlsConfig>,
}

impl Secured {
    /// Refuses a certificate tonic cannot use before anything is opened,
    /// and warns when the server runs without TLS.
    fn new(opts: &ServeOpts, metrics: &Metrics) -> Result<Self, ServerError> {
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
        Ok(Self {
            guard: Guard::new(security.tls.is_some(), security.acl.clone()),
            edge: Edge {
                tls: server_tls,
                limiter: ConnLimiter::new(opts.edge_limits(), metrics.registry()),
            },
            peer_tls,
        })
    }
}

/// What the state machine and the control plane share, made before raft:
/// the state store and the observer it reports to, the forwarded writes it
/// finishes, and whether this server is in touch with the cluster.
struct AppParts {
    control: ControlConfig,
    foundations: Foundations,
    /// Forwarded writes this server waits on, finished by the state machine.
    tickets: Arc<Tickets>,
    /// Whether this server is in touch: read by the proposer and the
    /// blocking queries, kept by `raft::contact::follow` through `touch`.
    contact: Contact,
    touch: watch::Sender<Touch>,
}

/// What raft keeps (the log store) and what it applies to (the state
/// machine over the state store), opened from `--data-dir`, with the parts
/// of the control plane that must exist before raft does, since the state
/// machine reports to them.
fn open_storage(
    opts: &ServeOpts,
    metrics: &Arc<Metrics>,
) -> Result<(LogStore, StateMachine, AppParts), ServerError> {
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
    let parts = AppParts {
        control,
        foundations,
        tickets,
        contact,
        touch,
    };
    Ok((log_store, state_machine, parts))
}

/// The network between servers: raft's (dialled from raft's own threads)
/// and the control plane's, for forwarded writes and leader-only calls.
fn network(
    opts: &ServeOpts,
    secured: &Secured,
    metrics: &Arc<Metrics>,
) -> (NetworkFactory, PeerChannels) {
    let via = opts.dial_overrides();
    let raft = NetworkFactory {
        channels: PeerChannels::for_raft(via.clone(), secured.peer_tls.clone()),
        metrics: metrics.clone(),
    };
    (raft, PeerChannels::new(via, secured.peer_tls.clone()))
}

/// Raft, running on threads of its own.
struct Started {
    raft: Raft,
    /// Raft's threads, dropped once raft has shut down.
    runtime: RaftRuntime,
    /// Told by the leadership watcher whether this server leads (how it
    /// syncs).
    log_store: LogStore,
    /// Raft's channels to its peers, shared with the pre-vote.
    channels: PeerChannels,
}

impl Started {
    async fn raft(
        opts: &ServeOpts,
        network: NetworkFactory,
        log_store: LogStore,
        state_machine: StateMachine,
    ) -> Result<Self, ServerError> {
        let config = Arc::new(opts.raft_config().map_err(ServerError::RaftConfig)?);
        let runtime = RaftRuntime::start().map_err(ServerError::RaftRuntime)?;
        let (id, store) = (opts.id, log_store.clone());
        let channels = network.channels.clone();
        let raft = runtime
            .run(async move { Raft::new(id, config, network, store, state_machine).await })
            .await
            .map_err(|e| ServerError::Raft(e.to_string()))?;
        Ok(Self {
            raft,
            runtime,
            log_store,
            channels,
        })
    }
}

/// The application on top of raft: the proposer every write goes through
/// and the control plane.
struct App {
    cp: Arc<ControlPlane>,
    /// Kept by `raft::contact::follow` once the servers run.
    touch: watch::Sender<Touch>,
}

impl App {
    fn build(
        opts: &ServeOpts,
        raft: &Raft,
        parts: AppParts,
        channels: PeerChannels,
        metrics: &Arc<Metrics>,
    ) -> Self {
        let proposer = Proposer::new(
            raft.clone(),
            parts.foundations.store.clone(),
            channels.clone(),
            parts.tickets,
            metrics.clone(),
            opts.leader_wait(),
            opts.raft_batching.is_on(),
        )
        .with_quotas(opts.quotas())
        .with_contact(parts.contact, opts.touch_wait());
        let cp = ControlPlane::new(
            opts.id,
            raft.clone(),
            parts.foundations,
            proposer,
            channels,
            parts.control,
            metrics.registry(),
        );
        Self {
            cp,
            touch: parts.touch,
        }
    }
}

/// The servers and tasks of a running server, stopped together.
struct Serving {
    /// Turns true to stop every server and task.
    stop: watch::Sender<bool>,
    grpc: JoinHandle<Result<(), ServerError>>,
    http: JoinHandle<std::io::Result<()>>,
    /// The liveness echo's thread and what stops it, if it could bind.
    echo: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl Serving {
    /// Starts gRPC and HTTP on their listeners, and the tasks that follow
    /// raft: its gauges, this server's contact with the cluster, and the
    /// control plane's leadership.
    fn start(
        opts: &ServeOpts,
        secured: Secured,
        app: &App,
        started: &Started,
        rpc: TcpListener,
        http: TcpListener,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let Secured { edge, guard, .. } = secured;
        let (cp, raft) = (&app.cp, &started.raft);
        tokio::spawn(resolve_peers(
            edge.limiter.clone(),
            peer_addrs(opts),
            stop_rx.clone(),
        ));
        tokio::spawn(crate::raft::catch_up::follow(
            raft.clone(),
            opts.catch_up_rule(),
            metrics.clone(),
            stop_rx.clone(),
        ));
        let api = Api {
            store: cp.store().clone(),
            blocking: cp.blocking.clone(),
            proposer: cp.proposer.clone(),
            calls: cp.calls.clone(),
        };
        let election = Arc::new(election::Latest::default());
        let peer = PeerApi {
            raft: raft.clone(),
            proposer: cp.proposer.clone(),
            metrics: metrics.clone(),
            snapshots: Default::default(),
            members: Arc::new(opts.peers.0.keys().copied().collect()),
            timing: opts.election_timing(),
            election: election.clone(),
        };
        let rpc_addr = rpc.local_addr();
        let listening = |listener| Listening {
            listener,
            edge: edge.clone(),
            guard: guard.clone(),
        };
        let grpc = tokio::spawn(serve_grpc(
            api,
            peer,
            listening(rpc),
            started.runtime.handle(),
            stop_rx.clone(),
        ));
        let http_state = HttpState {
            raft: raft.clone(),
            metrics: metrics.clone(),
            fleet: cp.fleet.clone(),
            workers: cp.workers.clone(),
            calls: cp.calls.clone(),
        };
        let http = tokio::spawn(serve_http(http_state, listening(http), stop_rx.clone()));
        // On raft's threads, beside the core whose timer it replaces.
        started.runtime.handle().spawn(election::drive(
            raft.clone(),
            started.channels.clone(),
            opts.election_timing(),
            election,
            metrics.clone(),
            stop_rx.clone(),
        ));
        tokio::spawn(watch_raft(
            raft.clone(),
            metrics,
            started.log_store.clone(),
            stop_rx.clone(),
        ));
        tokio::spawn(contact::follow(
            raft.clone(),
            opts.contact_lease(),
            app.touch.clone(),
            stop_rx.clone(),
        ));
        tokio::spawn(cp.clone().run_leadership(stop_rx));
        let echo = start_echo(&rpc_addr);
        Self {
            stop,
            grpc,
            http,
            echo,
        }
    }

    /// Stops the tasks, the control plane and raft, then gives the calls
    /// in flight a moment to finish; blocking queries and streams that
    /// would hold the server for minutes are cut at its end.
    async fn stop(self, app: &App, started: Started) -> Result<(), ServerError> {
        let _ = self.stop.send(true);
        if let Some((stop, thread)) = self.echo {
            // Its port free again before this returns: a server started
            // again in this process binds it anew.
            stop.store(true, Ordering::Relaxed);
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        app.cp.shutdown();
        if let Err(e) = started.raft.shutdown().await {
            tracing::warn!("raft shutdown: {e}");
        }
        drop(started);
        match tokio::time::timeout(SHUTDOWN_GRACE, self.grpc).await {
            Ok(Ok(Err(e))) => return Err(e),
            Ok(_) => {}
            Err(_) => tracing::info!("calls still open after {SHUTDOWN_GRACE:?} are cut"),
        }
        if let Ok(Ok(Err(e))) = tokio::time::timeout(SHUTDOWN_GRACE, self.http).await {
            return Err(ServerError::Http(e));
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// The liveness echo on the gRPC listener's UDP port
/// ([`stampede_proto::liveness`]), so callers find a paused server within
/// a fraction of an election; without the port (taken by another socket)
/// the server runs without it.
fn start_echo(
    rpc: &std::io::Result<std::net::SocketAddr>,
) -> Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)> {
    let addr = rpc.as_ref().ok()?;
    let stop = Arc::new(AtomicBool::new(false));
    match stampede_proto::liveness::start_echo(*addr, stop.clone()) {
        Ok(thread) => Some((stop, thread)),
        Err(e) => {
            tracing::warn!("no liveness echo on udp {addr}: {e}; callers find a pause later");
            None
        }
    }
}

/// Static membership: every server proposes the same initial membership.
/// The entry is identical on all of them, so whoever wins the first
/// election, the cluster forms once a quorum is up. A server with any raft
/// state already is past this point and refuses, which is what we want.
async fn join_cluster(opts: &ServeOpts, raft: &Raft) {
    let members: BTreeMap<_, _> = opts
        .peers
        .0
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr.to_string())))
        .collect();
    if let Err(e) = raft.initialize(members).await {
        tracing::debug!("initialize: {e} (this server has raft state already)");
    }
}

/// How long calls in flight get to finish once a server is told to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The other servers' `--peers` and `--peer-via` addresses, for the
/// descriptor reserve.
fn peer_addrs(opts: &ServeOpts) -> Vec<String> {
    opts.peers
        .0
        .iter()
        .filter(|(id, _)| **id != opts.id)
        .map(|(_, a)| a.to_string())
        .chain(opts.dial_overrides().into_values())
        .collect()
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
                metrics.elections.leader_changes.inc();
            }
            leader = m.current_leader;
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}
