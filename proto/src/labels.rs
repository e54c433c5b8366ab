//! The names operators, metrics and dashboards use for the closed sets of the
//! wire types: one `label()` per enum, so `stampede_nodes{status="ready"}`,
//! `cluster node status` and nodesim's gauges all spell a status the same way.
//! A value outside the enum (an `i32` from a newer peer) is `unknown`.

use crate::{
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

/// The stages of a job's critical path, in path order: the `stage` label of
/// `stampede_job_stage_seconds` and the stage names of `loadgen capacity`'s
/// "where the time went". Each stage ends at the step it is named for.
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

    pub fn label(self) -> &'static str {
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

    /// The process whose clock and work end this stage.
    pub fn process(self) -> &'static str {
        match self {
            JobStage::CatchUp | JobStage::Schedule => "worker",
            JobStage::Deliver | JobStage::RunnerStart => "nodesim",
            JobStage::Observe => "loadgen",
            _ => "leader",
        }
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
}
