//! `stampede_job_stage_seconds` as a server measures it: the stages of a
//! job's critical path that a server times (`JobStage::process`, which says
//! which part times each). nodesim times the runner's start and its running
//! report, and `loadgen capacity` joins every stage of each job from
//! `JobService.Trace`.

use prometheus::{HistogramVec, Registry};
use stampede_proto::{Binary, JobStage};

/// The stages a server times, each observed by the part that sees it end.
/// Cheap to clone: the API, the leader's dequeue, the workers and the
/// blocking queries each hold one.
#[derive(Clone)]
pub struct JobStages {
    seconds: HistogramVec,
    /// `--job-times`: whether the parts stamp and time jobs' paths at all.
    on: bool,
}

impl JobStages {
    pub fn new(registry: &Registry) -> Self {
        Self {
            seconds: stampede_proto::metric_defs::job_stage_seconds(
                registry,
                &JobStage::timed_in(Binary::Cluster),
            ),
            on: true,
        }
    }

    /// With `--job-times off`: no stamps, no stage times (what they cost is
    /// measured against it).
    pub fn set_on(&mut self, on: bool) {
        self.on = on;
    }

    /// Whether jobs' paths are stamped and timed.
    pub fn on(&self) -> bool {
        self.on
    }

    pub fn observe(&self, stage: JobStage, seconds: f64) {
        if self.on {
            self.seconds
                .with_label_values(&[stage.label()])
                .observe(seconds);
        }
    }

    /// Observes the time between two unix-µs stamps; nothing if either is
    /// unknown (0) or they are out of order.
    pub fn observe_between(&self, stage: JobStage, from_us: u64, to_us: u64) {
        if from_us != 0 && to_us >= from_us {
            self.observe(stage, (to_us - from_us) as f64 / 1e6);
        }
    }
}
