//! Allocation statuses sampled while the stream runs, for
//! `terminal_stays_terminal`: a terminal allocation revived and stopped
//! again before the end would not show in the final state alone. And the
//! jobs seen dead, which garbage collection may remove before the end.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, JobAllocationsRequest, JobListRequest, JobStatus, JobType,
};
use tokio::sync::watch;

use super::record::Sightings;

/// Every `every`, reads every job's allocations from the next server in
/// turn (each server answers from its own state) until `stop` turns true;
/// the allocations seen. A server that does not answer skips its round.
pub async fn run(
    servers: Vec<ClusterClient>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> Sightings {
    let mut seen = Sightings::default();
    if servers.is_empty() {
        return seen;
    }
    let mut round = 0;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return seen,
            _ = tick.tick() => {}
        }
        let client = &servers[round % servers.len()];
        round += 1;
        tokio::select! {
            _ = stop.changed() => return seen,
            _ = sample(client, &mut seen) => {}
        }
    }
}

/// One round on one server.
async fn sample(client: &ClusterClient, seen: &mut Sightings) {
    let jobs = client
        .retrying(|c| async move {
            let req = JobListRequest { query: None };
            Ok(c.jobs().list(req).await?.into_inner().jobs)
        })
        .await;
    let Ok(jobs) = jobs else { return };
    for j in jobs.iter().filter(|j| j.status == JobStatus::Dead as i32) {
        seen.see_dead(&j.id);
    }
    let batch: HashSet<String> = jobs
        .iter()
        .filter(|j| j.r#type == JobType::Batch as i32)
        .map(|j| j.id.clone())
        .collect();
    let mut reads = futures::stream::iter(jobs)
        .map(|j| async move {
            client
                .retrying(|c| {
                    let req = JobAllocationsRequest {
                        job_id: j.id.clone(),
                        query: None,
                    };
                    async move { Ok(c.jobs().allocations(req).await?.into_inner().allocs) }
                })
                .await
        })
        .buffer_unordered(4);
    while let Some(read) = reads.next().await {
        let Ok(allocs) = read else { continue };
        for a in &allocs {
            seen.see(a);
        }
        // A batch job whose work is all done is one garbage collection may
        // remove (as a stopped job is).
        if let Some(first) = allocs.first() {
            if batch.contains(&first.job_id)
                && allocs
                    .iter()
                    .all(|a| AllocClientStatus::is_terminal(a.client_status))
            {
                seen.see_dead(&first.job_id);
            }
        }
    }
}
