//! Allocation runners: what a simulated node runs for each allocation the
//! server gives it. Built through a factory, so a user can plug in their own
//! runner without the real task machinery (Nomad's allocrunner factory, seed
//! 001).
//!
//! The contract is small: a runner is started once with `run`, told about
//! server-side changes with `update`, stopped with `destroy`, and reports the
//! client-side state of its allocation through its [`Reporter`].

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use stampede_proto::{AllocClientStatus, Allocation, JobType, NamedTaskState, TaskState};

/// The client-side state of one allocation, as a runner reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocReport {
    pub client_status: AllocClientStatus,
    pub description: String,
    /// The task's state name (`pending`, `running`, `dead`).
    pub task_state: String,
    /// Set once the allocation has been healthy for `min_healthy_time`.
    pub healthy: Option<bool>,
}

/// Where a runner reports: the node's shared update buffer. Reporting never
/// waits on the network (seed 001: no back-pressure on runners).
pub trait ReportSink: Send + Sync {
    /// `previous` is the client status the allocation had before this report.
    /// The id is the runner's own, shared: a report allocates no copy of it.
    /// `delivered`: when the node got the allocation, for the job's
    /// critical path.
    fn report(
        &self,
        alloc_id: &Arc<str>,
        report: AllocReport,
        previous: AllocClientStatus,
        delivered: Delivered,
    );
}

/// A runner's handle for reporting its allocation's state. It remembers the
/// last client status, so the node knows which reports change it.
#[derive(Clone)]
pub struct Reporter {
    alloc_id: Arc<str>,
    last: Arc<AtomicI32>,
    sink: Arc<dyn ReportSink>,
    delivered: Delivered,
}

/// When the node's query returned an allocation, and when the server
/// created it (its `create_time_ms`, 0 if not known): a running report
/// carries its times as offsets from that, a third of the bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    pub at_us: u64,
    pub created_ms: u64,
}

impl Reporter {
    /// `status` is the client status the server holds for the allocation;
    /// made when the node's query has just returned it.
    pub fn new(alloc_id: &str, status: AllocClientStatus, sink: Arc<dyn ReportSink>) -> Self {
        Self {
            alloc_id: alloc_id.into(),
            last: Arc::new(AtomicI32::new(status as i32)),
            sink,
            delivered: Delivered {
                at_us: stampede_proto::unix_us(),
                created_ms: 0,
            },
        }
    }

    /// The allocation's `create_time_ms`, which its times are sent after.
    pub fn created_at(mut self, created_ms: u64) -> Self {
        self.delivered.created_ms = created_ms;
        self
    }

    pub fn report(&self, report: AllocReport) {
        let previous = self
            .last
            .swap(report.client_status as i32, Ordering::Relaxed);
        let previous = AllocClientStatus::try_from(previous).unwrap_or_default();
        self.sink
            .report(&self.alloc_id, report, previous, self.delivered);
    }

    /// The last client status reported (or the server's, before any report).
    pub fn status(&self) -> AllocClientStatus {
        AllocClientStatus::try_from(self.last.load(Ordering::Relaxed)).unwrap_or_default()
    }
}

/// The minimum a runner does for one allocation.
pub trait AllocRunner: Send {
    /// Starts the allocation; called once, right after the factory built it.
    fn run(&mut self);
    /// The server changed the allocation while it should keep running (for
    /// example a new job version applied in place).
    fn update(&mut self, alloc: &Allocation);
    /// The server wants the allocation stopped (or has lost it): stop its
    /// tasks and report the final state. Called at most once.
    fn destroy(&mut self);
}

/// Builds a runner for an allocation.
pub type AllocRunnerFactory =
    Arc<dyn Fn(&Allocation, Reporter) -> Box<dyn AllocRunner> + Send + Sync>;

/// The scripted lifecycle of the default mock runner.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// Task events while pending (received, task setup, driver), one per
    /// delay; none changes the client status, so they are typical updates.
    pub task_events: u32,
    /// Between task events, and from the last one to running.
    pub event_delay: Duration,
    /// How long a batch allocation runs before it completes.
    pub batch_duration: Duration,
    /// How long a running allocation stays up before it counts as healthy.
    pub min_healthy_time: Duration,
    /// Chance (0 to 1) that a start fails; a failed allocation is replaced by the server.
    pub failure_probability: f64,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            task_events: 3,
            event_delay: Duration::from_millis(150),
            batch_duration: Duration::from_secs(30),
            min_healthy_time: Duration::from_secs(1),
            failure_probability: 0.0,
        }
    }
}

