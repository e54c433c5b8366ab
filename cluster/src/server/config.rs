//! Server options: the one home of every server default (`cluster serve --help`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use stampede_proto::acl::Acl;
use stampede_proto::security::{TlsArgs, TlsMaterial};

use crate::api::EdgeLimits;
use crate::control::leader::alloc_updates;
use crate::control::leader::broker::BrokerConfig;
use crate::control::leader::deployment_watcher::{WatcherConfig, WatcherMode};
use crate::control::leader::gc;
use crate::control::leader::heartbeat::HeartbeatConfig;
use crate::control::leader::LeaderConfig;
use crate::control::PlanBudget;
use crate::control::{ControlConfig, WorkerConfig, MAX_WORKERS};
use crate::raft::client_write::Quotas;
use crate::raft::NodeId;
use crate::scheduler::core::GcThresholds;
use crate::state::parking::ParkLimits;

/// Scheduler workers per core when `--workers` is not given. Nomad runs one
/// per core; here a worker spends nearly all of an evaluation waiting for
/// its plan's commit (an fsync on two servers, several times the
/// scheduling), and the plans that wait together share one raft entry. A
/// second worker per core placed small jobs a third faster here, for no
/// more CPU per placement (BENCHMARKS.md, the write path, twelfth round).
pub const WORKERS_PER_CORE: usize = 2;

/// The edge's defaults (docs/security.md, "Limits"). Connections per client
/// IP, as Nomad's `limits.rpc_max_conns_per_client` and
/// `http_max_conns_per_client`: nodesim's thousands of nodes and loadgen
/// share a few connections, and peers a handful each.
pub const MAX_CONNS_PER_IP: usize = 100;
/// Connections in all, both ports together.
pub const MAX_CONNS: usize = 4_096;
/// Descriptors kept free for RocksDB, snapshots and raft's peers.
pub const FD_RESERVE: usize = 256;
/// A TLS handshake, as Nomad's `limits.rpc_handshake_timeout`.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A request's headers (and, before its first request or without a client
/// certificate, a connection's whole idle life).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// HTTP/2 keepalive pings, and how long an answer may take.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Concurrent calls on one connection (hyper's own default is 200; loadgen
/// keeps more in flight on its few connections).
pub const MAX_STREAMS: u32 = 1_024;
/// A message of the public and node services: the largest valid job (100
/// task groups) or a node's batch of allocation updates is well under it.
/// Decoding may take a few hundred times a message's size (2 bytes on the
/// wire are an empty task group of 144 bytes decoded, or an allocation of
/// 376, in a vector that grows by doubling): 1 MiB of empty task groups
/// took 149 MiB (cluster/tests/integration/hostile_edge.rs).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// A unary call: blocking queries wait up to 600 s plus a sixteenth.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(660);

/// Every member of the cluster: server id to the address its peers dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers(pub BTreeMap<NodeId, PeerAddr>);

/// A peer's address, `HOST:PORT`: an IP address, or a DNS name resolved each
/// time the peer is dialled (a StatefulSet's stable pod names, whose IP
/// addresses change when a pod is rescheduled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddr {
    host: String,
    port: u16,
}

impl PeerAddr {
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl std::str::FromStr for PeerAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(PeerAddr {
                host: match a {
                    SocketAddr::V4(v4) => v4.ip().to_string(),
                    SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
                },
                port: a.port(),
            });
        }
        let bad = || format!("{s:?} is not HOST:PORT (an IP address or a DNS name, and a port)");
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
        let dns_name = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !dns_name {
            return Err(bad());
        }
        Ok(PeerAddr {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl std::str::FromStr for Peers {
    type Err = String;

    /// Parses `1=127.0.0.1:4647,2=server-2.stampede:4647,...`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut peers = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, addr) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not ID=HOST:PORT"))?;
            let id: NodeId = id.parse().ok().filter(|id| *id > 0).ok_or_else(|| {
                format!("{id:?} in {part:?} is not a server id (a whole number from 1)")
            })?;
            let addr: PeerAddr = addr.parse().map_err(|e| format!("{e} in {part:?}"))?;
            if peers.insert(id, addr).is_some() {
                return Err(format!("server id {id} is listed twice"));
            }
        }
        if peers.is_empty() {
            return Err("no peers given".into());
        }
        Ok(Peers(peers))
    }
}

