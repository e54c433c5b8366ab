//! A raft commit on an in-process 3-server cluster (issue 7: "a raft commit on
//! an in-process 3-node cluster").
//!
//! Every write the cluster takes (jobs, plans, node registrations, client
//! updates) is one of these: the leader appends the entry to its RocksDB log
//! (synced), replicates it over gRPC to both followers, which append it synced
//! too, commits once a quorum has it, applies it and answers. Three real
//! servers (`cluster::server::serve`, RocksDB in temporary dirs, listeners on
//! 127.0.0.1) run in this process; the bench times one `Node.Register` call
//! sent straight to the leader, from request to committed-and-applied reply.
//! Its inverse is the write rate one client gets with one call in flight.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use cluster::api::http::StatusReport;
use cluster::server::config::ServeOpts;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use stampede_benches::node;
use stampede_proto::client::ClusterClient;
use stampede_proto::security::Security;
use stampede_proto::NodeRegisterRequest;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const SERVERS: u64 = 3;
/// How long the servers get to elect a leader.
const ELECTION: Duration = Duration::from_secs(60);

/// `cluster serve`'s options, parsed as the binary parses them, so that every
/// default comes from its one home.
#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    opts: ServeOpts,
}

struct Server {
    rpc: SocketAddr,
    http: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), cluster::server::error::ServerError>>,
}

/// Three servers serving in this process until [`InProcessCluster::stop`].
struct InProcessCluster {
    servers: Vec<Server>,
    _data: tempfile::TempDir,
}

impl InProcessCluster {
    async fn start() -> Self {
        let data = tempfile::tempdir().expect("create a temporary data dir");
        let mut bound = Vec::new();
        for id in 1..=SERVERS {
            let rpc = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind an rpc port");
            let http = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind an http port");
            bound.push((id, rpc, http));
        }
        let addr = |l: &TcpListener| l.local_addr().expect("a bound listener has an address");
        let peers: Vec<String> = bound
            .iter()
            .map(|(id, rpc, _)| format!("{id}={}", addr(rpc)))
            .collect();
        let peers = peers.join(",");
        let mut servers = Vec::new();
        for (id, rpc, http) in bound {
            let (rpc_addr, http_addr) = (addr(&rpc), addr(&http));
            let dir = data.path().join(id.to_string());
            let args = [
                "serve".to_string(),
                format!("--id={id}"),
                format!("--rpc={rpc_addr}"),
                format!("--http={http_addr}"),
                format!("--data-dir={}", dir.display()),
                format!("--peers={peers}"),
                // No evaluations here: workers would only poll the broker.
                "--workers=0".into(),
                // A quick first election, so the bench starts soon.
                "--heartbeat-ms=100".into(),
                "--election-timeout-ms=1000".into(),
                // The bare commit path: TLS's cost is measured by the
                // capacity scenario `tls`.
                "--insecure".into(),
            ];
            let opts = Serve::try_parse_from(&args)
                .expect("valid cluster serve options")
                .opts;
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(cluster::server::serve(opts, rpc, http, async {
                let _ = stopped.await;
            }));
            servers.push(Server {
                rpc: rpc_addr,
                http: http_addr,
                stop,
                task,
            });
        }
        InProcessCluster {
            servers,
            _data: data,
        }
    }

    /// Waits until every server names the same leader and it says it leads;
    /// returns the leader's rpc address.
    async fn leader(&self) -> SocketAddr {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + ELECTION;
        loop {
            let mut reports = Vec::new();
            for s in &self.servers {
                let url = format!("http://{}/v1/status", s.http);
                if let Ok(r) = http.get(&url).send().await {
                    if let Ok(report) = r.json::<StatusReport>().await {
                        reports.push(report);
                    }
                }
            }
            let leader = reports.first().and_then(|r| r.leader_id);
            let agreed = reports.len() == self.servers.len()
                && reports.iter().all(|r| r.leader_id == leader)
                && reports
                    .iter()
                    .any(|r| Some(r.id) == leader && r.state == "Leader");
            if let (true, Some(id)) = (agreed, leader) {
                return self.servers[id as usize - 1].rpc;
            }
            assert!(
                Instant::now() < deadline,
                "no leader elected within {ELECTION:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop(self) {
        for s in self.servers {
            let _ = s.stop.send(());
            match tokio::time::timeout(Duration::from_secs(10), s.task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => eprintln!("server at {} stopped with an error: {e}", s.rpc),
                Ok(Err(e)) => eprintln!("server at {} panicked: {e}", s.rpc),
                Err(_) => eprintln!("server at {} did not stop within 10 s", s.rpc),
            }
        }
    }
}

fn raft_commit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("build a tokio runtime");
    let cluster = rt.block_on(InProcessCluster::start());
    let leader = rt.block_on(cluster.leader());
    // Channels connect lazily, from within the runtime.
    let client = rt.block_on(async {
        ClusterClient::new(&[leader.to_string()], &Security::insecure())
            .expect("a client of the leader")
    });

    let mut group = c.benchmark_group("raft_commit_3_servers");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.throughput(Throughput::Elements(1));
    group.bench_function("node_register", |b| {
        b.to_async(&rt).iter(|| {
            let mut nodes = client.nodes();
            async move {
                nodes
                    .register(NodeRegisterRequest {
                        node: Some(node(0)),
                        secret_id: "the-benchmarks-node-secret".into(),
                    })
                    .await
                    .expect("the leader commits a node registration")
                    .into_inner()
                    .index
            }
        })
    });
    group.finish();
    rt.block_on(cluster.stop());
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = raft_commit
}
criterion_main!(benches);
