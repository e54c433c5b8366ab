//! What every leader task of one term may touch, and the writes they share.

use std::sync::Arc;

use stampede_proto::{
    log_entry::Msg, EvalStatus, EvalUpdateEntry, Evaluation, LogEntry, NodeStatus, NodeStatusEntry,
};

use super::broker::{EvalBroker, CANCEL_BATCH};
use crate::model::{now_ms, JobStages};
use crate::raft::{LocalProposer, ProposeError};
use crate::state::StateStore;

/// What every leader task of one term may touch.
#[derive(Clone)]
pub struct LeaderContext {
    /// The state to read; it is at least as new as everything committed
    /// before the term began.
    pub store: Arc<StateStore>,
    /// Writes only on this server: once it no longer leads, writes fail
    /// rather than reach the new leader, whose own mechanisms own them.
    pub proposer: LocalProposer,
    /// The stages of jobs' paths this server ends (the broker's two).
    pub stages: JobStages,
}

impl LeaderContext {
    /// Writes evaluation updates as one entry.
    pub async fn write_evals(&self, evals: Vec<Evaluation>) -> Result<u64, ProposeError> {
        let entry = LogEntry {
            msg: Some(Msg::EvalUpdate(EvalUpdateEntry { evals })),
        };
        self.proposer.write(entry).await
    }

    /// Writes a node's status change. What it affects is evaluated where
    /// the entry applies (`State::apply`): the jobs of the allocations a
    /// node that went down loses there, the system jobs a ready node may
    /// take.
    pub async fn set_node_status(
        &self,
        node_id: &str,
        status: NodeStatus,
    ) -> Result<u64, ProposeError> {
        let entry = LogEntry {
            msg: Some(Msg::NodeStatus(NodeStatusEntry {
                node_id: node_id.to_string(),
                status: status as i32,
                updated_at_ms: now_ms(),
                // Evaluated where it applies (above).
                evals: Vec::new(),
            })),
        };
        self.proposer.write(entry).await
    }

    /// Writes up to [`CANCEL_BATCH`] of the broker's cancelable evaluations
    /// as canceled in one entry; returns how many. On failure they go back to
    /// the broker for a later try.
    pub async fn cancel_batch(&self, broker: &EvalBroker) -> usize {
        let batch = broker.take_cancelable(CANCEL_BATCH);
        if batch.is_empty() {
            return 0;
        }
        let evals = batch
            .iter()
            .map(|e| Evaluation {
                status: EvalStatus::Canceled as i32,
                status_description: "canceled after a newer evaluation of the job was processed"
                    .into(),
                ..Evaluation::clone(e)
            })
            .collect();
        match self.write_evals(evals).await {
            Ok(_) => {
                broker.metrics.cancelled.inc_by(batch.len() as u64);
                broker.metrics.cancel_batches.inc();
                batch.len()
            }
            Err(e) => {
                tracing::warn!("canceling {} evaluations: {e}", batch.len());
                broker.restore_cancelable(batch);
                0
            }
        }
    }
}

/// The failed copy of an evaluation that ran out of deliveries.
pub fn delivery_limit_reached(eval: &Evaluation) -> Evaluation {
    Evaluation {
        status: EvalStatus::Failed as i32,
        status_description: "delivery limit reached".into(),
        ..eval.clone()
    }
}