impl std::fmt::Display for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(id, a)| format!("{id}={a}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// A feature switch on the command line: `on` or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

impl Switch {
    pub fn is_on(self) -> bool {
        self == Switch::On
    }
}

impl From<bool> for Switch {
    fn from(on: bool) -> Self {
        if on {
            Switch::On
        } else {
            Switch::Off
        }
    }
}

/// What `--tls-*`, `--acl-token-file` and `--insecure` come to.
#[derive(Debug, Clone)]
pub struct ServerSecurity {
    /// The server's own certificate, for accepting and for calling peers;
    /// `None` with `--insecure`.
    pub tls: Option<TlsMaterial>,
    pub acl: Option<Acl>,
}

#[derive(Debug, Clone, Args)]
pub struct ServeOpts {
    /// This server's id; must be one of the ids in --peers.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub id: NodeId,
    /// Address for gRPC: raft between servers and the public API.
    #[arg(long, default_value = "127.0.0.1:4647")]
    pub rpc: SocketAddr,
    /// Address for HTTP: /metrics and /v1/status.
    #[arg(long, default_value = "127.0.0.1:4646")]
    pub http: SocketAddr,
    /// Where the raft log and snapshots live.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Every member, itself included: ID=HOST:PORT,... of their --rpc
    /// addresses (HOST an IP address or a DNS name, e.g. a StatefulSet's
    /// stable pod names; each must use its server's --rpc port).
    #[arg(long)]
    pub peers: Peers,
    /// The cluster CA's certificate (PEM): callers and peers must present a
    /// certificate it signed (`cluster tls init` makes one).
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// This server's certificate (PEM); it must name the role server.stampede.
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    pub tls_key: Option<PathBuf>,
    /// The file holding the management ACL token: every call of the public
    /// API and the admin endpoints then needs a token (this one, or one that
    /// `cluster acl token` derived from it).
    #[arg(long, value_name = "FILE")]
    pub acl_token_file: Option<PathBuf>,
    /// Serve without TLS: anyone who reaches the ports may call anything,
    /// raft included, so it takes no --acl-token-file. For benchmarks of
    /// the bare protocol on a closed network.
    #[arg(long, conflicts_with_all = ["tls_ca", "tls_cert", "tls_key"])]
    pub insecure: bool,
    /// Dial these servers at these addresses instead of their --peers
    /// address, ID=HOST:PORT,...: for a proxy on the peer links, such as the
    /// one fault tests cut to partition a server. Raft and forwarded writes
    /// both take it.
    #[arg(long, hide_short_help = true)]
    pub peer_via: Option<Peers>,
    /// Leader heartbeat interval, in milliseconds. openraft 0.9 also gives
    /// each AppendEntries exactly this long and sends the batch again when it
    /// runs out, so it must cover a loaded follower's append and fsync; it
    /// does not slow failover, which the election timeout sets.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    pub heartbeat_ms: u64,
    /// Shortest election timeout, in milliseconds; the longest is twice this.
    /// openraft 0.9 lets a follower campaign only after the leader's lease
    /// (the longest timeout) and its random timeout (drawn once per process)
    /// have passed with no word from it: 0.75–1.0 s with the default, as
    /// Nomad and etcd fail over. It must stay above --heartbeat-ms, and it is
    /// also how long a candidate waits for each vote.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub election_timeout_ms: u64,
    /// Build a snapshot once this many entries were applied since the last one.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_entries: u64,
    /// Entries the log keeps behind its snapshot, at least, for followers
    /// behind to catch up from the log. The catch-up window grows past it
    /// with the write rate, so that a follower that installs the leader's
    /// snapshot still finds the entries after it (HashiCorp's rule: send
    /// and install time × writes a second, with a margin): window =
    /// max(--keep-entries, 2 × entries/s × (build s + send s)), at most
    /// --keep-max-bytes of entries. The rate is the log's growth over the
    /// last minute; the times are this server's last snapshot build and
    /// last send to a follower, install included (until one is timed, a
    /// send counts as two builds). A snapshot being sent also holds the
    /// entries after it.
    #[arg(long, default_value_t = 1_000)]
    pub keep_entries: u64,
    /// Most bytes of entries the catch-up window keeps behind a snapshot
    /// (see --keep-entries; its entries are kept whatever their size), so
    /// that the log's disk stays bounded however fast writes come. 0: keep
    /// --keep-entries only, a fixed window.
    #[arg(long, default_value_t = 1 << 30)]
    pub keep_max_bytes: u64,
    /// How long a write waits for a leader to be elected before it is refused, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub leader_wait_ms: u64,
    /// Gather writes that arrive while earlier raft entries are still in
    /// flight into one entry (and write a plan's evaluation outcome in the
    /// plan's entry); `off`: one message per entry, as Nomad writes them.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub raft_batching: Switch,
    /// Most allocations one submitted plan (and so one raft entry) carries:
    /// a larger plan, such as a system job on every node, goes in pieces.
    #[arg(long, default_value_t = PlanBudget::MAX_ALLOCS as u64,
          value_parser = clap::value_parser!(u64).range(1..=PlanBudget::LIMIT_ALLOCS as u64))]
    pub plan_max_allocs: u64,
    /// Most bytes of allocations one submitted plan carries.
    #[arg(long, default_value_t = PlanBudget::MAX_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1024..=PlanBudget::LIMIT_BYTES as u64))]
    pub plan_max_bytes: u64,
    /// Blocking queries one connection may keep parked (a node's own
    /// allocation queries are bounded per node instead); past it a query
    /// is refused with ResourceExhausted.
    #[arg(long, default_value_t = ParkLimits::PER_CONNECTION as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_parked_per_connection: u64,
    /// Blocking queries all connections together may keep parked here.
    #[arg(long, default_value_t = ParkLimits::TOTAL as u64,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_parked_queries: u64,
    /// Jobs the cluster holds (stopped ones until purged or collected);
    /// registering one more is refused with ResourceExhausted.
    #[arg(long, default_value_t = Quotas::MAX_JOBS as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub max_jobs: u64,
    /// Stamp each job's path (the broker's and workers' times, when each
    /// index applied) and time its stages: what `JobService.Trace` and
    /// "where the time went" read. `off` measures what they cost.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub job_times: Switch,
    /// Scheduler workers on this server (default: two per core).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_WORKERS as u64))]
    pub workers: Option<u64>,
    /// Threads serving the API and the control plane (raft has its own
    /// one). Default: one per core. Servers that share a machine each take
    /// their share of its cores (`cluster dev` and capacity runs give it).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
    /// Shortest heartbeat TTL given to a node.
    #[arg(long, default_value_t = HeartbeatConfig::default().min_ttl.into())]
    pub heartbeat_min_ttl: humantime::Duration,
    /// Time past a node's TTL before the leader marks it down.
    #[arg(long, default_value_t = HeartbeatConfig::default().grace.into())]
    pub heartbeat_grace: humantime::Duration,
    /// Heartbeats per second the leader takes; TTLs grow with the fleet to stay under it.
    #[arg(long, default_value_t = HeartbeatConfig::default().max_per_second)]
    pub max_heartbeats_per_second: f64,
    /// An evaluation a worker has not acked within this long is given to another.
    #[arg(long, default_value_t = BrokerConfig::default().nack_timeout.into())]
    pub nack_timeout: humantime::Duration,
    /// Deliveries of an evaluation before it is failed.
    #[arg(long, default_value_t = BrokerConfig::default().delivery_limit, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub delivery_limit: u32,
    /// When an evaluation is acked, cancel all but the newest evaluation
    /// waiting for the same job (its plan already covers them), in batches.
    #[arg(long, value_enum, default_value_t = Switch::from(BrokerConfig::default().eval_cancelation))]
    pub eval_cancelation: Switch,
    /// A nacked evaluation waits this long before its next delivery, after a
    /// first delivery (Nomad's default; 0s delivers again at once).
    #[arg(long, default_value_t = BrokerConfig::NACK_INITIAL_DELAY.into())]
    pub eval_nack_initial_delay: humantime::Duration,
    /// ...and this long times the deliveries past the first after later ones.
    #[arg(long, default_value_t = BrokerConfig::NACK_SUBSEQUENT_DELAY.into())]
    pub eval_nack_subsequent_delay: humantime::Duration,
    /// Send blocked evaluations back to the broker only when capacity
    /// appears in a node class (datacenter and class) their job may use
    /// (Nomad); `off`: every capacity change unblocks everything.
    #[arg(long, value_enum, default_value_t = Switch::from(LeaderConfig::default().unblock_by_class))]
    pub unblock_by_class: Switch,
    /// How often the leader queues garbage collection (core evaluations for
    /// evaluations, jobs, deployments and nodes); 0s: never on a timer.
    #[arg(long, default_value_t = gc::DEFAULT_INTERVAL.into())]
    pub gc_interval: humantime::Duration,
    /// Terminal evaluations (and their terminal allocations) are collected
    /// once unchanged for this long.
    #[arg(long, default_value_t = GcThresholds::default().eval.into())]
    pub eval_gc_threshold: humantime::Duration,
    /// The same for batch jobs' evaluations, once the job is stopped.
    #[arg(long, default_value_t = GcThresholds::default().batch_eval.into())]
    pub batch_eval_gc_threshold: humantime::Duration,
    /// Stopped jobs, and batch jobs whose work is done, are collected with
    /// everything of theirs once unchanged for this long.
    #[arg(long, default_value_t = GcThresholds::default().job.into())]
    pub job_gc_threshold: humantime::Duration,
    /// Finished deployments no allocation refers to are collected after this long.
    #[arg(long, default_value_t = GcThresholds::default().deployment.into())]
    pub deployment_gc_threshold: humantime::Duration,
    /// Nodes down this long with nothing live on them are collected.
    #[arg(long, default_value_t = GcThresholds::default().node.into())]
    pub node_gc_threshold: humantime::Duration,
    /// How long a worker waits for its state to reach an evaluation before it nacks.
    #[arg(long, default_value_t = WorkerConfig::RAFT_SYNC_LIMIT.into())]
    pub raft_sync_limit: humantime::Duration,
    /// After a worker's state fails to reach an evaluation in time, wait for
    /// it to catch up (up to --worker-raft-backoff-limit) before dequeuing
    /// again, so a lagging server stops taking evaluations it cannot process.
    #[arg(long, value_enum, default_value_t = Switch::from(WorkerConfig::default().raft_backoff_limit.is_some()))]
    pub worker_raft_backoff: Switch,
    /// Longest such backoff.
    #[arg(long, default_value_t = WorkerConfig::RAFT_BACKOFF_LIMIT.into())]
    pub worker_raft_backoff_limit: humantime::Duration,
    /// Test and benchmark knob: sleep this long before applying each batch
    /// of raft entries, so this server's state lags the leader under load.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration, hide_short_help = true)]
    pub apply_delay: Duration,
    /// How long the leader gathers client allocation updates into one raft entry.
    #[arg(long, default_value_t = alloc_updates::DEFAULT_WINDOW.into())]
    pub alloc_update_window: humantime::Duration,
    /// How the leader's deployment watchers query allocations: `fixed`, one
    /// query in flight per watcher, or `legacy`, a new query every iteration
    /// with every deployment change waking every watcher (before seed 000).
    #[arg(long, value_enum, default_value_t = WatcherConfig::default().mode)]
    pub deployment_watcher: WatcherMode,
    /// Blocking queries per second all deployment watchers may start together.
    #[arg(long, default_value_t = WatcherConfig::default().query_rate)]
    pub deployment_query_rate: f64,
    /// Open connections one client IP address may have, both ports together;
    /// more are closed at accept.
    #[arg(long, default_value_t = MAX_CONNS_PER_IP, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_conns_per_ip: usize,
    /// Open connections in all, both ports together.
    #[arg(long, default_value_t = MAX_CONNS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_conns: usize,
    /// File descriptors kept free for raft's storage: no connection is
    /// accepted with fewer than this many left under RLIMIT_NOFILE (whose
    /// soft limit the server raises to the hard one at start).
    #[arg(long, default_value_t = FD_RESERVE)]
    pub fd_reserve: usize,
    /// How long a new connection may take over its TLS handshake.
    #[arg(long, default_value_t = HANDSHAKE_TIMEOUT.into())]
    pub tls_handshake_timeout: humantime::Duration,
    /// How long a request's headers may take; a connection that sends no
    /// request this long after it opens (or one without a client
    /// certificate, under TLS, after its last request) is closed.
    #[arg(long, default_value_t = HEADER_TIMEOUT.into())]
    pub header_timeout: humantime::Duration,
    /// A connection with no request in flight for this long is closed.
    #[arg(long, default_value_t = IDLE_TIMEOUT.into())]
    pub idle_timeout: humantime::Duration,
    /// HTTP/2 keepalive: ping every connection this often...
    #[arg(long, default_value_t = KEEPALIVE_INTERVAL.into())]
    pub keepalive_interval: humantime::Duration,
    /// ...and close it when a ping is not answered within this long.
    #[arg(long, default_value_t = KEEPALIVE_TIMEOUT.into())]
    pub keepalive_timeout: humantime::Duration,
    /// Concurrent calls (HTTP/2 streams) on one connection.
    #[arg(long, default_value_t = MAX_STREAMS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams: u32,
    /// Largest message the public and node services take (jobs, nodes,
    /// evaluations, deployments), in bytes; a larger one is refused with
    /// ResourceExhausted before it is read. Raft and plans take up to 256 MiB.
    #[arg(long, default_value_t = MAX_REQUEST_BYTES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..=256 * 1024 * 1024))]
    pub max_request_bytes: usize,
    /// Longest a unary call may run; it must exceed the longest blocking
    /// query (600 s and a sixteenth of jitter).
    #[arg(long, default_value_t = REQUEST_TIMEOUT.into())]
    pub request_timeout: humantime::Duration,
}

