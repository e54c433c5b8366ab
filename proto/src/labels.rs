//! The names operators, metrics and dashboards use for the closed sets of the
//! wire types: one `label()` per enum, so `stampede_nodes{status="ready"}`,
//! `cluster node status` and nodesim's gauges all spell a status the same way.
//! A value outside the enum (an `i32` from a newer peer) is `unknown`.

use crate::v1::{
    AllocClientStatus, AllocDesiredStatus, DeploymentStatus, EvalStatus, JobStatus, JobType,
    NodeStatus,
};

macro_rules! labels {
    ($($ty:ident { $($variant:ident => $label:literal),+ $(,)? })+) => {$(
        impl $ty {
            /// The lower-case name of this value.
            pub fn label(self) -> &'static str {
                match self {
                    $($ty::$variant => $label,)+
                }
            }

            /// The label of a raw wire value; `unknown` when out of range.
            pub fn label_of(value: i32) -> &'static str {
                $ty::try_from(value).map_or("unknown", $ty::label)
            }
        }
    )+};
}

labels! {
    NodeStatus {
        Unspecified => "unknown",
        Initializing => "initializing",
        Ready => "ready",
        Down => "down",
    }
    JobType {
        Unspecified => "unknown",
        Service => "service",
        Batch => "batch",
        System => "system",
        Core => "core",
    }
    JobStatus {
        Unspecified => "unknown",
        Pending => "pending",
        Running => "running",
        Dead => "dead",
    }
    EvalStatus {
        Unspecified => "unknown",
        Pending => "pending",
        Blocked => "blocked",
        Complete => "complete",
        Failed => "failed",
        Canceled => "canceled",
    }
    AllocDesiredStatus {
        Unspecified => "unknown",
        Run => "run",
        Stop => "stop",
    }
    AllocClientStatus {
        Unspecified => "unknown",
        Pending => "pending",
        Running => "running",
        Complete => "complete",
        Failed => "failed",
        Lost => "lost",
    }
    DeploymentStatus {
        Unspecified => "unknown",
        Running => "running",
        Paused => "paused",
        Successful => "successful",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

/// Who asked a blocking query: the `source` of `QueryOptions`, and the
/// `source` label of the servers' blocking-query metrics. A caller may send
/// any string; what is not one of these counts as `other`, so the label
/// stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuerySource {
    /// A client node's long poll of its allocations (nodesim).
    ClientAllocs,
    /// The leader's deployment watchers.
    DeploymentWatcher,
    /// loadgen following its jobs.
    Loadgen,
    /// Scheduler workers.
    Worker,
    /// The operator CLI.
    Cli,
    Other,
}

impl QuerySource {
    pub const ALL: [QuerySource; 6] = [
        QuerySource::ClientAllocs,
        QuerySource::DeploymentWatcher,
        QuerySource::Loadgen,
        QuerySource::Worker,
        QuerySource::Cli,
        QuerySource::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            QuerySource::ClientAllocs => "client_allocs",
            QuerySource::DeploymentWatcher => "deployment_watcher",
            QuerySource::Loadgen => "loadgen",
            QuerySource::Worker => "worker",
            QuerySource::Cli => "cli",
            QuerySource::Other => "other",
        }
    }

    /// The source a query names; `Other` for anything unknown.
    pub fn parse(source: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|s| s.label() == source)
            .unwrap_or(QuerySource::Other)
    }
}

/// A process a job's path crosses, as the stages name it: the `process` of
/// a stage in `summary.json` and `traces.json`, and where a stage is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Process {
    /// The leader server: its API, broker, plan applier and deployment
    /// watchers, and the raft applies the path reads (an entry applies there
    /// first).
    Leader,
    /// A scheduler worker (on any server).
    Worker,
    /// Whichever server a call came to (a follower as well as the leader):
    /// the registration's API call, a blocking query's answer.
    Server,
    Nodesim,
    Loadgen,
}

/// The binaries whose processes a stage is timed in, and which loadgen
/// samples: the one tag that says which kind of process a series is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    Cluster,
    Nodesim,
    Loadgen,
}

impl Binary {
    pub const ALL: [Binary; 3] = [Binary::Cluster, Binary::Nodesim, Binary::Loadgen];

    /// The binary's name.
    pub const fn label(self) -> &'static str {
        match self {
            Binary::Cluster => "cluster",
            Binary::Nodesim => "nodesim",
            Binary::Loadgen => "loadgen",
        }
    }

    /// The binary named `label`, if any.
    pub fn from_label(label: &str) -> Option<Binary> {
        Binary::ALL.into_iter().find(|b| b.label() == label)
    }
}

impl Process {
    pub const fn label(self) -> &'static str {
        match self {
            Process::Leader => "leader",
            Process::Worker => "worker",
            Process::Server => "server",
            Process::Nodesim => "nodesim",
            Process::Loadgen => "loadgen",
        }
    }

    /// The binary this process runs.
    pub fn binary(self) -> Binary {
        match self {
            Process::Leader | Process::Worker | Process::Server => Binary::Cluster,
            Process::Nodesim => Binary::Nodesim,
            Process::Loadgen => Binary::Loadgen,
        }
    }
}

