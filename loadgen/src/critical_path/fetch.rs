//! Asking the servers for the traces of the jobs that ran, after the
//! drain: every server, in chunks of at most 1,000 ids, and one trace per
//! job made of their answers.
//!
//! The evaluation's and the client's steps are replicated, the same on
//! every server; when an entry applied is each server's own record, and
//! the first server to apply an entry is the leader (followers apply it
//! once they learn it committed). So the earliest apply any server saw is
//! the leader's, whichever server led: leadership may have moved during
//! the run, and a server that restarted records its replay later still.
//!
//! A killed server's record dies with it, and when every server that
//! applied an entry on time was killed at some point, only a late replay is
//! left. So loadgen reads a server's traces just before it kills it
//! ([`all_held`]) and adds them to the answers after the drain: they only
//! fill in apply boundaries of the same evaluation and allocation.

use futures::future::join_all;
use stampede_proto::client::{ClientError, ClusterClient};
use std::collections::HashMap;

use stampede_proto::{JobListRequest, JobTrace, JobTraceRequest};

/// The most ids one `JobService.Trace` call may carry.
pub const CHUNK: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("no server answered the traces of jobs {from}..{to}: {why}")]
    NoAnswer { from: usize, to: usize, why: String },
}

/// The traces of `job_ids` in order, from every client of `servers` (one
/// per server), with the traces `kept` from servers before they were
/// killed; the jobs of a chunk no server answered get a trace with `found`
/// false, and the error says which.
pub async fn fetch(
    servers: &[ClusterClient],
    job_ids: &[String],
    kept: &[JobTrace],
) -> (Vec<JobTrace>, Vec<TraceError>) {
    let mut kept_by_job: HashMap<&str, Vec<&JobTrace>> = HashMap::new();
    for t in kept {
        kept_by_job.entry(t.job_id.as_str()).or_default().push(t);
    }
    let mut traces = Vec::with_capacity(job_ids.len());
    let mut errors = Vec::new();
    for (n, chunk) in job_ids.chunks(CHUNK).enumerate() {
        let answers = join_all(servers.iter().map(|s| ask(s, chunk))).await;
        let mut ok = Vec::new();
        let mut why = Vec::new();
        for a in answers {
            match a {
                Ok(t) if t.len() == chunk.len() => ok.push(t),
                Ok(t) => why.push(format!("{} traces for {} ids", t.len(), chunk.len())),
                Err(e) => why.push(e.to_string()),
            }
        }
        if ok.is_empty() {
            errors.push(TraceError::NoAnswer {
                from: n * CHUNK,
                to: n * CHUNK + chunk.len(),
                why: why.join("; "),
            });
        }
        traces.extend(chunk.iter().enumerate().map(|(i, id)| {
            let answers: Vec<&JobTrace> = ok.iter().map(|t| &t[i]).collect();
            let kept = kept_by_job.get(id.as_str()).map_or(&[][..], |k| &k[..]);
            merge(id, &answers, kept)
        }));
    }
    (traces, errors)
}

async fn ask(server: &ClusterClient, ids: &[String]) -> Result<Vec<JobTrace>, ClientError> {
    server
        .retrying(|c| {
            let req = JobTraceRequest {
                job_ids: ids.to_vec(),
            };
            async move { Ok(c.jobs().trace(req).await?.into_inner().traces) }
        })
        .await
}

/// Every trace server `server` holds now, of each job in its state (found
/// ones only): read just before the server is killed.
pub async fn all_held(server: &ClusterClient) -> Result<Vec<JobTrace>, ClientError> {
    let jobs = server
        .retrying(|c| async move {
            let req = JobListRequest { query: None };
            Ok(c.jobs().list(req).await?.into_inner().jobs)
        })
        .await?;
    let ids: Vec<String> = jobs.into_iter().map(|j| j.id).collect();
    let mut held = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(CHUNK) {
        held.extend(ask(server, chunk).await?.into_iter().filter(|t| t.found));
    }
    Ok(held)
}

/// One trace of job `id` from the servers' answers: the most complete one
/// (the fewest unknown steps), with each applied boundary the earliest any
/// server that traced the same evaluation and allocation recorded, in its
/// answer or in a trace `kept` from it before it was killed. A kept trace
/// is never the one chosen: it may be of a version the job left since.
pub fn merge(id: &str, answers: &[&JobTrace], kept: &[&JobTrace]) -> JobTrace {
    let known = |t: &JobTrace| boundaries(t).iter().filter(|&&b| b != 0).count();
    // The first of the most complete, so a tie goes the same way each time.
    let Some(base) = answers
        .iter()
        .filter(|t| t.found && t.job_id == id)
        .copied()
        .reduce(|best, t| if known(t) > known(best) { t } else { best })
    else {
        return JobTrace {
            job_id: id.to_string(),
            ..JobTrace::default()
        };
    };
    let mut out = base.clone();
    let same = answers.iter().chain(kept).filter(|t| {
        t.found && t.job_id == id && t.eval_id == base.eval_id && t.alloc_id == base.alloc_id
    });
    for t in same {
        earliest(&mut out.registered_us, t.registered_us);
        earliest(&mut out.eval_created_us, t.eval_created_us);
        earliest(&mut out.plan_committed_us, t.plan_committed_us);
        earliest(&mut out.running_committed_us, t.running_committed_us);
    }
    out
}

/// `at` becomes `other` when that is known and earlier (0 is unknown).
fn earliest(at: &mut u64, other: u64) {
    if other != 0 && (*at == 0 || other < *at) {
        *at = other;
    }
}

fn boundaries(t: &JobTrace) -> [u64; 10] {
    [
        t.registered_us,
        t.eval_created_us,
        t.enqueued_us,
        t.dequeued_us,
        t.caught_up_us,
        t.plan_submitted_us,
        t.plan_committed_us,
        t.delivered_us,
        t.started_us,
        t.running_committed_us,
    ]
}

/// A debugging aid (`LOADGEN_TRACE_DUMP=1`): every server's own answer for
/// each job in `runs`, one JSON object a line, with loadgen's two
/// boundaries, so a clamp can be traced to the server that recorded each
/// side of it. Servers that do not answer a chunk are left out of it.
pub async fn dump(servers: &[ClusterClient], runs: &[&crate::stream::RanJob]) -> String {
    let ids: Vec<String> = runs.iter().map(|r| r.job_id.clone()).collect();
    let mut out = String::new();
    for (n, chunk) in ids.chunks(CHUNK).enumerate() {
        let answers = join_all(servers.iter().map(|s| ask(s, chunk))).await;
        for (i, _) in chunk.iter().enumerate() {
            let run = runs[n * CHUNK + i];
            let each: Vec<serde_json::Value> = answers
                .iter()
                .enumerate()
                .filter_map(|(s, a)| a.as_ref().ok().and_then(|t| t.get(i)).map(|t| (s, t)))
                .map(|(s, t)| {
                    serde_json::json!({
                        "server": s,
                        "found": t.found,
                        "eval_id": t.eval_id,
                        "alloc_id": t.alloc_id,
                        "node_id": t.node_id,
                        "boundaries": boundaries(t),
                    })
                })
                .collect();
            let line = serde_json::json!({
                "job_id": run.job_id,
                "scheduled_us": run.scheduled_us,
                "running_us": run.running_us,
                "answers": each,
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    out
}
