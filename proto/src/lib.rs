//! Wire types shared by every stampede binary: the domain model, the raft log
//! entry and the gRPC services, generated from `proto/stampede.proto`.

#![allow(clippy::large_enum_variant)]

pub mod v1;

pub use v1::*;

/// Every raft message type, as `type_name` spells it (plus openraft's own
/// `blank` and `membership` entries).
pub const MESSAGE_TYPES: &[&str] = &[
    "node_register",
    "node_status",
    "job_register",
    "job_deregister",
    "eval_update",
    "plan_apply",
    "alloc_client_update",
    "deployment_update",
    "gc_evals",
    "gc_jobs",
    "gc_deployments",
    "gc_nodes",
    "blank",
    "membership",
];

/// Largest gRPC message any stampede binary sends or accepts. Raft batches of
/// entries and snapshot chunks are large; client reads of 10,000 nodes too.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

impl log_entry::Msg {
    /// The message type's name: the `type` label of raft entry metrics.
    pub fn type_name(&self) -> &'static str {
        match self {
            log_entry::Msg::NodeRegister(_) => "node_register",
            log_entry::Msg::NodeStatus(_) => "node_status",
            log_entry::Msg::JobRegister(_) => "job_register",
            log_entry::Msg::JobDeregister(_) => "job_deregister",
            log_entry::Msg::EvalUpdate(_) => "eval_update",
            log_entry::Msg::PlanApply(_) => "plan_apply",
            log_entry::Msg::AllocClientUpdate(_) => "alloc_client_update",
            log_entry::Msg::DeploymentUpdate(_) => "deployment_update",
            log_entry::Msg::GcEvals(_) => "gc_evals",
            log_entry::Msg::GcJobs(_) => "gc_jobs",
            log_entry::Msg::GcDeployments(_) => "gc_deployments",
            log_entry::Msg::GcNodes(_) => "gc_nodes",
            log_entry::Msg::Batch(_) => "batch",
        }
    }
}

impl AllocClientStatus {
    /// Whether a client status (a raw wire value) is final: complete,
    /// failed, or lost (the server's word for an allocation whose node went
    /// down). No client report may change it: the servers refuse one where
    /// they apply it, and loadgen's audit checks that none did. The one
    /// home of the rule for both.
    pub fn is_terminal(status: i32) -> bool {
        matches!(
            Self::try_from(status),
            Ok(Self::Complete | Self::Failed | Self::Lost)
        )
    }

    /// Whether a client status is live: pending or running.
    pub fn is_live(status: i32) -> bool {
        matches!(Self::try_from(status), Ok(Self::Pending | Self::Running))
    }
}

impl NamedTaskState {
    /// Task `task` in state `state`.
    pub fn new(task: impl Into<String>, state: TaskState) -> Self {
        Self {
            task: task.into(),
            state: Some(state),
        }
    }
}

impl LogEntry {
    /// The commands this entry carries, in order: the entry itself, or a
    /// batch's entries. A batch inside a batch is not a command (the leader
    /// never nests them) and is skipped.
    pub fn commands(&self) -> impl Iterator<Item = &LogEntry> {
        let batched = match &self.msg {
            Some(log_entry::Msg::Batch(b)) => Some(b.entries.iter()),
            _ => None,
        };
        let alone = batched.is_none().then_some(self);
        alone.into_iter().chain(
            batched
                .into_iter()
                .flatten()
                .filter(|e| !matches!(e.msg, Some(log_entry::Msg::Batch(_)))),
        )
    }
}

/// Applies [`MAX_MESSAGE_BYTES`] both ways to a generated tonic client or
/// server: the one place every stampede endpoint gets its message limits.
#[macro_export]
macro_rules! sized {
    ($endpoint:expr) => {
        $endpoint
            .max_decoding_message_size($crate::MAX_MESSAGE_BYTES)
            .max_encoding_message_size($crate::MAX_MESSAGE_BYTES)
    };
}

pub mod acl;
pub mod address;
pub mod build;
pub mod call_stream;
pub mod client;
pub mod codec;
mod labels;
pub mod liveness;
pub mod metric_defs;
pub mod metric_names;
mod metrics_http;
pub mod node_secret;
pub mod security;
mod sync;
pub use labels::{Binary, JobStage, Process, QuerySource};
pub use sync::{lock, read, write};
mod process_metrics;
pub use metrics_http::{render_metrics, serve_metrics};
pub use process_metrics::process_collector;

/// Logs of every stampede binary: to stderr, quiet by default (warnings, and
/// only errors from openraft, whose elections are chatty); `RUST_LOG` raises them.
/// Microseconds since the Unix epoch: the one clock every process on a
/// machine shares, for times that cross processes (a job's critical path).
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("warn,openraft=error")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

/// Prints `text` to stdout; a closed stdout (`cluster job status | head`)
/// ends the process quietly, as it does for other command-line tools,
/// instead of a panic in `println!`. SIGPIPE stays ignored in every
/// stampede process: with the default disposition a write to a socket the
/// other side reset (hyper writes with `writev`, which has no MSG_NOSIGNAL)
/// would kill the process without a word.
pub fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
}

/// How every stampede binary's `main` ends: on an error, `error: ` and its
/// chain of messages (`{:#}`, "outer: cause: root") on stderr, and exit
/// code 1. `main` returning a `Result` prints the `Debug` form instead,
/// which adds a stack backtrace whenever `RUST_BACKTRACE` is set in the
/// environment: noise for a user whose file has a typo.
pub fn exit_with<E: std::fmt::Display>(result: Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A binary's command run on a runtime with a worker thread per core; an
/// error if the runtime cannot be made. For the commands that do not size
/// or start their runtime in their library.
pub fn block_on<T, E: From<std::io::Error>>(
    command: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    tokio::runtime::Runtime::new()?.block_on(command)
}

/// Resolves on Ctrl-C or SIGTERM: how a server or `cluster dev` is told to
/// stop cleanly.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// `Allocation` as it was when `task_states` was a protobuf map: log
    /// entries and snapshots written then are on disk.
    #[derive(Clone, PartialEq, prost::Message)]
    struct MapAllocation {
        #[prost(string, tag = "1")]
        id: String,
        #[prost(btree_map = "string, message", tag = "13")]
        task_states: std::collections::BTreeMap<String, TaskState>,
    }

    fn state(s: &str) -> TaskState {
        TaskState {
            state: s.into(),
            restarts: 2,
            ..Default::default()
        }
    }

    #[test]
    fn task_states_read_and_write_as_the_map_they_were() {
        let as_map = MapAllocation {
            id: "a1".into(),
            task_states: [
                ("db".into(), state("dead")),
                ("web".into(), state("running")),
            ]
            .into(),
        };
        let read = Allocation::decode(&as_map.encode_to_vec()[..]).unwrap();
        assert_eq!(read.id, "a1");
        assert_eq!(
            read.task_states,
            vec![
                NamedTaskState::new("db", state("dead")),
                NamedTaskState::new("web", state("running")),
            ]
        );
        let back = MapAllocation::decode(&read.encode_to_vec()[..]).unwrap();
        assert_eq!(back, as_map);
    }
}