/// The stages of a job's critical path, in path order: the `stage` label of
/// `stampede_job_stage_seconds` and the stage names of `loadgen capacity`'s
/// "where the time went" (`summary.json`, `traces.json`). Each stage ends at
/// the step it is named for. The one definition of the stages' names, order
/// and processes: the servers, nodesim and loadgen all take them from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStage {
    /// Submitted → the job's registration applied.
    Register,
    /// → the evaluation that placed the job's last allocation created: 0
    /// unless a later one than the registration's did (a rolling update's
    /// next step, once the previous step's allocations were healthy).
    Rollout,
    /// → its evaluation ready in the leader's broker.
    Enqueue,
    /// → a worker took it.
    BrokerWait,
    /// → the worker's state reached the evaluation's index.
    CatchUp,
    /// → the worker sent its plan.
    Schedule,
    /// → the plan's entry applied.
    PlanCommit,
    /// → the node's blocking query returned the allocation.
    Deliver,
    /// → the node's runner started it.
    RunnerStart,
    /// → the client update that reported it running applied.
    ReportRunning,
    /// → loadgen saw the job running.
    Observe,
}

impl JobStage {
    /// Every stage, in path order: stage `i` of a job's path runs from its
    /// boundary `i` to `i + 1`.
    pub const ALL: [JobStage; 11] = [
        JobStage::Register,
        JobStage::Rollout,
        JobStage::Enqueue,
        JobStage::BrokerWait,
        JobStage::CatchUp,
        JobStage::Schedule,
        JobStage::PlanCommit,
        JobStage::Deliver,
        JobStage::RunnerStart,
        JobStage::ReportRunning,
        JobStage::Observe,
    ];

    /// The stage's name (a contract: metrics, `summary.json`, `traces.json`
    /// and the dashboards carry it).
    pub const fn label(self) -> &'static str {
        match self {
            JobStage::Register => "register",
            JobStage::Rollout => "rollout",
            JobStage::Enqueue => "enqueue",
            JobStage::BrokerWait => "broker_wait",
            JobStage::CatchUp => "catch_up",
            JobStage::Schedule => "schedule",
            JobStage::PlanCommit => "plan_commit",
            JobStage::Deliver => "deliver",
            JobStage::RunnerStart => "runner_start",
            JobStage::ReportRunning => "report_running",
            JobStage::Observe => "observe",
        }
    }

    /// The stage named `name`, if one is.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.label() == name)
    }

    /// The process that times this stage in `stampede_job_stage_seconds`:
    /// the one that sees it end. `register` is the API call of the server
    /// the registration came to (request to reply, a follower's forward
    /// included); `rollout` the leader's deployment watcher; `enqueue` and
    /// `broker_wait` the leader's dequeue; `catch_up`, `schedule` and
    /// `plan_commit` a worker (the plan from its submission to the
    /// applier's answer); `deliver` and `observe` the server whose blocking
    /// query answers the node or loadgen (from the apply to the answer);
    /// `runner_start` and `report_running` nodesim (the latter from the
    /// start to the server's acknowledgement of the running report).
    pub const fn process(self) -> Process {
        match self {
            JobStage::Rollout | JobStage::Enqueue | JobStage::BrokerWait => Process::Leader,
            JobStage::CatchUp | JobStage::Schedule | JobStage::PlanCommit => Process::Worker,
            JobStage::Register | JobStage::Deliver | JobStage::Observe => Process::Server,
            JobStage::RunnerStart | JobStage::ReportRunning => Process::Nodesim,
        }
    }

    /// The process whose clock stamps the stage's end in a job's path (the
    /// boundary `JobService.Trace` or loadgen records): the `process` of
    /// the stage in `summary.json` and `traces.json`. It differs from
    /// [`JobStage::process`] where the end is an entry's apply (`plan_commit`
    /// and `report_running`: the leader's apply) or is stamped by the
    /// process the answer goes to (`deliver`: nodesim got the allocation;
    /// `observe`: loadgen saw the job running).
    pub const fn traced_by(self) -> Process {
        match self {
            JobStage::CatchUp | JobStage::Schedule => Process::Worker,
            JobStage::Deliver | JobStage::RunnerStart => Process::Nodesim,
            JobStage::Observe => Process::Loadgen,
            JobStage::Register
            | JobStage::Rollout
            | JobStage::Enqueue
            | JobStage::BrokerWait
            | JobStage::PlanCommit
            | JobStage::ReportRunning => Process::Leader,
        }
    }

    /// The stages that processes of `binary` time, in path order: each
    /// registers only these, so no stage is counted twice.
    pub fn timed_in(binary: Binary) -> Vec<JobStage> {
        Self::ALL
            .into_iter()
            .filter(|s| s.process().binary() == binary)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_short_lower_case_names() {
        assert_eq!(NodeStatus::Ready.label(), "ready");
        assert_eq!(AllocClientStatus::label_of(5), "lost");
        assert_eq!(AllocClientStatus::label_of(99), "unknown");
        for s in QuerySource::ALL {
            assert_eq!(QuerySource::parse(s.label()), s);
        }
        assert_eq!(QuerySource::parse("a-made-up-caller"), QuerySource::Other);
    }

    #[test]
    fn every_stage_is_timed_once_and_named_once() {
        let timed: Vec<JobStage> = [Binary::Cluster, Binary::Nodesim, Binary::Loadgen]
            .into_iter()
            .flat_map(JobStage::timed_in)
            .collect();
        assert_eq!(timed.len(), JobStage::ALL.len());
        for s in JobStage::ALL {
            assert!(timed.contains(&s), "{s:?} is timed nowhere");
            assert_eq!(JobStage::parse(s.label()), Some(s));
        }
        assert_eq!(
            JobStage::timed_in(Binary::Nodesim),
            [JobStage::RunnerStart, JobStage::ReportRunning]
        );
        assert!(JobStage::timed_in(Binary::Loadgen).is_empty());
        assert_eq!(JobStage::parse("queued"), None);
    }
}
