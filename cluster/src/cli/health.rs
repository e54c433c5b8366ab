//! `cluster health`: asks one server's `GET /v1/status` whether it answers
//! and its raft runs (and with `--leader`, whether it knows a leader),
//! exiting 0 or 1. It is
//! the container image's health check and the Kubernetes probes: a probe
//! cannot present the client certificate the servers require, this can.

use std::time::Duration;

use clap::Args;
use stampede_launch::StatusReport;
use stampede_proto::security::ClientSecurityArgs;

#[derive(Debug, Clone, Args)]
pub struct HealthOpts {
    /// The server's --http address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:4646")]
    pub http: String,
    /// Healthy only once the server knows a leader (readiness); without it,
    /// answering with raft running is enough (liveness).
    #[arg(long)]
    pub leader: bool,
    /// How long to wait for the answer.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// TLS files (any role the cluster CA signed) and token; /v1/status needs no token.
    #[command(flatten)]
    pub security: ClientSecurityArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("--http {0:?} is not HOST:PORT")]
    BadAddress(String),
    #[error("GET {url}")]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("GET {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("server {id} knows no leader yet (state {state}, term {term})")]
    NoLeader { id: u64, state: String, term: u64 },
    #[error("server {id}: raft has stopped (state {state}); the server must be restarted")]
    RaftStopped { id: u64, state: String },
}

/// The state `/v1/status` reports once raft has stopped.
const SHUTDOWN: &str = "Shutdown";

/// The server's status if it is healthy by `opts`: it answers, its raft
/// runs, and with `--leader` it knows a leader.
pub async fn check(opts: &HealthOpts) -> anyhow::Result<StatusReport> {
    let host = opts
        .http
        .split_once("://")
        .map_or(opts.http.as_str(), |(_, rest)| rest);
    if host.is_empty() || host.contains('/') || !host.contains(':') {
        return Err(HealthError::BadAddress(opts.http.clone()).into());
    }
    let security = opts.security.load()?;
    let http = stampede_launch::http_client(&security, opts.timeout)?;
    let url = format!("{}://{host}/v1/status", security.scheme());
    let unreachable = |detail: String| HealthError::Unreachable {
        url: url.clone(),
        detail,
    };
    // The caller prints the error with its causes (`exit_with`).
    let response = http
        .get(&url)
        .send()
        .await
        .map_err(|source| HealthError::Request {
            url: url.clone(),
            source,
        })?;
    let code = response.status();
    let status: Option<StatusReport> = response.json().await.ok();
    let status = match status {
        // A server whose raft stopped answers 503 with its report.
        Some(s) if s.state == SHUTDOWN => {
            return Err(HealthError::RaftStopped {
                id: s.id,
                state: s.state,
            }
            .into())
        }
        Some(s) if code.is_success() => s,
        Some(_) | None if !code.is_success() => {
            return Err(unreachable(format!("answered {code}")).into())
        }
        _ => return Err(unreachable("not a status report".into()).into()),
    };
    if opts.leader && status.leader_id.is_none() {
        return Err(HealthError::NoLeader {
            id: status.id,
            state: status.state,
            term: status.term,
        }
        .into());
    }
    Ok(status)
}

pub async fn run(opts: HealthOpts) -> anyhow::Result<()> {
    let s = check(&opts).await?;
    let leader = s
        .leader_id
        .map_or("no leader".into(), |l| format!("leader {l}"));
    let line = format!(
        "server {}: {} in term {}, {leader}\n",
        s.id, s.state, s.term
    );
    stampede_proto::print_out(&line);
    Ok(())
}
