//! Shared by nodesim's integration tests: a real three-server cluster of
//! `cluster serve` processes, whose logs are printed when a test fails, and
//! small clients for jobs and allocations.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use clap::Parser;
use nodesim::Opts;
use stampede_launch::{sibling_bin, LaunchOptions, LocalCluster};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, Allocation, Job, JobAllocationsRequest, JobRegisterRequest, JobType,
    Resources, TaskGroup,
};

pub const ELECTION: Duration = Duration::from_secs(30);
pub const SETTLE: Duration = Duration::from_secs(60);

/// A cluster whose server logs are printed if the test fails.
pub struct Harness(pub LocalCluster);

impl Harness {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Three servers, each given `args` besides the launcher's own.
    pub async fn start_with(args: &[&str]) -> Self {
        let bin = sibling_bin("cluster").expect("the cluster binary is built");
        let mut c = LocalCluster::start(LaunchOptions {
            bin,
            servers: 3,
            root: None,
            server_args: args.iter().map(|a| a.to_string()).collect(),
        })
        .expect("servers start");
        c.wait_for_leader(ELECTION).await.expect("a leader");
        Harness(c)
    }

    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(&self.0.rpc_addrs()).unwrap()
    }

    /// A fleet with the default mock runner, nodesim flags `args` added.
    pub async fn fleet(&self, args: &[&str]) -> nodesim::Fleet {
        let opts = self.opts(args);
        let factory = nodesim::runner::mock_factory(opts.mock_config());
        nodesim::Fleet::start(opts, factory)
            .await
            .expect("the fleet starts")
    }

    pub fn opts(&self, extra: &[&str]) -> Opts {
        let servers = self.0.rpc_addrs().join(",");
        let mut args = vec!["nodesim", "--servers", &servers];
        args.extend_from_slice(extra);
        Opts::parse_from(args)
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

/// Fails the test with `what` once `deadline` has passed.
pub fn check_deadline(deadline: Instant, what: &str) {
    assert!(Instant::now() < deadline, "timed out waiting until {what}");
}

pub const POLL: Duration = Duration::from_millis(50);

pub fn job(id: &str, count: u32, datacenter: &str) -> Job {
    Job {
        id: id.into(),
        r#type: JobType::Service as i32,
        datacenters: vec![datacenter.into()],
        task_groups: vec![TaskGroup {
            name: "app".into(),
            count,
            resources: Some(Resources {
                cpu_mhz: 100,
                memory_mb: 64,
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub async fn register(client: &ClusterClient, job: Job) {
    client
        .retrying(|c| {
            let job = job.clone();
            async move {
                c.jobs()
                    .register(JobRegisterRequest { job: Some(job) })
                    .await
                    .map(|_| ())
            }
        })
        .await
        .expect("job registers");
}

pub async fn allocs(client: &ClusterClient, job_id: &str) -> Vec<Allocation> {
    client
        .retrying(|c| async move {
            Ok(c.jobs()
                .allocations(JobAllocationsRequest {
                    job_id: job_id.into(),
                    query: None,
                })
                .await?
                .into_inner()
                .allocs)
        })
        .await
        .unwrap_or_default()
}

/// Waits until `count` allocations of the job run and are healthy, as the
/// servers see them.
pub async fn running(client: &ClusterClient, job_id: &str, count: usize) -> Vec<Allocation> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let allocs = allocs(client, job_id).await;
        let healthy = allocs
            .iter()
            .filter(|a| {
                a.client_status == AllocClientStatus::Running as i32 && a.healthy == Some(true)
            })
            .count();
        if healthy == count {
            return allocs;
        }
        check_deadline(
            deadline,
            &format!("{count} allocations of {job_id} run healthy (now {healthy})"),
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the leader counts `count` ready nodes.
pub async fn ready_nodes(cluster: &mut LocalCluster, count: f64) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let leader = cluster.wait_for_leader(ELECTION).await.expect("a leader");
        let ready = cluster
            .metric(leader, "stampede_nodes{status=\"ready\"}")
            .await
            .unwrap_or(-1.0);
        if ready == count {
            return;
        }
        check_deadline(
            deadline,
            &format!("the leader counts {count} ready nodes (now {ready})"),
        );
        tokio::time::sleep(POLL).await;
    }
}
