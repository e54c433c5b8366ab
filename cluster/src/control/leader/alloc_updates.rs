//! Client allocation updates, batched on the leader: every `Node.UpdateAlloc`
//! call that arrives within one window (50 ms by default) goes into one raft
//! entry, and each caller is answered with that entry's index. An allocation
//! that fails or completes gets an evaluation for its job in the same entry
//! (the scheduler decides whether it is replaced).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{Histogram, IntCounter, Registry};
use stampede_proto::lock;
use stampede_proto::metric_defs::{histogram, int_counter};
use stampede_proto::{
    log_entry::Msg, AllocClientStatus, AllocClientUpdateEntry, Allocation, LogEntry,
};
use tokio::sync::{mpsc, oneshot};

use super::context::LeaderContext;
use crate::model::{alloc_terminal, new_eval, now_ms};
use crate::raft::ProposeError;

/// How long the leader gathers updates into one entry by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(50);

/// Why an update was not written.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("this server is not the leader; retry")]
    NotLeader,
    #[error("leadership changed; retry")]
    LeadershipChanged,
    #[error(transparent)]
    Propose(#[from] ProposeError),
}

pub struct PendingUpdate {
    allocs: Vec<Allocation>,
    /// Shared by every caller of a batch: they all get the one entry's answer.
    reply: oneshot::Sender<Result<u64, Arc<UpdateError>>>,
}

pub struct AllocUpdateMetrics {
    /// Allocation updates per raft entry.
    pub batch_allocs: Histogram,
    pub calls: IntCounter,
    pub entries: IntCounter,
}

pub struct AllocUpdates {
    tx: Mutex<Option<mpsc::UnboundedSender<PendingUpdate>>>,
    /// How long a batch stays open after its first update.
    pub(super) window: Duration,
    pub metrics: Arc<AllocUpdateMetrics>,
}

impl AllocUpdates {
    pub fn new(window: Duration, registry: &Registry) -> Self {
        let metrics = AllocUpdateMetrics {
            batch_allocs: histogram(
                registry,
                "stampede_alloc_update_batch_allocs",
                "Client allocation updates per raft entry.",
                (1.0, 2.0, 16),
            ),
            calls: int_counter(
                registry,
                "stampede_alloc_update_calls_total",
                "Node.UpdateAlloc calls taken by the leader.",
            ),
            entries: int_counter(
                registry,
                "stampede_alloc_update_entries_total",
                "Raft entries written for batches of client allocation updates.",
            ),
        };
        Self {
            tx: Mutex::default(),
            window,
            metrics: Arc::new(metrics),
        }
    }

    pub(super) fn open(&self) -> mpsc::UnboundedReceiver<PendingUpdate> {
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&self.tx) = Some(tx);
        rx
    }

    pub(super) fn close(&self) {
        lock(&self.tx).take();
    }

    /// Adds `allocs` to the current batch; returns the index it was applied at.
    pub async fn submit(&self, allocs: Vec<Allocation>) -> Result<u64, Arc<UpdateError>> {
        let tx = lock(&self.tx).clone().ok_or(UpdateError::NotLeader)?;
        let (reply, rx) = oneshot::channel();
        tx.send(PendingUpdate { allocs, reply })
            .map_err(|_| UpdateError::LeadershipChanged)?;
        self.metrics.calls.inc();
        rx.await.map_err(|_| UpdateError::LeadershipChanged)?
    }
}

/// Allocations one entry carries at most: a batch closes early once it
/// holds this many, so an entry stays small enough to replicate within a
/// raft heartbeat even on a busy machine.
pub const MAX_ENTRY_ALLOCS: usize = 2_000;

