//! One submission of the stream, followed: the write and its answer, then
//! the job to its placement and to its allocations running, each through a
//! blocking query.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, EvalGetRequest, EvalStatus, Job, JobSummaryReply,
    JobSummaryRequest, JobType, QueryOptions,
};
use tokio::time::Instant;

use super::{Ack, RanJob, Tally};
use crate::invariants::{Outcome, Write, WriteKind};
use crate::metrics::LoadMetrics;

/// How long a blocking query of the follower waits.
const FOLLOW_WAIT: Duration = Duration::from_secs(30);

/// A submission: the job, whether it is an update or a scale and its spec
/// version, and the times it counts from (the stream's start and its own
/// scheduled time).
pub(super) struct Submission {
    pub(super) job: Job,
    pub(super) update: bool,
    pub(super) version: u64,
    pub(super) scaled: bool,
    pub(super) start: Instant,
    pub(super) scheduled: Instant,
}

/// Registers the submission's job, records the write, and follows the job
/// to placement and to running.
pub(super) async fn submit_and_follow(
    client: ClusterClient,
    s: Submission,
    tally: Arc<Mutex<Tally>>,
    metrics: LoadMetrics,
) {
    let nth = {
        let mut t = tally.lock().unwrap();
        let n = t.sent.entry(s.job.id.clone()).or_default();
        *n += 1;
        *n
    };
    let Some((eval_id, registered)) = submit(&client, &s, &tally, &metrics).await else {
        return;
    };
    let _following = Following::start(&metrics.following);
    if !placed(&client, &tally, &s.job.id, &eval_id).await {
        return;
    }
    {
        let mut t = tally.lock().unwrap();
        Tally::record(&mut t.placement, &metrics.placement, s.scheduled);
        let at = (s.scheduled - s.start).as_secs_f64();
        let ms = s.scheduled.elapsed().as_secs_f64() * 1000.0;
        t.journal.jobs.placed.push((at, ms));
        if s.update {
            t.journal.jobs.rollouts.push(at);
        }
        t.report.placed += 1;
        t.last_placement = Some(Instant::now());
    }
    let Some(up) = running(&client, &tally, &s.job, registered).await else {
        return;
    };
    let now = Instant::now();
    let mut t = tally.lock().unwrap();
    Tally::record(&mut t.running, &metrics.time_to_running, s.scheduled);
    let at = (s.scheduled - s.start).as_secs_f64();
    t.journal
        .jobs
        .ran
        .push((at, (now - s.scheduled).as_secs_f64() * 1000.0, up));
    if t.sent.get(&s.job.id).is_some_and(|&n| n > nth) {
        t.journal.jobs.superseded.push(at);
    }
    let ran = RanJob {
        job_id: s.job.id.clone(),
        scheduled_us: t.clock.unix_us(s.scheduled),
        running_us: t.clock.unix_us(now),
    };
    t.journal.jobs.ran_jobs.push(ran);
    t.settled.insert(s.job.id.clone());
    t.report.running += 1;
    t.report.allocations_placed += up;
}

/// Registers the job and records the write and, when it is acknowledged,
/// the acknowledgement; the evaluation it created and the registration's
/// raft index, or `None` if it failed.
async fn submit(
    client: &ClusterClient,
    s: &Submission,
    tally: &Mutex<Tally>,
    metrics: &LoadMetrics,
) -> Option<(String, u64)> {
    let job = &s.job;
    let sent_s = s.start.elapsed().as_secs_f64();
    let reply = client.register_job(job.clone()).await;
    tally.lock().unwrap().journal.writes.push(Write {
        job_id: job.id.clone(),
        kind: WriteKind::Register {
            version: s.version,
            count: job.task_groups[0].count(),
        },
        sent_s,
        answered_s: s.start.elapsed().as_secs_f64(),
        outcome: Outcome::of(&reply),
    });
    let reply = match reply {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(job = job.id, "submission failed: {e}");
            tally.lock().unwrap().report.failed += 1;
            metrics.submitted(crate::metrics::Outcome::Failed);
            return None;
        }
    };
    let acked_s = s.start.elapsed().as_secs_f64();
    metrics.submitted(crate::metrics::Outcome::Accepted);
    let mut t = tally.lock().unwrap();
    t.report.submitted += 1;
    t.report.updates += s.update as u64;
    t.report.scales += s.scaled as u64;
    t.journal.acked.insert(job.id.clone());
    t.journal.acks.push(Ack {
        scheduled_s: (s.scheduled - s.start).as_secs_f64(),
        acked_s,
    });
    Some((reply.eval_id, reply.index))
}

