//! How a deployment stands, judged from its allocations: the one rule the
//! scheduler (to decide what a rolling update may replace next) and the
//! leader's deployment watcher (to write progress and end deployments) share.

use stampede_proto::{AllocClientStatus, AllocDesiredStatus, Deployment, DeploymentStatus};

use crate::state::State;

/// The deployment as its allocations say it stands, and whether the
/// scheduler should run again (a round all healthy, or canaries promoted,
/// frees room for the next round).
pub fn assess(state: &State, d: &Deployment, now_ms: u64) -> (Deployment, bool) {
    let mut next = d.clone();
    let Some(job) = state.job(&d.job_id) else {
        next.status = DeploymentStatus::Cancelled as i32;
        next.status_description = "job purged".into();
        return (next, false);
    };
    if job.stop {
        next.status = DeploymentStatus::Cancelled as i32;
        next.status_description = "job stopped".into();
        return (next, false);
    }
    let allocs: Vec<_> = state
        .job_allocs(&d.job_id)
        .into_iter()
        .filter(|a| a.deployment_id == d.id)
        .collect();
    let mut wants_eval = false;
    let mut unhealthy = 0;
    let mut late = false;
    let mut complete = true;
    for (name, g) in next.task_groups.iter_mut() {
        let group: Vec<_> = allocs.iter().filter(|a| &a.task_group == name).collect();
        let healthy = group
            .iter()
            .filter(|a| {
                a.healthy == Some(true)
                    && a.client_status == AllocClientStatus::Running as i32
                    && a.desired_status == AllocDesiredStatus::Run as i32
            })
            .count() as u32;
        g.unhealthy = group
            .iter()
            .filter(|a| {
                a.healthy == Some(false) || a.client_status == AllocClientStatus::Failed as i32
            })
            .count() as u32;
        g.placed = group.len() as u32;
        g.placed_canaries = group
            .iter()
            .filter(|a| a.canary)
            .map(|a| a.id.clone())
            .collect();
        g.placed_canaries.sort();
        if healthy > g.healthy {
            // The next round starts once the whole current one is healthy,
            // so a rollout goes in rounds of max_parallel.
            wants_eval |= healthy >= g.placed;
            if g.progress_deadline_ms > 0 {
                g.require_progress_by_ms = now_ms + g.progress_deadline_ms;
            }
        }
        g.healthy = healthy;
        if g.desired_canaries > 0 && !g.promoted {
            let healthy_canaries = group
                .iter()
                .filter(|a| a.canary && a.healthy == Some(true))
                .count() as u32;
            if g.auto_promote && healthy_canaries >= g.desired_canaries {
                g.promoted = true;
                wants_eval = true;
            }
        }
        unhealthy += g.unhealthy;
        let promoted = g.desired_canaries == 0 || g.promoted;
        if !(promoted && g.healthy >= g.desired_total) {
            complete = false;
            late |= g.require_progress_by_ms > 0 && now_ms > g.require_progress_by_ms;
        }
    }
    if unhealthy > 0 {
        next.status = DeploymentStatus::Failed as i32;
        next.status_description = format!("{unhealthy} allocation(s) unhealthy");
        wants_eval = false;
    } else if complete {
        next.status = DeploymentStatus::Successful as i32;
        next.status_description = "every allocation is healthy".into();
        wants_eval = false;
    } else if late {
        next.status = DeploymentStatus::Failed as i32;
        next.status_description = "progress deadline reached".into();
        wants_eval = false;
    }
    (next, wants_eval)
}