impl ServeOpts {
    /// The server's TLS files and ACL: TLS and a token file, or `--insecure`.
    pub fn security(&self) -> Result<ServerSecurity, String> {
        let tls = TlsArgs {
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
        };
        if !self.insecure && !tls.is_set() {
            return Err(
                "cluster serve needs TLS (--tls-ca, --tls-cert, --tls-key and --acl-token-file; \
                 `cluster tls init DIR` makes them) or --insecure to serve without"
                    .into(),
            );
        }
        if !self.insecure && self.acl_token_file.is_none() {
            return Err(
                "with TLS, cluster serve needs --acl-token-file (the management token); \
                 `cluster tls init DIR` writes one to DIR/token"
                    .into(),
            );
        }
        if self.insecure && self.acl_token_file.is_some() {
            return Err(
                "--insecure cannot take --acl-token-file: without TLS, raft and the servers' \
                 own calls (RaftService, Forward) cannot tell a server from anyone else, so a \
                 token on the public API would protect nothing; serve with TLS for tokens"
                    .into(),
            );
        }
        let tls = tls.load().map_err(|e| e.to_string())?;
        let acl = match &self.acl_token_file {
            None => None,
            Some(path) => {
                let token = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read --acl-token-file {}: {e}", path.display()))?;
                Some(
                    Acl::new(&token)
                        .map_err(|e| format!("--acl-token-file {}: {e}", path.display()))?,
                )
            }
        };
        Ok(ServerSecurity { tls, acl })
    }

