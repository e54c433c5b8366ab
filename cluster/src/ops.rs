//! Operator commands (`cluster job ...`, `cluster node ...`): thin gRPC calls
//! to any server, and the rendering of their answers kept apart from the calls
//! so that tables and JSON can be tested without a cluster.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use stampede_proto::client::{ClientError, ClusterClient};
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, Job, JobAllocationsRequest,
    JobDeregisterRequest, JobGetRequest, JobListRequest, JobRegisterReply, JobRegisterRequest,
    JobStatus, JobType, Node, NodeListRequest, NodeStatus, QueryOptions,
};

use crate::{jobspec, validate};

/// Which servers to talk to. Any server answers any call; the others in the
/// list are tried while one is down or the cluster has no leader.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// A server's gRPC address, HOST:PORT; a comma-separated list to try several.
    #[arg(
        long,
        env = "STAMPEDE_ADDRESS",
        default_value = "127.0.0.1:4647",
        value_delimiter = ','
    )]
    pub address: Vec<String>,
}

impl Target {
    fn client(&self) -> Result<ClusterClient, ClientError> {
        ClusterClient::new(&self.address)
    }

    /// A server's answer is printed as it is; when none answered, say where we
    /// looked, since tonic's own message ("tcp connect error") does not.
    fn explain(&self, e: ClientError) -> anyhow::Error {
        match e.code() {
            Some(tonic::Code::Unavailable) => anyhow::anyhow!(
                "no server at {} could take the call (tried for {}): {e}",
                self.address.join(","),
                humantime::format_duration(stampede_proto::client::DEFAULT_RETRY_FOR)
            ),
            _ => e.into(),
        }
    }
}

