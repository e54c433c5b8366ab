//! Operator commands (`cluster job ...`, `cluster node ...`): thin gRPC calls
//! to any server, and the rendering of their answers kept apart from the calls
//! so that tables and JSON can be tested without a cluster.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use stampede_proto::address::{ServerAddresses, ADDRESS_ARG};
use stampede_proto::client::{ClientError, ClusterClient};
use stampede_proto::security::ClientSecurityArgs;
use stampede_proto::{
    Allocation, Job, JobAllocationsRequest, JobDeregisterRequest, JobGetRequest, JobListRequest,
    JobRegisterReply, Node, NodeListRequest, QueryOptions,
};

use crate::model::validate;

pub mod acl;
pub mod dev;
pub mod health;
mod jobspec;
mod render;
pub mod tls;

use render::*;

/// Which servers to talk to. Any server answers any call; the others in the
/// list are tried while one is down or the cluster has no leader.
#[derive(Debug, Clone, Args)]
#[command(mut_arg(ADDRESS_ARG, |a| a
    .default_value("127.0.0.1:4647")
    .help("A server's gRPC address, HOST:PORT; a comma-separated list to try several. nodesim and loadgen read the same flag and variable.")))]
pub struct Target {
    #[command(flatten)]
    pub address: ServerAddresses,
    #[command(flatten)]
    pub security: ClientSecurityArgs,
}

impl Target {
    fn client(&self) -> anyhow::Result<ClusterClient> {
        let security = self.security.load()?;
        Ok(ClusterClient::new(&self.address, &security)?)
    }

    /// A server's answer is printed as it is; when none answered, say where we
    /// looked, since tonic's own message ("tcp connect error") does not.
    fn explain(&self, e: ClientError) -> anyhow::Error {
        match e.code() {
            Some(tonic::Code::Unavailable) => anyhow::anyhow!(
                "no server at {} could take the call (tried for {}): {e}{}",
                self.address.join(","),
                humantime::format_duration(stampede_proto::client::DEFAULT_RETRY_FOR),
                if self.security.tls.is_set() {
                    ""
                } else {
                    " (a cluster with TLS needs --tls-ca, --tls-cert and --tls-key, \
                     or STAMPEDE_TLS_CA, STAMPEDE_TLS_CERT and STAMPEDE_TLS_KEY)"
                }
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
            let reply = target
                .client()?
                .register_job(job.clone())
                .await
                .map_err(|e| target.explain(e))?;
            stampede_proto::print_out(&render_register(&job.id, &reply));
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
                stampede_proto::print_out(&format!("{:#}\n", job_status_json(&job, &allocs)));
            } else {
                stampede_proto::print_out(&render_job_status(&job, &allocs));
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
                stampede_proto::print_out(&format!("{:#}\n", job_list_json(&jobs)));
            } else {
                stampede_proto::print_out(&render_job_list(&jobs));
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
            stampede_proto::print_out(&render_deregister(&job_id, purge, &reply));
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
                stampede_proto::print_out(&format!("{:#}\n", nodes_json(&nodes)));
            } else {
                stampede_proto::print_out(&render_nodes(&nodes));
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
        source: stampede_proto::QuerySource::Cli.label().into(),
        ..Default::default()
    })
}

async fn deregister(
    client: &ClusterClient,
    job_id: &str,
    purge: bool,
) -> Result<JobRegisterReply, ClientError> {
    client
        .writing(|c| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
            address: ServerAddresses {
                list: vec!["10.0.0.1:4647".into(), "10.0.0.2:4647".into()],
            },
            security: Default::default(),
        };
        let down = ClientError::Status(Box::new(tonic::Status::unavailable("tcp connect error")));
        let said = target.explain(down).to_string();
        assert!(
            said.starts_with("no server at 10.0.0.1:4647,10.0.0.2:4647 could take the call (tried for 15s): tcp connect error"),
            "{said}"
        );
        assert!(
            said.contains("STAMPEDE_TLS_CA"),
            "without TLS flags it says how to give them: {said}"
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
        assert_eq!(*target.address, ["10.0.0.1:4647", "10.0.0.2:4647"]);
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