    /// Checks what clap cannot check field by field.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_heartbeats_per_second.is_nan() || self.max_heartbeats_per_second <= 0.0 {
            return Err("--max-heartbeats-per-second must be above 0".into());
        }
        if *self.request_timeout <= crate::state::blocking::MAX_WAIT * 17 / 16 {
            return Err(format!(
                "--request-timeout must exceed the longest blocking query ({:?} and a sixteenth)",
                crate::state::blocking::MAX_WAIT
            ));
        }
        if !(self.deployment_query_rate > 0.0 && self.deployment_query_rate <= 1e6) {
            return Err("--deployment-query-rate must be above 0 (queries per second)".into());
        }
        if let Some(via) = &self.peer_via {
            for id in via.0.keys() {
                if *id == self.id {
                    return Err(format!(
                        "--peer-via names server {id}, this server itself; it lists the others"
                    ));
                }
                if !self.peers.0.contains_key(id) {
                    return Err(format!(
                        "--peer-via names server {id}, which is not in --peers"
                    ));
                }
            }
        }
        match self.peers.0.get(&self.id) {
            None => Err(format!(
                "--id {} is not among --peers ({})",
                self.id,
                self.peers
                    .0
                    .keys()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(addr) if addr.port() != self.rpc.port() => Err(format!(
                "--peers gives server {} the address {addr}, but --rpc is {}",
                self.id, self.rpc
            )),
            Some(_) => Ok(()),
        }
    }

    /// The edge's limits, as given.
    pub fn quotas(&self) -> Quotas {
        Quotas {
            max_jobs: self.max_jobs as usize,
        }
    }

    pub fn edge_limits(&self) -> EdgeLimits {
        EdgeLimits {
            max_conns_per_ip: self.max_conns_per_ip,
            max_conns: self.max_conns,
            fd_reserve: self.fd_reserve,
            handshake_timeout: *self.tls_handshake_timeout,
            header_timeout: *self.header_timeout,
            idle_timeout: *self.idle_timeout,
            keepalive_interval: *self.keepalive_interval,
            keepalive_timeout: *self.keepalive_timeout,
            max_streams: self.max_streams,
            max_request_bytes: self.max_request_bytes,
            request_timeout: *self.request_timeout,
        }
    }

    pub fn control_config(&self) -> ControlConfig {
        ControlConfig {
            leader: LeaderConfig {
                broker: BrokerConfig {
                    nack_timeout: *self.nack_timeout,
                    delivery_limit: self.delivery_limit,
                    eval_cancelation: self.eval_cancelation.is_on(),
                    nack_initial_delay: *self.eval_nack_initial_delay,
                    nack_subsequent_delay: *self.eval_nack_subsequent_delay,
                },
                heartbeat: HeartbeatConfig {
                    min_ttl: *self.heartbeat_min_ttl,
                    max_per_second: self.max_heartbeats_per_second,
                    grace: *self.heartbeat_grace,
                },
                alloc_update_window: *self.alloc_update_window,
                deployments: WatcherConfig {
                    mode: self.deployment_watcher,
                    query_rate: self.deployment_query_rate,
                },
                unblock_by_class: self.unblock_by_class.is_on(),
                gc_interval: Some(*self.gc_interval).filter(|d| !d.is_zero()),
            },
            worker: WorkerConfig {
                raft_sync_limit: *self.raft_sync_limit,
                raft_backoff_limit: self
                    .worker_raft_backoff
                    .is_on()
                    .then_some(*self.worker_raft_backoff_limit),
                gc: GcThresholds {
                    eval: *self.eval_gc_threshold,
                    batch_eval: *self.batch_eval_gc_threshold,
                    job: *self.job_gc_threshold,
                    deployment: *self.deployment_gc_threshold,
                    node: *self.node_gc_threshold,
                },
                plan_budget: PlanBudget {
                    max_allocs: self.plan_max_allocs as usize,
                    max_bytes: self.plan_max_bytes as usize,
                },
                ..Default::default()
            },
            workers: self.workers.map_or_else(
                || {
                    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                    (WORKERS_PER_CORE * cores).min(MAX_WORKERS)
                },
                |n| n as usize,
            ),
            parking: ParkLimits {
                per_connection: self.max_parked_per_connection as usize,
                total: self.max_parked_queries as usize,
            },
            job_times: self.job_times.is_on(),
            leader_hold: self.contact_lease(),
        }
    }

    /// Where to dial each peer that `--peer-via` reroutes.
    pub fn dial_overrides(&self) -> std::collections::HashMap<NodeId, String> {
        self.peer_via.as_ref().map_or_else(Default::default, |via| {
            via.0.iter().map(|(id, a)| (*id, a.to_string())).collect()
        })
    }

    pub fn leader_wait(&self) -> Duration {
        Duration::from_millis(self.leader_wait_ms)
    }

    /// How many entries the log keeps behind its snapshot (`raft::catch_up`).
    pub fn catch_up_rule(&self) -> crate::raft::catch_up::Rule {
        crate::raft::catch_up::Rule {
            floor: self.keep_entries,
            max_bytes: self.keep_max_bytes,
        }
    }

    /// How long a leader keeps leading without a quorum's acknowledgement,
    /// or a follower stays without a known leader, before it counts as out
    /// of touch with the cluster (`raft::contact`): twice the longest
    /// election timeout (1 s by default), so the others have elected a
    /// successor by then, and a healthy leader, acknowledged at every
    /// heartbeat, never comes near it.
    pub fn contact_lease(&self) -> Duration {
        Duration::from_millis(4 * self.election_timeout_ms)
    }

    /// How long a client's write to a server woken out of touch waits for
    /// it to be in touch again: two leader heartbeats, time for a leader
    /// woken from a pause to hear of its successor (and send the write on
    /// to it). A server cut off (not woken) refuses at once: its callers
    /// should go elsewhere.
    pub fn touch_wait(&self) -> Duration {
        Duration::from_millis(2 * self.heartbeat_ms)
    }

    /// When a server campaigns and how long a leader's word holds
    /// (`raft::election`): the same figures openraft's own timer used.
    pub fn election_timing(&self) -> crate::raft::election::Timing {
        let (min, max) = (self.election_timeout_ms, self.election_timeout_ms * 2);
        crate::raft::election::Timing {
            timeout_min: Duration::from_millis(min),
            timeout_max: Duration::from_millis(max),
            // openraft's leader lease is the longest election timeout.
            lease: Duration::from_millis(max),
            wake_grace: Duration::from_millis(2 * self.heartbeat_ms),
        }
    }

    pub fn raft_config(&self) -> Result<openraft::Config, String> {
        let config = openraft::Config {
            cluster_name: "stampede".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_ms,
            election_timeout_max: self.election_timeout_ms * 2,
            // Campaigns are started by `raft::election`, after a pre-vote,
            // never by openraft's own timer: a follower that was only slow
            // must not raise the term over a healthy leader.
            enable_elect: false,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_entries),
            // The log is purged by `raft::catch_up`, behind a window that
            // grows with the write rate, never by openraft itself.
            max_in_snapshot_log_to_keep: u64::MAX,
            // A lagging follower gets a snapshot once it is further behind than the log we keep.
            replication_lag_threshold: self.keep_entries.max(1),
            install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT.as_millis() as u64,
            ..Default::default()
        };
        config.validate().map_err(|e| e.to_string())
    }
}