/// The batching loop, for one term of leadership. A batch goes to raft as
/// soon as it closes, and the next one gathers while it commits (as
/// Nomad's leader does): under load, the rate of updates is bounded by
/// what raft takes, not by one commit per window.
pub(super) async fn run(
    ctx: LeaderContext,
    window: Duration,
    metrics: Arc<AllocUpdateMetrics>,
    mut rx: mpsc::UnboundedReceiver<PendingUpdate>,
) {
    while let Some(first) = rx.recv().await {
        let mut allocs = first.allocs.len();
        let mut batch = vec![first];
        let window = tokio::time::sleep(window);
        tokio::pin!(window);
        while allocs < MAX_ENTRY_ALLOCS {
            tokio::select! {
                _ = &mut window => break,
                next = rx.recv() => match next {
                    Some(p) => {
                        allocs += p.allocs.len();
                        batch.push(p);
                    }
                    None => break,
                },
            }
        }
        let (entry, n) = batch_entry(&ctx, &mut batch);
        // Submitted here, so batches are logged in the order they closed:
        // a later update of an allocation never lands before an earlier one.
        let written = ctx.proposer.submit(entry);
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let result = written.await.map_err(|e| Arc::new(UpdateError::from(e)));
            if result.is_ok() {
                metrics.batch_allocs.observe(n as f64);
                metrics.entries.inc();
            }
            for p in batch {
                let _ = p.reply.send(result.clone());
            }
        });
    }
}

/// The updates of a batch's callers, moved out of them: the latest of each
/// allocation, in the order they came. Moved, not copied: every update
/// the cluster takes passes here, each with its task states.
fn latest_of_each(batch: &mut [PendingUpdate]) -> Vec<Allocation> {
    // Sized once: growing a vector of a thousand allocations by doubling
    // copies them over and over into pages the kernel has to zero first.
    let mut all = Vec::with_capacity(batch.iter().map(|p| p.allocs.len()).sum());
    for p in batch.iter_mut() {
        all.append(&mut p.allocs);
    }
    let keep: Vec<bool> = {
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(all.len());
        for (i, a) in all.iter().enumerate() {
            last.insert(&a.id, i);
        }
        all.iter()
            .enumerate()
            .map(|(i, a)| last[a.id.as_str()] == i)
            .collect()
    };
    let mut keep = keep.into_iter();
    all.retain(|_| keep.next().unwrap_or(true));
    all
}

/// The entry for one batch, and how many allocation updates it carries.
fn batch_entry(ctx: &LeaderContext, batch: &mut [PendingUpdate]) -> (LogEntry, usize) {
    let allocs = latest_of_each(batch);
    let state = ctx.store.snapshot();
    let mut jobs_to_evaluate = HashSet::new();
    for update in &allocs {
        // Only an allocation that finishes asks for an evaluation: the
        // others (most: pending, running, healthy) need no lookup.
        let finished = update.client_status == AllocClientStatus::Failed as i32
            || update.client_status == AllocClientStatus::Complete as i32;
        if !finished {
            continue;
        }
        let Some(old) = state.alloc(&update.id) else {
            continue;
        };
        let Some(job) = state.job(&old.job_id) else {
            continue;
        };
        if !job.stop && !alloc_terminal(&old) {
            jobs_to_evaluate.insert(job.id.clone());
        }
    }
    let evals = jobs_to_evaluate
        .iter()
        .filter_map(|j| state.job(j))
        .map(|job| new_eval(&job, "alloc_failed", None))
        .collect();
    let n = allocs.len();
    let entry = LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs,
            evals,
            updated_at_ms: now_ms(),
        })),
    };
    (entry, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(id: &str, description: &str) -> Allocation {
        Allocation {
            id: id.into(),
            client_description: description.into(),
            ..Default::default()
        }
    }

    fn pending(allocs: Vec<Allocation>) -> PendingUpdate {
        PendingUpdate {
            allocs,
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_keeps_the_latest_update_of_each_allocation_in_arrival_order() {
        let mut batch = vec![
            pending(vec![update("b", "b1"), update("a", "a1")]),
            pending(vec![update("c", "c1"), update("b", "b2")]),
            pending(vec![update("a", "a2")]),
        ];
        let kept: Vec<(String, String)> = latest_of_each(&mut batch)
            .into_iter()
            .map(|a| (a.id, a.client_description))
            .collect();
        let want =
            [("c", "c1"), ("b", "b2"), ("a", "a2")].map(|(id, d)| (id.to_string(), d.to_string()));
        assert_eq!(kept, want);
        assert!(
            batch.iter().all(|p| p.allocs.is_empty()),
            "moved, not copied"
        );
    }
}
