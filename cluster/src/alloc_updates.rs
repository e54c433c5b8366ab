//! Client allocation updates, batched on the leader: every `Node.UpdateAlloc`
//! call that arrives within one window (50 ms by default) goes into one raft
//! entry, and each caller is answered with that entry's index. An allocation
//! that fails or completes gets an evaluation for its job in the same entry
//! (the scheduler decides whether it is replaced).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounter, Registry};
use stampede_proto::{
    log_entry::Msg, AllocClientStatus, AllocClientUpdateEntry, Allocation, LogEntry,
};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use crate::control_plane::{new_eval, now_ms, ControlPlane};
use crate::state::alloc_terminal;

pub struct PendingUpdate {
    allocs: Vec<Allocation>,
    reply: oneshot::Sender<Result<u64, Status>>,
}

pub struct AllocUpdateMetrics {
    /// Allocation updates per raft entry.
    pub batch_allocs: Histogram,
    pub calls: IntCounter,
    pub entries: IntCounter,
}

pub struct AllocUpdates {
    tx: Mutex<Option<mpsc::UnboundedSender<PendingUpdate>>>,
    window: Duration,
    pub metrics: AllocUpdateMetrics,
}

impl AllocUpdates {
    pub fn new(window: Duration, registry: &Registry) -> Self {
        let metrics = AllocUpdateMetrics {
            batch_allocs: Histogram::with_opts(
                HistogramOpts::new(
                    "stampede_alloc_update_batch_allocs",
                    "Client allocation updates per raft entry.",
                )
                .buckets(prometheus::exponential_buckets(1.0, 2.0, 16).unwrap()),
            )
            .unwrap(),
            calls: IntCounter::new(
                "stampede_alloc_update_calls_total",
                "Node.UpdateAlloc calls taken by the leader.",
            )
            .unwrap(),
            entries: IntCounter::new(
                "stampede_alloc_update_entries_total",
                "Raft entries written for batches of client allocation updates.",
            )
            .unwrap(),
        };
        registry
            .register(Box::new(metrics.batch_allocs.clone()))
            .unwrap();
        registry.register(Box::new(metrics.calls.clone())).unwrap();
        registry
            .register(Box::new(metrics.entries.clone()))
            .unwrap();
        Self {
            tx: Mutex::default(),
            window,
            metrics,
        }
    }

    pub(crate) fn open(&self) -> mpsc::UnboundedReceiver<PendingUpdate> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.tx.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        rx
    }

    pub(crate) fn close(&self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Adds `allocs` to the current batch; returns the index it was applied at.
    pub async fn submit(&self, allocs: Vec<Allocation>) -> Result<u64, Status> {
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| Status::unavailable("this server is not the leader; retry"))?;
        let (reply, rx) = oneshot::channel();
        tx.send(PendingUpdate { allocs, reply })
            .map_err(|_| Status::unavailable("leadership changed; retry"))?;
        self.metrics.calls.inc();
        rx.await
            .map_err(|_| Status::unavailable("leadership changed; retry"))?
    }
}

/// Allocations one entry carries at most: a batch closes early once it
/// holds this many, so an entry stays small enough to replicate within a
/// raft heartbeat even on a busy machine.
pub const MAX_ENTRY_ALLOCS: usize = 2_000;

/// The batching loop, for one term of leadership.
pub(crate) async fn run(cp: Arc<ControlPlane>, mut rx: mpsc::UnboundedReceiver<PendingUpdate>) {
    while let Some(first) = rx.recv().await {
        let mut allocs = first.allocs.len();
        let mut batch = vec![first];
        let window = tokio::time::sleep(cp.alloc_updates.window);
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
        let result = write_batch(&cp, &batch).await;
        for p in batch {
            let _ = p.reply.send(result.clone());
        }
    }
}

async fn write_batch(cp: &ControlPlane, batch: &[PendingUpdate]) -> Result<u64, Status> {
    // The latest update of each allocation wins.
    let mut latest: BTreeMap<&str, &Allocation> = BTreeMap::new();
    for p in batch {
        for a in &p.allocs {
            latest.insert(&a.id, a);
        }
    }
    let state = cp.store.snapshot();
    let mut jobs_to_evaluate = HashSet::new();
    for update in latest.values() {
        let Some(old) = state.alloc(&update.id) else {
            continue;
        };
        let Some(job) = state.job(&old.job_id) else {
            continue;
        };
        if job.stop || alloc_terminal(&old) {
            continue;
        }
        let finished = update.client_status == AllocClientStatus::Failed as i32
            || update.client_status == AllocClientStatus::Complete as i32;
        if finished {
            jobs_to_evaluate.insert(job.id.clone());
        }
    }
    let evals = jobs_to_evaluate
        .iter()
        .filter_map(|j| state.job(j))
        .map(|job| new_eval(&job, "alloc_failed", None))
        .collect();
    let allocs: Vec<Allocation> = latest.into_values().cloned().collect();
    let n = allocs.len();
    let entry = LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs,
            evals,
            updated_at_ms: now_ms(),
        })),
    };
    let index = cp.proposer.write_local(entry).await?;
    cp.alloc_updates.metrics.batch_allocs.observe(n as f64);
    cp.alloc_updates.metrics.entries.inc();
    Ok(index)
}