/// How long the leader gives each chunk of a snapshot, the last one's
/// check and install included. openraft's 200 ms suits a small state; a
/// state of a million allocations is hundreds of MiB, whose last chunk
/// takes seconds to check and install, and a chunk given up on is sent
/// again, after the follower took the one before (and refuses it as out of
/// order), which starts the whole snapshot over. A stuck chunk holds up
/// only its own follower.
pub const INSTALL_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_peers_and_says_what_is_wrong() {
        let p: Peers = "1=127.0.0.1:4647, 2=127.0.0.1:5647".parse().unwrap();
        assert_eq!(p.0.len(), 2);
        assert_eq!(p.to_string(), "1=127.0.0.1:4647,2=127.0.0.1:5647");
        let err = |s: &str| s.parse::<Peers>().unwrap_err();
        assert!(err("1:127.0.0.1:1").contains("not ID=HOST:PORT"));
        assert!(err("0=127.0.0.1:1").contains("not a server id"));
        assert!(err("1=localhost").contains("not HOST:PORT"));
        assert!(err("1=bad_name:4647").contains("not HOST:PORT"));
        assert!(err("1=-x.stampede:4647").contains("not HOST:PORT"));
        assert!(err("1=server-1.stampede:0").contains("not HOST:PORT"));
        let dns: Peers = "1=Stampede-Server-1.stampede-server:4647,2=[::1]:4647"
            .parse()
            .unwrap();
        assert_eq!(
            dns.to_string(),
            "1=stampede-server-1.stampede-server:4647,2=[::1]:4647"
        );
        assert_eq!(dns.0[&1].port(), 4647);
        assert!(err("1=127.0.0.1:1,1=127.0.0.1:2").contains("listed twice"));
        assert!(err("").contains("no peers"));
    }

    #[test]
    fn peer_via_reroutes_only_other_members() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            opts: ServeOpts,
        }
        let parse = |via: &str| {
            let args = [
                "serve",
                "--id",
                "1",
                "--rpc",
                "127.0.0.1:4647",
                "--data-dir",
                "d",
                "--peers",
                "1=127.0.0.1:4647,2=127.0.0.1:5647",
                "--peer-via",
                via,
            ];
            <Cli as clap::Parser>::try_parse_from(args).unwrap().opts
        };
        let ok = parse("2=127.0.0.1:7002");
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.dial_overrides()[&2], "127.0.0.1:7002");
        assert!(parse("1=127.0.0.1:7001")
            .validate()
            .unwrap_err()
            .contains("this server itself"));
        assert!(parse("3=127.0.0.1:7003")
            .validate()
            .unwrap_err()
            .contains("not in --peers"));
    }

    #[test]
    fn serve_options_thread_the_backoff_into_the_workers() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            opts: ServeOpts,
        }
        let base = [
            "serve",
            "--id",
            "1",
            "--data-dir",
            "d",
            "--peers",
            "1=127.0.0.1:4647",
        ];
        let parse = |extra: &[&str]| {
            let cli = <Cli as clap::Parser>::try_parse_from(base.iter().chain(extra)).unwrap();
            cli.opts
        };
        let defaults = parse(&[]);
        assert_eq!(defaults.apply_delay, Duration::ZERO);
        assert_eq!(
            defaults.control_config().worker.raft_backoff_limit,
            WorkerConfig::default().raft_backoff_limit
        );
        let off = parse(&[
            "--worker-raft-backoff",
            "off",
            "--worker-raft-backoff-limit",
            "2s",
        ]);
        assert_eq!(off.control_config().worker.raft_backoff_limit, None);
        let on = parse(&[
            "--worker-raft-backoff",
            "on",
            "--worker-raft-backoff-limit",
            "2s",
        ]);
        assert_eq!(
            on.control_config().worker.raft_backoff_limit,
            Some(Duration::from_secs(2))
        );
        let bad = base.into_iter().chain(["--worker-raft-backoff", "maybe"]);
        assert!(<Cli as clap::Parser>::try_parse_from(bad).is_err());
    }
}