#[derive(Debug, Clone, Subcommand)]
pub enum JobCmd {
    /// Register a job from a JSON job file (`-` for stdin), or update it.
    Run {
        #[command(flatten)]
        target: Target,
        /// The JSON job file; see examples/ and the README's "Jobs" section.
        file: PathBuf,
    },
    /// Show a job and its allocations; without JOB_ID, list every job.
    Status {
        #[command(flatten)]
        target: Target,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// The job to show.
        job_id: Option<String>,
    },
    /// Stop a job's allocations (deregister it).
    Stop {
        #[command(flatten)]
        target: Target,
        /// Also remove the job from the state instead of keeping it, stopped.
        #[arg(long)]
        purge: bool,
        /// The job to stop.
        job_id: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum NodeCmd {
    /// List every client node with its status, datacenter, class and resources.
    Status {
        #[command(flatten)]
        target: Target,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run_job(cmd: JobCmd) -> anyhow::Result<()> {
    match cmd {
        JobCmd::Run { target, file } => {
            let job = read_job_file(&file)?;
            let reply = register(&target.client()?, &job)
                .await
                .map_err(|e| target.explain(e))?;
            print!("{}", render_register(&job.id, &reply));
        }
        JobCmd::Status {
            target,
            json,
            job_id: Some(id),
        } => {
            let (job, allocs) = job_status(&target.client()?, &id)
                .await
                .map_err(|e| target.explain(e))?;
            if json {
                println!("{:#}", job_status_json(&job, &allocs));
            } else {
                print!("{}", render_job_status(&job, &allocs));
            }
        }
        JobCmd::Status {
            target,
            json,
            job_id: None,
        } => {
            let jobs = list_jobs(&target.client()?)
                .await
                .map_err(|e| target.explain(e))?;
            if json {
                println!("{:#}", job_list_json(&jobs));
            } else {
                print!("{}", render_job_list(&jobs));
            }
        }
        JobCmd::Stop {
            target,
            purge,
            job_id,
        } => {
            let reply = deregister(&target.client()?, &job_id, purge)
                .await
                .map_err(|e| target.explain(e))?;
            print!("{}", render_deregister(&job_id, purge, &reply));
        }
    }
    Ok(())
}

pub async fn run_node(cmd: NodeCmd) -> anyhow::Result<()> {
    match cmd {
        NodeCmd::Status { target, json } => {
            let nodes = list_nodes(&target.client()?)
                .await
                .map_err(|e| target.explain(e))?;
            if json {
                println!("{:#}", nodes_json(&nodes));
            } else {
                print!("{}", render_nodes(&nodes));
            }
        }
    }
    Ok(())
}

/// Parses and checks a job file here, so a mistake is reported with the
/// file's name and line before anything is sent.
fn read_job_file(path: &Path) -> anyhow::Result<Job> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading the job file from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let job = jobspec::parse_job(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    validate::job(Some(&job)).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(job)
}

// ---------------------------------------------------------------------------
// gRPC calls
// ---------------------------------------------------------------------------

/// Reads are answered at once: the CLI never blocks on a query.
fn query() -> Option<QueryOptions> {
    Some(QueryOptions {
        source: "cli".into(),
        ..Default::default()
    })
}

async fn register(client: &ClusterClient, job: &Job) -> Result<JobRegisterReply, ClientError> {
    client
        .retrying(|c| {
            let job = job.clone();
            async move {
                let req = JobRegisterRequest { job: Some(job) };
                Ok(c.jobs().register(req).await?.into_inner())
            }
        })
        .await
}

async fn deregister(
    client: &ClusterClient,
    job_id: &str,
    purge: bool,
) -> Result<JobRegisterReply, ClientError> {
    client
        .retrying(|c| {
            let req = JobDeregisterRequest {
                job_id: job_id.to_string(),
                purge,
            };
            async move { Ok(c.jobs().deregister(req).await?.into_inner()) }
        })
        .await
}

async fn job_status(
    client: &ClusterClient,
    job_id: &str,
) -> Result<(Job, Vec<Allocation>), ClientError> {
    let job = client
        .retrying(|c| {
            let req = JobGetRequest {
                job_id: job_id.to_string(),
                query: query(),
            };
            async move { Ok(c.jobs().get(req).await?.into_inner().job) }
        })
        .await?;
    let allocs = client
        .retrying(|c| {
            let req = JobAllocationsRequest {
                job_id: job_id.to_string(),
                query: query(),
            };
            async move { Ok(c.jobs().allocations(req).await?.into_inner().allocs) }
        })
        .await?;
    Ok((job.unwrap_or_default(), allocs))
}

async fn list_jobs(client: &ClusterClient) -> Result<Vec<Job>, ClientError> {
    client
        .retrying(|c| async move {
            let req = JobListRequest { query: query() };
            Ok(c.jobs().list(req).await?.into_inner().jobs)
        })
        .await
}

async fn list_nodes(client: &ClusterClient) -> Result<Vec<Node>, ClientError> {
    client
        .retrying(|c| async move {
            let req = NodeListRequest { query: query() };
            Ok(c.nodes().list(req).await?.into_inner().nodes)
        })
        .await
}

// ---------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------

/// `JOB_TYPE_SERVICE` -> `service`: the names operators read and write.
fn short_name(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix)
        .unwrap_or(name)
        .to_ascii_lowercase()
}

pub fn job_type_name(v: i32) -> String {
    JobType::try_from(v).map_or_else(
        |_| format!("unknown({v})"),
        |t| short_name(t.as_str_name(), "JOB_TYPE_"),
    )
}

pub fn job_status_name(v: i32) -> String {
    JobStatus::try_from(v).map_or_else(
        |_| format!("unknown({v})"),
        |s| short_name(s.as_str_name(), "JOB_STATUS_"),
    )
}

pub fn client_status_name(v: i32) -> String {
    AllocClientStatus::try_from(v).map_or_else(
        |_| format!("unknown({v})"),
        |s| short_name(s.as_str_name(), "ALLOC_CLIENT_STATUS_"),
    )
}

pub fn desired_status_name(v: i32) -> String {
    AllocDesiredStatus::try_from(v).map_or_else(
        |_| format!("unknown({v})"),
        |s| short_name(s.as_str_name(), "ALLOC_DESIRED_STATUS_"),
    )
}

pub fn node_status_name(v: i32) -> String {
    NodeStatus::try_from(v).map_or_else(
        |_| format!("unknown({v})"),
        |s| short_name(s.as_str_name(), "NODE_STATUS_"),
    )
}

/// Left-aligned columns two spaces apart, like `nomad status`.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn render_register(job_id: &str, reply: &JobRegisterReply) -> String {
    if reply.eval_id.is_empty() {
        format!(
            "Job {job_id:?} unchanged at raft index {}; no evaluation created\n",
            reply.index
        )
    } else {
        format!(
            "Job {job_id:?} registered at raft index {} (job modify index {})\nEvaluation {} created\n",
            reply.index, reply.job_modify_index, reply.eval_id
        )
    }
}

pub fn render_deregister(job_id: &str, purge: bool, reply: &JobRegisterReply) -> String {
    let what = if purge {
        "stopped and purged"
    } else {
        "stopped"
    };
    let mut out = format!("Job {job_id:?} {what} at raft index {}\n", reply.index);
    if !reply.eval_id.is_empty() {
        out.push_str(&format!("Evaluation {} created\n", reply.eval_id));
    }
    out
}

/// Allocations in a stable, readable order: by group, then index, newest last.
fn sorted(allocs: &[Allocation]) -> Vec<&Allocation> {
    let mut allocs: Vec<&Allocation> = allocs.iter().collect();
    allocs.sort_by(|a, b| {
        (&a.task_group, a.index, a.create_index).cmp(&(&b.task_group, b.index, b.create_index))
    });
    allocs
}

fn healthy(a: &Allocation) -> &'static str {
    match a.healthy {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

pub fn render_job_status(job: &Job, allocs: &[Allocation]) -> String {
    let mut status = job_status_name(job.status);
    if job.stop {
        status.push_str(" (stopped)");
    }
    let datacenters = if job.datacenters.is_empty() {
        "any".to_string()
    } else {
        job.datacenters.join(",")
    };
    let mut out = format!(
        "ID          = {}\nType        = {}\nPriority    = {}\nDatacenters = {}\nStatus      = {}\nVersion     = {}\n",
        job.id,
        job_type_name(job.r#type),
        job.priority,
        datacenters,
        status,
        job.version,
    );

    // Client statuses counted per group: how far the job got.
    let counted = [
        AllocClientStatus::Pending,
        AllocClientStatus::Running,
        AllocClientStatus::Complete,
        AllocClientStatus::Failed,
        AllocClientStatus::Lost,
    ];
    let groups: Vec<Vec<String>> = job
        .task_groups
        .iter()
        .map(|g| {
            let res = g.resources.unwrap_or_default();
            let mut row = vec![
                g.name.clone(),
                if job.r#type == JobType::System as i32 {
                    "-".into()
                } else {
                    g.count.to_string()
                },
                res.cpu_mhz.to_string(),
                res.memory_mb.to_string(),
            ];
            row.extend(counted.iter().map(|s| {
                allocs
                    .iter()
                    .filter(|a| a.task_group == g.name && a.client_status == *s as i32)
                    .count()
                    .to_string()
            }));
            row
        })
        .collect();
    out.push_str("\nTask groups\n");
    out.push_str(&table(
        &[
            "NAME",
            "COUNT",
            "CPU MHZ",
            "MEMORY MB",
            "PENDING",
            "RUNNING",
            "COMPLETE",
            "FAILED",
            "LOST",
        ],
        &groups,
    ));

    out.push_str("\nAllocations\n");
    if allocs.is_empty() {
        out.push_str("none\n");
        return out;
    }
    let rows: Vec<Vec<String>> = sorted(allocs)
        .into_iter()
        .map(|a| {
            vec![
                a.id.clone(),
                a.name.clone(),
                a.node_id.clone(),
                desired_status_name(a.desired_status),
                client_status_name(a.client_status),
                a.job_version.to_string(),
                healthy(a).into(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "ID", "NAME", "NODE", "DESIRED", "CLIENT", "VERSION", "HEALTHY",
        ],
        &rows,
    ));
    out
}

pub fn alloc_json(a: &Allocation) -> Value {
    json!({
        "id": a.id,
        "name": a.name,
        "task_group": a.task_group,
        "index": a.index,
        "node_id": a.node_id,
        "eval_id": a.eval_id,
        "desired_status": desired_status_name(a.desired_status),
        "desired_description": a.desired_description,
        "client_status": client_status_name(a.client_status),
        "client_description": a.client_description,
        "job_version": a.job_version,
        "deployment_id": a.deployment_id,
        "healthy": a.healthy,
        "canary": a.canary,
        "resources": a.resources.map(|r| json!({"cpu_mhz": r.cpu_mhz, "memory_mb": r.memory_mb})),
        "create_index": a.create_index,
        "modify_index": a.modify_index,
        "create_time_ms": a.create_time_ms,
        "modify_time_ms": a.modify_time_ms,
    })
}

/// `job` is the spec in the job file's shape (so `jq .job` gives a file that
/// `job run` takes back); what the server keeps about it sits beside it.
pub fn job_status_json(job: &Job, allocs: &[Allocation]) -> Value {
    json!({
        "job": jobspec::job_to_json(job),
        "status": job_status_name(job.status),
        "stop": job.stop,
        "version": job.version,
        "create_index": job.create_index,
        "modify_index": job.modify_index,
        "job_modify_index": job.job_modify_index,
        "allocations": sorted(allocs).into_iter().map(alloc_json).collect::<Vec<_>>(),
    })
}

pub fn render_job_list(jobs: &[Job]) -> String {
    if jobs.is_empty() {
        return "No jobs\n".into();
    }
    let mut jobs: Vec<&Job> = jobs.iter().collect();
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    let rows: Vec<Vec<String>> = jobs
        .into_iter()
        .map(|j| {
            let mut status = job_status_name(j.status);
            if j.stop {
                status.push_str(" (stopped)");
            }
            vec![
                j.id.clone(),
                job_type_name(j.r#type),
                j.priority.to_string(),
                status,
                j.version.to_string(),
                j.task_groups.len().to_string(),
            ]
        })
        .collect();
    table(
        &["ID", "TYPE", "PRIORITY", "STATUS", "VERSION", "GROUPS"],
        &rows,
    )
}

pub fn job_list_json(jobs: &[Job]) -> Value {
    let mut jobs: Vec<&Job> = jobs.iter().collect();
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    json!({
        "jobs": jobs.into_iter().map(|j| json!({
            "job": jobspec::job_to_json(j),
            "status": job_status_name(j.status),
            "stop": j.stop,
            "version": j.version,
            "modify_index": j.modify_index,
        })).collect::<Vec<_>>(),
    })
}

fn sorted_nodes(nodes: &[Node]) -> Vec<&Node> {
    let mut nodes: Vec<&Node> = nodes.iter().collect();
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    nodes
}

pub fn render_nodes(nodes: &[Node]) -> String {
    if nodes.is_empty() {
        return "No nodes\n".into();
    }
    let rows: Vec<Vec<String>> = sorted_nodes(nodes)
        .into_iter()
        .map(|n| {
            let res = n.resources.unwrap_or_default();
            vec![
                n.id.clone(),
                n.name.clone(),
                n.datacenter.clone(),
                if n.node_class.is_empty() {
                    "-".into()
                } else {
                    n.node_class.clone()
                },
                node_status_name(n.status),
                if n.ineligible { "no" } else { "yes" }.into(),
                res.cpu_mhz.to_string(),
                res.memory_mb.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "NAME",
            "DC",
            "CLASS",
            "STATUS",
            "ELIGIBLE",
            "CPU MHZ",
            "MEMORY MB",
        ],
        &rows,
    )
}

pub fn nodes_json(nodes: &[Node]) -> Value {
    json!({
        "nodes": sorted_nodes(nodes).into_iter().map(|n| json!({
            "id": n.id,
            "name": n.name,
            "datacenter": n.datacenter,
            "node_class": n.node_class,
            "status": node_status_name(n.status),
            "eligible": !n.ineligible,
            "resources": n.resources.map(|r| json!({"cpu_mhz": r.cpu_mhz, "memory_mb": r.memory_mb})),
            "attributes": n.attributes.iter().collect::<std::collections::BTreeMap<_, _>>(),
            "create_index": n.create_index,
            "modify_index": n.modify_index,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use stampede_proto::Resources;

    fn web() -> Job {
        Job {
            status: JobStatus::Running as i32,
            version: 2,
            modify_index: 40,
            ..jobspec::parse_job(include_str!("../../examples/web.json")).unwrap()
        }
    }

    fn alloc(index: u32, node: &str, client: AllocClientStatus) -> Allocation {
        Allocation {
            id: format!("a{index}"),
            job_id: "web".into(),
            task_group: "web".into(),
            name: format!("web.web[{index}]"),
            index,
            node_id: node.into(),
            desired_status: AllocDesiredStatus::Run as i32,
            client_status: client as i32,
            job_version: 2,
            create_index: 10 + u64::from(index),
            ..Default::default()
        }
    }

    #[test]
    fn enum_names_are_lower_case_words() {
        assert_eq!(
            client_status_name(AllocClientStatus::Running as i32),
            "running"
        );
        assert_eq!(desired_status_name(AllocDesiredStatus::Stop as i32), "stop");
        assert_eq!(job_type_name(JobType::System as i32), "system");
        assert_eq!(job_status_name(JobStatus::Dead as i32), "dead");
        assert_eq!(node_status_name(NodeStatus::Ready as i32), "ready");
        assert_eq!(node_status_name(0), "unspecified");
        assert_eq!(client_status_name(99), "unknown(99)");
    }

    #[test]
    fn job_status_table() {
        let allocs = vec![
            Allocation {
                healthy: Some(true),
                ..alloc(1, "node-2", AllocClientStatus::Running)
            },
            alloc(0, "node-1", AllocClientStatus::Pending),
        ];
        assert_eq!(
            render_job_status(&web(), &allocs),
            "\
ID          = web
Type        = service
Priority    = 50
Datacenters = any
Status      = running
Version     = 2

Task groups
NAME  COUNT  CPU MHZ  MEMORY MB  PENDING  RUNNING  COMPLETE  FAILED  LOST
web   50     100      64         1        1        0         0       0

Allocations
ID  NAME        NODE    DESIRED  CLIENT   VERSION  HEALTHY
a0  web.web[0]  node-1  run      pending  2        -
a1  web.web[1]  node-2  run      running  2        yes
"
        );
    }

    #[test]
    fn job_status_table_without_allocations() {
        let job = Job {
            stop: true,
            status: JobStatus::Dead as i32,
            ..web()
        };
        let out = render_job_status(&job, &[]);
        assert!(out.contains("Status      = dead (stopped)\n"), "{out}");
        assert!(out.ends_with("\nAllocations\nnone\n"), "{out}");
    }

    #[test]
    fn job_status_json_shape() {
        let allocs = vec![
            alloc(1, "node-2", AllocClientStatus::Running),
            alloc(0, "node-1", AllocClientStatus::Pending),
        ];
        let v = job_status_json(&web(), &allocs);
        assert_eq!(v["job"], jobspec::job_to_json(&web()));
        assert_eq!(v["job"]["id"], "web");
        assert_eq!(v["status"], "running");
        assert_eq!(v["version"], 2);
        let a = &v["allocations"];
        assert_eq!(a.as_array().unwrap().len(), 2);
        assert_eq!(a[0]["id"], "a0");
        assert_eq!(a[0]["name"], "web.web[0]");
        assert_eq!(a[0]["node_id"], "node-1");
        assert_eq!(a[0]["desired_status"], "run");
        assert_eq!(a[0]["client_status"], "pending");
        assert_eq!(a[1]["client_status"], "running");
        assert_eq!(a[1]["healthy"], Value::Null);
        // The spec part is a job file `job run` takes back.
        assert_eq!(jobspec::parse_job(&v["job"].to_string()).unwrap().id, "web");
    }

    #[test]
    fn job_list() {
        let batch = Job {
            status: JobStatus::Dead as i32,
            stop: true,
            ..jobspec::parse_job(include_str!("../../examples/batch.json")).unwrap()
        };
        assert_eq!(
            render_job_list(&[web(), batch.clone()]),
            "\
ID     TYPE     PRIORITY  STATUS          VERSION  GROUPS
batch  batch    30        dead (stopped)  0        1
web    service  50        running         2        1
"
        );
        assert_eq!(render_job_list(&[]), "No jobs\n");
        let v = job_list_json(&[web(), batch]);
        assert_eq!(v["jobs"][0]["job"]["id"], "batch");
        assert_eq!(v["jobs"][0]["status"], "dead");
        assert_eq!(v["jobs"][1]["job"]["type"], "service");
    }

    #[test]
    fn register_and_deregister_messages() {
        let reply = JobRegisterReply {
            eval_id: "e1".into(),
            index: 12,
            job_modify_index: 12,
        };
        assert_eq!(
            render_register("web", &reply),
            "Job \"web\" registered at raft index 12 (job modify index 12)\nEvaluation e1 created\n"
        );
        let unchanged = JobRegisterReply {
            eval_id: String::new(),
            ..reply.clone()
        };
        assert_eq!(
            render_register("web", &unchanged),
            "Job \"web\" unchanged at raft index 12; no evaluation created\n"
        );
        assert_eq!(
            render_deregister("web", true, &reply),
            "Job \"web\" stopped and purged at raft index 12\nEvaluation e1 created\n"
        );
        assert_eq!(
            render_deregister("web", false, &unchanged),
            "Job \"web\" stopped at raft index 12\n"
        );
    }

    fn nodes() -> Vec<Node> {
        vec![
            Node {
                id: "node-2".into(),
                name: "b".into(),
                datacenter: "dc2".into(),
                node_class: "gpu".into(),
                status: NodeStatus::Down as i32,
                ineligible: true,
                resources: Some(Resources {
                    cpu_mhz: 8000,
                    memory_mb: 16384,
                }),
                ..Default::default()
            },
            Node {
                id: "node-1".into(),
                name: "a".into(),
                datacenter: "dc1".into(),
                status: NodeStatus::Ready as i32,
                resources: Some(Resources {
                    cpu_mhz: 4000,
                    memory_mb: 8192,
                }),
                attributes: [("os".to_string(), "linux".to_string())].into(),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn node_table() {
        assert_eq!(
            render_nodes(&nodes()),
            "\
ID      NAME  DC   CLASS  STATUS  ELIGIBLE  CPU MHZ  MEMORY MB
node-1  a     dc1  -      ready   yes       4000     8192
node-2  b     dc2  gpu    down    no        8000     16384
"
        );
        assert_eq!(render_nodes(&[]), "No nodes\n");
    }

    #[test]
    fn node_json() {
        let v = nodes_json(&nodes());
        assert_eq!(
            v["nodes"][0],
            json!({
                "id": "node-1", "name": "a", "datacenter": "dc1", "node_class": "",
                "status": "ready", "eligible": true,
                "resources": {"cpu_mhz": 4000, "memory_mb": 8192},
                "attributes": {"os": "linux"}, "create_index": 0, "modify_index": 0,
            })
        );
        assert_eq!(v["nodes"][1]["status"], "down");
        assert_eq!(v["nodes"][1]["eligible"], false);
    }

    #[test]
    fn job_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, "{\"id\": \"web\",\n \"cont\": 1}").unwrap();
        let err = read_job_file(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "{}: job file: unknown field `cont`",
                path.display()
            )),
            "{err}"
        );
        assert!(err.ends_with("at line 2 column 7"), "{err}");
        std::fs::write(&path, r#"{"id":"web","type":"batch","task_groups":[]}"#).unwrap();
        let err = read_job_file(&path).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{}: job.task_groups: must not be empty", path.display())
        );
    }

    #[test]
    fn unreachable_servers_are_named() {
        let target = Target {
            address: vec!["10.0.0.1:4647".into(), "10.0.0.2:4647".into()],
        };
        let down = ClientError::Status(Box::new(tonic::Status::unavailable("tcp connect error")));
        assert_eq!(
            target.explain(down).to_string(),
            "no server at 10.0.0.1:4647,10.0.0.2:4647 could take the call (tried for 15s): tcp connect error"
        );
        let refused = ClientError::Status(Box::new(tonic::Status::not_found(
            "job_id: no job \"web\" is registered",
        )));
        assert_eq!(
            target.explain(refused).to_string(),
            "job_id: no job \"web\" is registered"
        );
    }

    /// The CLI as the other tests would type it.
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: TopCmd,
    }

    #[derive(Subcommand)]
    enum TopCmd {
        #[command(subcommand)]
        Job(JobCmd),
        #[command(subcommand)]
        Node(NodeCmd),
    }

    #[test]
    fn parses_the_command_line() {
        let cli = Cli::try_parse_from([
            "cluster",
            "job",
            "run",
            "--address",
            "10.0.0.1:4647,10.0.0.2:4647",
            "examples/web.json",
        ])
        .unwrap();
        let TopCmd::Job(JobCmd::Run { target, file }) = cli.cmd else {
            panic!("not job run");
        };
        assert_eq!(target.address, ["10.0.0.1:4647", "10.0.0.2:4647"]);
        assert_eq!(file, Path::new("examples/web.json"));

        let cli = Cli::try_parse_from(["cluster", "job", "stop", "--purge", "web"]).unwrap();
        let TopCmd::Job(JobCmd::Stop { purge, job_id, .. }) = cli.cmd else {
            panic!("not job stop");
        };
        assert!(purge);
        assert_eq!(job_id, "web");

        let cli = Cli::try_parse_from(["cluster", "node", "status", "--json"]).unwrap();
        let TopCmd::Node(NodeCmd::Status { json, .. }) = cli.cmd else {
            panic!("not node status");
        };
        assert!(json);
    }
}