/// The default factory: a [`MockRunner`] per allocation.
pub fn mock_factory(config: MockConfig) -> AllocRunnerFactory {
    let config = Arc::new(config);
    Arc::new(move |alloc, reporter| Box::new(MockRunner::new(alloc, reporter, config.clone())))
}

/// Runs a scripted lifecycle on a timer: pending with task events, running,
/// healthy, and for batch work complete; or failed, with the configured
/// probability. A service's script ends once healthy, so an idle running
/// allocation costs no task.
pub struct MockRunner {
    batch: bool,
    /// The group's `min_healthy_time`, when its job has an update block.
    min_healthy_time: Option<Duration>,
    reporter: Reporter,
    config: Arc<MockConfig>,
    /// Tells the script to stop. Not a task handle: a handle would keep the
    /// finished task's memory for the allocation's whole life.
    stop: Arc<tokio::sync::Notify>,
    stopped: bool,
}

/// The names of the mock's pending task events, in order (then repeating).
pub const TASK_EVENTS: &[&str] = &["task setup", "downloading artifacts", "driver started"];

fn report(
    status: AllocClientStatus,
    task_state: &str,
    description: &str,
    healthy: Option<bool>,
) -> AllocReport {
    AllocReport {
        client_status: status,
        description: description.into(),
        task_state: task_state.into(),
        healthy,
    }
}

impl MockRunner {
    pub fn new(alloc: &Allocation, reporter: Reporter, config: Arc<MockConfig>) -> Self {
        Self {
            batch: alloc.job_type == JobType::Batch as i32,
            min_healthy_time: (alloc.min_healthy_time_ms > 0)
                .then(|| Duration::from_millis(alloc.min_healthy_time_ms)),
            reporter,
            config,
            stop: Arc::new(tokio::sync::Notify::new()),
            stopped: false,
        }
    }
}

impl AllocRunner for MockRunner {
    fn run(&mut self) {
        let reporter = self.reporter.clone();
        let config = self.config.clone();
        let batch = self.batch;
        let min_healthy_time = self.min_healthy_time.unwrap_or(config.min_healthy_time);
        let fails = rand::thread_rng().gen_bool(config.failure_probability.clamp(0.0, 1.0));
        reporter.report(report(
            AllocClientStatus::Pending,
            "pending",
            "received",
            None,
        ));
        let script = async move {
            for i in 0..config.task_events {
                tokio::time::sleep(config.event_delay).await;
                let event = TASK_EVENTS[i as usize % TASK_EVENTS.len()];
                reporter.report(report(AllocClientStatus::Pending, "pending", event, None));
            }
            tokio::time::sleep(config.event_delay).await;
            if fails {
                reporter.report(report(
                    AllocClientStatus::Failed,
                    "dead",
                    "task failed to start",
                    Some(false),
                ));
                return;
            }
            reporter.report(report(
                AllocClientStatus::Running,
                "running",
                "task started",
                None,
            ));
            tokio::time::sleep(min_healthy_time).await;
            reporter.report(report(
                AllocClientStatus::Running,
                "running",
                "healthy",
                Some(true),
            ));
            if batch {
                let rest = config.batch_duration.saturating_sub(min_healthy_time);
                tokio::time::sleep(rest).await;
                reporter.report(report(
                    AllocClientStatus::Complete,
                    "dead",
                    "task finished",
                    Some(true),
                ));
            }
        };
        let stop = self.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = script => {}
                _ = stop.notified() => {}
            }
        });
    }

    fn update(&mut self, _alloc: &Allocation) {}

    fn destroy(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        // A permit is stored if the script is between awaits, so it stops
        // at its next one.
        self.stop.notify_one();
        if !AllocClientStatus::is_terminal(self.reporter.status() as i32) {
            self.reporter.report(report(
                AllocClientStatus::Complete,
                "dead",
                "stopped by the server",
                None,
            ));
        }
    }
}

