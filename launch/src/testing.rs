//! The process harness the integration tests of `cluster`, `nodesim` and
//! `loadgen` share (cargo feature `testing`, enabled in their
//! `[dev-dependencies]`).
//!
//! A test starts a real cluster of `cluster serve` processes on 127.0.0.1
//! ports the OS picks ([`Harness`]), talks to it through a
//! [`ClusterClient`], and waits for what it expects with [`eventually`] or
//! [`eventually_ok`]: a condition checked until it holds or a deadline
//! passes, never a sleep that guesses how long the cluster needs. The
//! builders ([`node`], [`service_job`]) and calls ([`register_job`],
//! [`register_node`] with its [`secret_of`], [`allocs`]) are the ones
//! every crate's tests make; what only one crate's
//! tests need stays in that crate's `tests/common`.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use stampede_proto::client::{ClientError, ClusterClient};
use stampede_proto::security::Role;
use stampede_proto::{
    Allocation, Job, JobAllocationsRequest, JobRegisterReply, JobType, Node, NodeSecret, Resources,
    TaskGroup,
};

use crate::bins::sibling_bin;
use crate::cluster::{LaunchOptions, LocalCluster};
use crate::server::NodeId;

/// How long a cluster gets to agree on a leader: generous, because on a
/// loaded 2-core machine several test clusters start at once.
pub const ELECTION: Duration = Duration::from_secs(30);
/// How long the cluster gets to reach what a test waits for (an index
/// applied, allocations placed, nodes ready); a deadline for failing, not a
/// measure of speed.
pub const CATCH_UP: Duration = Duration::from_secs(60);
/// How often [`eventually`] checks its condition again.
pub const POLL: Duration = Duration::from_millis(25);

/// The `cluster` binary built beside the running test (cargo builds it
/// before `cluster`'s own tests; other crates' tests need it built first,
/// e.g. by `cargo test --workspace`).
pub fn cluster_bin() -> PathBuf {
    sibling_bin("cluster").unwrap_or_else(|e| panic!("{e}"))
}

/// A [`LocalCluster`] for one test: stopped (its processes killed) when
/// dropped, and, if the test is failing, every server's log printed first,
/// as that is where the reason usually is. Derefs to the [`LocalCluster`].
pub struct Harness(LocalCluster);

impl Harness {
    /// Spawns `servers` servers, each given `args` besides the launcher's
    /// own flags; returns without waiting for them to form a cluster.
    pub fn start(servers: usize, args: &[&str]) -> Self {
        Harness(
            LocalCluster::start(LaunchOptions {
                bin: cluster_bin(),
                servers,
                root: None,
                server_args: args.iter().map(|a| a.to_string()).collect(),
                insecure: false,
                tls_dir: None,
            })
            .expect("servers start"),
        )
    }

    /// [`Harness::start`], with every peer connection through the fault
    /// proxy, so that the test can [`LocalCluster::partition`] a server.
    pub fn start_with_links(servers: usize, args: &[&str]) -> Self {
        Harness(
            LocalCluster::start_with_links(LaunchOptions {
                bin: cluster_bin(),
                servers,
                root: None,
                server_args: args.iter().map(|a| a.to_string()).collect(),
                insecure: false,
                tls_dir: None,
            })
            .expect("servers start"),
        )
    }

    /// [`Harness::start`], then waits until the servers agree on a leader;
    /// returns its id too.
    ///
    /// Ports are picked free and released before the servers bind them, so
    /// another process can take one in between; a server that cannot bind
    /// exits at once. Then the whole cluster starts again on new ports.
    pub async fn with_leader(servers: usize, args: &[&str]) -> (Self, NodeId) {
        for _ in 0..3 {
            let mut h = Self::start(servers, args);
            if h.all_started().await {
                let leader = h.leader().await;
                return (h, leader);
            }
        }
        panic!("{servers} servers did not start in three tries (their ports were taken?)");
    }

