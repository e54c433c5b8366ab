//! What reacts to every batch the state machine applies: blocking queries
//! wake, and on the leader new evaluations reach the broker or the blocked
//! set and node status changes reach the heartbeat timers. This is the one
//! seam between raft and the control plane: the state machine sees only a
//! callback.

use std::sync::Arc;

use stampede_proto::{EvalStatus, NodeStatus};

use super::leader::blocked_evals::BlockedEvals;
use super::leader::broker::EvalBroker;
use super::leader::heartbeat::Heartbeats;
use super::leader::LeaderParts;
use crate::state::blocking::Watchers;
use crate::state::Changes;

pub struct ApplyHub {
    /// Parked blocking queries, woken by the keys a batch changed.
    pub watchers: Arc<Watchers>,
    broker: Arc<EvalBroker>,
    blocked: Arc<BlockedEvals>,
    heartbeats: Arc<Heartbeats>,
}

impl ApplyHub {
    pub fn new(leader: &LeaderParts) -> Self {
        Self {
            watchers: Arc::default(),
            broker: leader.broker.clone(),
            blocked: leader.blocked.clone(),
            heartbeats: leader.heartbeats.clone(),
        }
    }

    /// Called by the state machine after each applied batch. The leader-only
    /// parts ignore what they are told while switched off.
    pub fn applied(&self, changes: &Changes) {
        self.watchers.notify(&changes.keys);
        for eval in &changes.evals {
            match EvalStatus::try_from(eval.status) {
                Ok(EvalStatus::Pending) => self.broker.enqueue(eval.clone()),
                Ok(EvalStatus::Blocked) => self.blocked.block(eval.clone()),
                _ => self.blocked.untrack(&eval.id),
            }
        }
        for node in &changes.nodes {
            if node.status == NodeStatus::Ready as i32 {
                self.heartbeats.reset(&node.id);
            } else {
                self.heartbeats.remove(&node.id);
            }
        }
        if changes.capacity_changed {
            self.blocked.unblock_all(changes.index);
        }
    }
}