impl Drop for MockRunner {
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

/// The task states a report turns into on the wire: its one task's.
pub fn task_states(report: &AllocReport) -> Vec<NamedTaskState> {
    vec![NamedTaskState::new(
        "main",
        TaskState {
            state: report.task_state.clone(),
            failed: report.client_status == AllocClientStatus::Failed,
            ..Default::default()
        },
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::AllocDesiredStatus;
    use std::sync::Mutex;

    /// Records every report, in order.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, AllocReport)>>);

    impl ReportSink for Recorder {
        fn report(
            &self,
            alloc_id: &Arc<str>,
            report: AllocReport,
            _: AllocClientStatus,
            _: Delivered,
        ) {
            self.0.lock().unwrap().push((alloc_id.to_string(), report));
        }
    }

    impl Recorder {
        fn statuses(&self) -> Vec<(AllocClientStatus, Option<bool>)> {
            self.0
                .lock()
                .unwrap()
                .iter()
                .map(|(_, r)| (r.client_status, r.healthy))
                .collect()
        }
    }

    fn alloc(id: &str, job: &str) -> Allocation {
        Allocation {
            id: id.into(),
            job_id: job.into(),
            desired_status: AllocDesiredStatus::Run as i32,
            ..Default::default()
        }
    }

    fn config(failure_probability: f64) -> MockConfig {
        MockConfig {
            task_events: 2,
            event_delay: Duration::from_millis(500),
            batch_duration: Duration::from_secs(10),
            min_healthy_time: Duration::from_secs(2),
            failure_probability,
        }
    }

    /// The minimum a user writes to plug in their own runner: the trait's three
    /// methods and a factory closure.
    #[tokio::test]
    async fn a_custom_runner_plugs_in_through_the_factory() {
        struct Instant(Reporter);
        impl AllocRunner for Instant {
            fn run(&mut self) {
                self.0.report(report(
                    AllocClientStatus::Running,
                    "running",
                    "up",
                    Some(true),
                ));
            }
            fn update(&mut self, _: &Allocation) {}
            fn destroy(&mut self) {
                self.0
                    .report(report(AllocClientStatus::Complete, "dead", "down", None));
            }
        }
        let factory: AllocRunnerFactory = Arc::new(|_, reporter| Box::new(Instant(reporter)));
        let sink = Arc::new(Recorder::default());
        let mut runner = factory(
            &alloc("a1", "web"),
            Reporter::new("a1", AllocClientStatus::Pending, sink.clone()),
        );
        runner.run();
        runner.destroy();
        assert_eq!(
            sink.statuses(),
            vec![
                (AllocClientStatus::Running, Some(true)),
                (AllocClientStatus::Complete, None)
            ]
        );
        assert!(sink.0.lock().unwrap().iter().all(|(id, _)| id == "a1"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_mock_runs_a_service_to_healthy_and_stops_when_told() {
        let sink = Arc::new(Recorder::default());
        let factory = mock_factory(config(0.0));
        let mut runner = factory(
            &alloc("a1", "web"),
            Reporter::new("a1", AllocClientStatus::Pending, sink.clone()),
        );
        runner.run();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            sink.statuses(),
            vec![
                (AllocClientStatus::Pending, None),
                (AllocClientStatus::Pending, None),
                (AllocClientStatus::Pending, None),
                (AllocClientStatus::Running, None),
                (AllocClientStatus::Running, Some(true)),
            ]
        );
        let events: Vec<String> = sink.0.lock().unwrap()[1..3]
            .iter()
            .map(|(_, r)| r.description.clone())
            .collect();
        assert_eq!(events, ["task setup", "downloading artifacts"]);
        runner.destroy();
        runner.destroy();
        assert_eq!(
            sink.statuses()[5..],
            [(AllocClientStatus::Complete, None)],
            "stopping reports once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn batch_work_completes_and_a_failing_start_fails() {
        let sink = Arc::new(Recorder::default());
        let batch = Allocation {
            job_type: JobType::Batch as i32,
            ..alloc("b1", "etl")
        };
        let mut runner = mock_factory(config(0.0))(
            &batch,
            Reporter::new("b1", AllocClientStatus::Pending, sink.clone()),
        );
        runner.run();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            sink.statuses().last(),
            Some(&(AllocClientStatus::Complete, Some(true)))
        );

        let sink = Arc::new(Recorder::default());
        let mut runner = mock_factory(config(1.0))(
            &alloc("f1", "web"),
            Reporter::new("f1", AllocClientStatus::Pending, sink.clone()),
        );
        runner.run();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            sink.statuses(),
            vec![
                (AllocClientStatus::Pending, None),
                (AllocClientStatus::Pending, None),
                (AllocClientStatus::Pending, None),
                (AllocClientStatus::Failed, Some(false))
            ]
        );
        runner.destroy();
        assert_eq!(sink.statuses().len(), 4, "a failed allocation stays failed");
    }
}