/// Waits until evaluation `eval_id` of job `job_id` has completed (or a
/// newer evaluation of the job took over); false if it could not be followed.
async fn placed(client: &ClusterClient, tally: &Mutex<Tally>, job_id: &str, eval_id: &str) -> bool {
    let mut index = 1;
    loop {
        let Some(got) = read(client, tally, job_id, |c| async move {
            let req = EvalGetRequest {
                eval_id: eval_id.to_string(),
                query: Some(query(index)),
            };
            Ok(c.evals().get(req).await?.into_inner())
        })
        .await
        else {
            return false;
        };
        index = got.index;
        let status = got.eval.map_or(0, |e| e.status);
        let done = [
            EvalStatus::Complete,
            EvalStatus::Blocked,
            // A newer evaluation of the job took over: the job is followed
            // to running all the same.
            EvalStatus::Failed,
            EvalStatus::Canceled,
        ];
        if done.iter().any(|d| *d as i32 == status) {
            return true;
        }
    }
}

/// Waits until every allocation of the job's newest spec runs (or, for
/// batch work, ran): how many, or `None` if it could not be followed.
/// The first read asks for the job's allocations as of after its
/// registration (raft index `registered`), so a server that has not
/// applied the placement yet waits for it: without that, a server a
/// moment behind answered with the previous version's allocations, all
/// complete, and a batch job's update counted as running 3 ms after it was
/// sent, before it was placed (a clamp in its path of 600 ms).
async fn running(
    client: &ClusterClient,
    tally: &Mutex<Tally>,
    job: &Job,
    registered: u64,
) -> Option<u64> {
    let want = job.task_groups[0].count() as u64;
    let system = job.r#type == JobType::System as i32;
    let mut index = registered.max(1);
    loop {
        let job_id = &job.id;
        let got = read(client, tally, job_id, |c| async move {
            let req = JobSummaryRequest {
                job_id: job_id.clone(),
                query: Some(query(index)),
            };
            Ok(c.jobs().summary(req).await?.into_inner())
        })
        .await?;
        index = got.index;
        let (up, total) = newest_up(&got);
        let enough = if system {
            up > 0 && up == total
        } else {
            up >= want
        };
        if enough {
            return Some(up);
        }
    }
}

/// Of the newest spec placed (this submission's or a later one's): how
/// many allocations run or ran, and how many are meant to run.
fn newest_up(got: &JobSummaryReply) -> (u64, u64) {
    let newest = got.counts.iter().map(|c| c.job_version).max().unwrap_or(0);
    let current: Vec<_> = got
        .counts
        .iter()
        .filter(|c| c.desired_status == AllocDesiredStatus::Run as i32)
        .filter(|c| c.job_version == newest)
        .collect();
    let total = current.iter().map(|c| c.count).sum();
    let up = current
        .iter()
        .filter(|c| {
            c.client_status == AllocClientStatus::Running as i32
                || c.client_status == AllocClientStatus::Complete as i32
        })
        .map(|c| c.count)
        .sum();
    (up, total)
}

/// Counts a job as followed until the follower ends, however it ends
/// (done, lost, or aborted when the drain runs out).
struct Following(prometheus::IntGauge);

impl Following {
    fn start(gauge: &prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One read while following a job: retried on other servers while the
/// cluster is unavailable, and after a pause while the answering server does
/// not know the object yet (it is a little behind the one that took the
/// write). `None`, counted as failed, when following is hopeless.
async fn read<T, F, Fut>(
    client: &ClusterClient,
    tally: &Mutex<Tally>,
    job_id: &str,
    call: F,
) -> Option<T>
where
    F: Fn(ClusterClient) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    // A blocking read waits up to FOLLOW_WAIT on the server before it answers.
    let client = client
        .clone()
        .with_attempt_timeout(FOLLOW_WAIT + stampede_proto::client::DEFAULT_ATTEMPT_TIMEOUT);
    loop {
        match client.retrying(&call).await {
            Ok(v) => return Some(v),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                lost(tally, job_id, e);
                return None;
            }
        }
    }
}

/// A job that could no longer be followed counts as failed.
fn lost(tally: &Mutex<Tally>, job_id: &str, e: stampede_proto::client::ClientError) {
    tracing::warn!(job = job_id, "following the job failed: {e}");
    tally.lock().unwrap().report.failed += 1;
}

fn query(min_index: u64) -> QueryOptions {
    QueryOptions {
        min_index,
        max_wait_ms: FOLLOW_WAIT.as_millis() as u64,
        source: stampede_proto::QuerySource::Loadgen.label().into(),
    }
}
