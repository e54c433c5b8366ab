//! The state as a snapshot's `StateSnapshot`, and back.

use std::collections::HashMap;
use std::sync::Arc;

use stampede_proto::node_secret::SecretHash;
use stampede_proto::{Allocation, Deployment, Evaluation, Job, NodeSecretHash, StateSnapshot};

use super::{AllocKey, Id, NodeRow, State};
use crate::model::alloc_terminal;

impl State {
    pub fn to_snapshot(&self) -> StateSnapshot {
        StateSnapshot {
            nodes: self.nodes.values().map(|n| n.to_proto()).collect(),
            indexes: Some(self.indexes),
            jobs: self.jobs.values().map(|j| Job::clone(j)).collect(),
            evals: self.evals.values().map(|e| Evaluation::clone(e)).collect(),
            allocs: self.allocs_by_id().map(|a| Allocation::clone(a)).collect(),
            deployments: self
                .deployments
                .values()
                .map(|d| Deployment::clone(d))
                .collect(),
            node_secrets: self
                .nodes
                .values()
                .filter_map(|n| {
                    Some(NodeSecretHash {
                        node_id: n.id.to_string(),
                        sha256: n.secret?.to_vec(),
                    })
                })
                .collect(),
        }
    }

    /// Rebuilds the state, and its secondary indexes, from a snapshot taken at `index`.
    pub fn from_snapshot(snap: StateSnapshot, index: u64) -> Self {
        let mut s = State {
            indexes: snap.indexes.unwrap_or_default(),
            index,
            ..Default::default()
        };
        // A snapshot from before node identity has no secrets; a hash that
        // is not a SHA-256 is not kept.
        let mut secrets: HashMap<String, SecretHash> = snap
            .node_secrets
            .into_iter()
            .filter_map(|h| Some((h.node_id, SecretHash::try_from(h.sha256.as_slice()).ok()?)))
            .collect();
        for n in snap.nodes {
            let secret = secrets.remove(&n.id);
            s.nodes
                .insert(Id::from(n.id.as_str()), Arc::new(NodeRow::new(&n, secret)));
        }
        for j in snap.jobs {
            s.jobs.insert(Id::from(j.id.as_str()), Arc::new(j));
        }
        for e in snap.evals {
            let id = Id::from(e.id.as_str());
            s.evals_by_job
                .entry(Id::from(e.job_id.as_str()))
                .or_default()
                .insert(id.clone());
            s.evals.insert(id, Arc::new(e));
        }
        for a in snap.allocs {
            let (id, node, job) = (
                AllocKey::new(&a.id),
                Id::from(a.node_id.as_str()),
                Id::from(a.job_id.as_str()),
            );
            s.allocs_by_job
                .entry(job.clone())
                .or_default()
                .insert(id.clone());
            let n = s.node_alloc_index.entry(node.clone()).or_insert(0);
            *n = (*n).max(a.alloc_modify_index);
            let j = s.job_alloc_index.entry(job).or_insert(0);
            *j = (*j).max(a.modify_index);
            s.count(&a);
            if !alloc_terminal(&a) {
                s.hold(&a, true);
            }
            let a = Arc::new(a);
            s.allocs_by_node
                .entry(node)
                .or_default()
                .insert(id.clone(), a.clone());
            s.allocs.insert(id, a);
        }
        for d in snap.deployments {
            let id = Id::from(d.id.as_str());
            s.deployments_by_job
                .entry(Id::from(d.job_id.as_str()))
                .or_default()
                .insert(id.clone());
            s.deployments.insert(id, Arc::new(d));
        }
        s
    }
}