    /// Waits until every server answers its status (true) or one of them
    /// has exited (false).
    async fn all_started(&mut self) -> bool {
        let deadline = Instant::now() + ELECTION;
        loop {
            let mut up = 0;
            for id in self.0.ids() {
                if !self.0.is_running(id) {
                    return false;
                }
                if self.0.status(id).await.is_ok() {
                    up += 1;
                }
            }
            if up == self.0.ids().len() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits (up to [`ELECTION`]) until every running server names the same
    /// leader and that leader says it leads.
    pub async fn leader(&mut self) -> NodeId {
        self.0.wait_for_leader(ELECTION).await.expect("a leader")
    }

    /// Every server except `id`: the followers of a leader, say.
    pub fn ids_except(&self, id: NodeId) -> Vec<NodeId> {
        self.0.ids().into_iter().filter(|i| *i != id).collect()
    }

    /// A client of every server with the node role's certificate and a
    /// write token: what nodesim presents, which may make node calls and
    /// every public call.
    pub fn client(&self) -> ClusterClient {
        self.client_as(Role::Client)
    }

    /// A client of every server presenting `role`'s certificate (and, for a
    /// node client, a write token).
    pub fn client_as(&self, role: Role) -> ClusterClient {
        let security = self.0.security(role).expect("the cluster's TLS files");
        ClusterClient::new(&self.0.rpc_addrs(), &security).expect("server addresses parse")
    }

    /// A lazily connected gRPC channel to server `id`, presenting `role`'s
    /// certificate (no token: raw clients of the internal services, or as a
    /// server, which needs none).
    pub fn channel(&self, id: NodeId, role: Role) -> tonic::transport::Channel {
        let addr = self.0.server(id).expect("a server of this cluster").rpc;
        let security = self.0.security(role).expect("the cluster's TLS files");
        let mut endpoint =
            tonic::transport::Endpoint::from_shared(format!("{}://{addr}", security.scheme()))
                .expect("a socket address is a URI");
        if let Some(tls) = &security.tls {
            endpoint = endpoint
                .tls_config(tls.client_config())
                .expect("the cluster's TLS files load");
        }
        endpoint.connect_lazy()
    }

    /// A client of the servers `ids` only: to read from one server's state,
    /// or to keep away from one that is down or lagging.
    pub fn client_of(&self, ids: &[NodeId]) -> ClusterClient {
        let addrs: Vec<String> = ids
            .iter()
            .map(|id| {
                self.0
                    .server(*id)
                    .expect("a server of this cluster")
                    .rpc
                    .to_string()
            })
            .collect();
        let security = self
            .0
            .security(Role::Client)
            .expect("the cluster's TLS files");
        ClusterClient::new(&addrs, &security).expect("server addresses parse")
    }

    /// One series of the current leader's `/metrics` (see
    /// [`LocalCluster::metric`]). The leader is the server that says it leads
    /// and that every other server answering names; it is an error when
    /// there is none right now, so that a poll can look again. Takes `&self`
    /// so that an [`eventually`] condition can call it.
    pub async fn leader_metric(&self, series: &str) -> Result<f64, String> {
        let mut leader = None;
        let mut named = Vec::new();
        for id in self.0.ids() {
            let Ok(s) = self.0.status(id).await else {
                continue;
            };
            if s.state == "Leader" {
                leader = Some(id);
            }
            named.push(s.leader_id);
        }
        match leader {
            Some(l) if named.iter().all(|n| *n == Some(l)) => {
                self.0.metric(l, series).await.map_err(|e| e.to_string())
            }
            _ => Err(format!(
                "no leader to read {series} from (leaders named: {named:?})"
            )),
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for id in self.0.ids() {
                eprintln!("--- server {id} log ---\n{}", self.0.log(id));
            }
        }
    }
}

impl std::ops::Deref for Harness {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.0
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.0
    }
}

/// Awaits `cond` (an async check), every [`POLL`], failing the test with
/// `what` once `timeout` has passed. Use it wherever a test needs the
/// cluster to have reached some state: it returns as soon as it has.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_ok(what, timeout, || {
        let holds = cond();
        async move {
            if holds.await {
                Ok(())
            } else {
                Err(String::new())
            }
        }
    })
    .await
}

/// Awaits `check` until it returns `Ok`, every [`POLL`], and returns its
/// value. `Err` means "not yet" and says what the check saw instead: the
/// last one is in the failure message when `timeout` passes, which tells a
/// stalled cluster from one that was almost there.
pub async fn eventually_ok<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            let last = if last.is_empty() {
                String::new()
            } else {
                format!("; last seen: {last}")
            };
            panic!("timed out after {timeout:?} waiting until {what}{last}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A node of 2000 MHz and 4096 MB in `dc1`.
pub fn node(id: &str) -> Node {
    node_with(id, 2000, 4096)
}

/// A node in `dc1` with the given resources.
pub fn node_with(id: &str, cpu_mhz: u64, memory_mb: u64) -> Node {
    Node {
        id: id.into(),
        datacenter: "dc1".into(),
        resources: Some(Resources { cpu_mhz, memory_mb }),
        ..Default::default()
    }
}

/// The secret_id a test's node `id` registers with and acts with: fixed
/// per id, so any part of a test can act for the node without keeping it.
pub fn secret_of(id: &str) -> String {
    format!("test-secret-of-node-{id}")
}

/// Registers `node` with [`secret_of`] its id, retrying across servers;
/// returns the raft index it was applied at.
pub async fn register_node(client: &ClusterClient, node: Node) -> Result<u64, ClientError> {
    let secret = secret_of(&node.id);
    client.register_node(node, &secret).await
}

/// The secrets of nodes `node_ids` (each once, by [`secret_of`]), for an
/// allocation update from those nodes.
pub fn node_secrets<'a>(node_ids: impl IntoIterator<Item = &'a str>) -> Vec<NodeSecret> {
    let mut ids: Vec<&str> = node_ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| NodeSecret {
            node_id: id.into(),
            secret_id: secret_of(id),
        })
        .collect()
}

/// A service job of one task group `app` with `count` allocations, each
/// asking for `cpu_mhz` and `memory_mb`, in any datacenter.
pub fn service_job(id: &str, count: u32, cpu_mhz: u64, memory_mb: u64) -> Job {
    Job {
        id: id.into(),
        r#type: JobType::Service as i32,
        task_groups: vec![TaskGroup {
            name: "app".into(),
            count: Some(count),
            resources: Some(Resources { cpu_mhz, memory_mb }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Registers `job`, retrying across servers (through an election, say);
/// fails the test if the cluster refuses it.
pub async fn register_job(client: &ClusterClient, job: Job) -> JobRegisterReply {
    let id = job.id.clone();
    client
        .register_job(job)
        .await
        .unwrap_or_else(|e| panic!("job {id:?} registers: {e}"))
}

/// Every allocation of the job, retrying across servers. An error is left
/// to the caller: a check that polls may take it as "not yet".
pub async fn allocs(client: &ClusterClient, job_id: &str) -> Result<Vec<Allocation>, ClientError> {
    client
        .retrying(|c| async move {
            let req = JobAllocationsRequest {
                job_id: job_id.into(),
                query: None,
            };
            Ok(c.jobs().allocations(req).await?.into_inner().allocs)
        })
        .await
}
