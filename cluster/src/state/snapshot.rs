//! The state as a snapshot's `StateSnapshot`, and back.
//!
//! A snapshot of a large state is millions of allocations and hundreds of
//! MB, so the server encodes and decodes it a row at a time
//! ([`State::encode_snapshot`], [`State::decode_snapshot`]): each row is
//! written from the state's own copy, with no `StateSnapshot` of copies of
//! every row between the two, and read into the state as it is decoded,
//! with no `Vec` of every allocation. The bytes are the ones
//! `to_snapshot().encode_to_vec()` writes; `to_snapshot` and
//! `from_snapshot` stay for tests and tools.

use std::collections::HashMap;
use std::sync::Arc;

use prost::encoding::{decode_key, decode_varint, message, skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message};
use stampede_proto::node_secret::SecretHash;
use stampede_proto::{
    Allocation, Deployment, Evaluation, Job, Node, NodeSecretHash, StateSnapshot, TableIndexes,
};

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
        let mut load = Loading::new(index);
        load.s.indexes = snap.indexes.unwrap_or_default();
        load.nodes = snap.nodes;
        load.secrets = snap.node_secrets;
        snap.jobs.into_iter().for_each(|j| load.job(j));
        snap.evals.into_iter().for_each(|e| load.eval(e));
        snap.allocs.into_iter().for_each(|a| load.alloc(a));
        snap.deployments
            .into_iter()
            .for_each(|d| load.deployment(d));
        load.finish()
    }

    /// Appends this state's `StateSnapshot` encoding to `buf`, row by row
    /// from the state's own copies: the bytes of
    /// `self.to_snapshot().encode_to_vec()`, without copying every row
    /// into a `StateSnapshot` first (and freeing the copies after), or
    /// measuring the whole snapshot before writing it.
    pub fn encode_snapshot(&self, buf: &mut Vec<u8>) {
        for n in self.nodes.values() {
            message::encode(1, &n.to_proto(), buf);
        }
        message::encode(2, &self.indexes, buf);
        for j in self.jobs.values() {
            message::encode(3, &**j, buf);
        }
        for e in self.evals.values() {
            message::encode(4, &**e, buf);
        }
        for a in self.allocs_by_id() {
            message::encode(5, &**a, buf);
        }
        for d in self.deployments.values() {
            message::encode(6, &**d, buf);
        }
        for n in self.nodes.values() {
            if let Some(secret) = n.secret {
                let hash = NodeSecretHash {
                    node_id: n.id.to_string(),
                    sha256: secret.to_vec(),
                };
                message::encode(7, &hash, buf);
            }
        }
    }

    /// The state a `StateSnapshot` encoding taken at `index` holds, each
    /// row decoded straight into the state ([`State::from_snapshot`]
    /// without the whole `StateSnapshot` between): an error, and no state,
    /// when the bytes are not a `StateSnapshot`.
    pub fn decode_snapshot(mut bytes: &[u8], index: u64) -> Result<Self, DecodeError> {
        let mut load = Loading::new(index);
        while !bytes.is_empty() {
            let (tag, wire) = decode_key(&mut bytes)?;
            if !(1..=7).contains(&tag) {
                // A field of a later version, skipped as prost skips it.
                skip_field(wire, tag, &mut bytes, DecodeContext::default())?;
                continue;
            }
            if wire != WireType::LengthDelimited {
                return Err(DecodeError::new(format!(
                    "StateSnapshot field {tag}: wire type {wire:?}, not length-delimited"
                )));
            }
            let len = usize::try_from(decode_varint(&mut bytes)?)
                .map_err(|_| DecodeError::new("length overflows usize"))?;
            if len > bytes.len() {
                return Err(DecodeError::new("buffer underflow"));
            }
            let (field, rest) = bytes.split_at(len);
            bytes = rest;
            match tag {
                1 => load.nodes.push(Node::decode(field)?),
                2 => load.s.indexes.merge(field)?,
                3 => load.job(Job::decode(field)?),
                4 => load.eval(Evaluation::decode(field)?),
                5 => load.alloc(Allocation::decode(field)?),
                6 => load.deployment(Deployment::decode(field)?),
                _ => load.secrets.push(NodeSecretHash::decode(field)?),
            }
        }
        Ok(load.finish())
    }
}

/// A state being rebuilt from a snapshot's rows, in any order: the nodes
/// wait for the end, where their secrets are (a node's row is made with
/// its secret's hash).
struct Loading {
    s: State,
    nodes: Vec<Node>,
    secrets: Vec<NodeSecretHash>,
}

impl Loading {
    fn new(index: u64) -> Self {
        Self {
            s: State {
                indexes: TableIndexes::default(),
                index,
                ..Default::default()
            },
            nodes: Vec::new(),
            secrets: Vec::new(),
        }
    }

    fn job(&mut self, j: Job) {
        self.s.jobs.insert(Id::from(j.id.as_str()), Arc::new(j));
    }

    fn eval(&mut self, e: Evaluation) {
        let s = &mut self.s;
        let id = Id::from(e.id.as_str());
        s.evals_by_job
            .entry(Id::from(e.job_id.as_str()))
            .or_default()
            .insert(id.clone());
        s.evals.insert(id, Arc::new(e));
    }

    fn alloc(&mut self, a: Allocation) {
        let s = &mut self.s;
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

    fn deployment(&mut self, d: Deployment) {
        let s = &mut self.s;
        let id = Id::from(d.id.as_str());
        s.deployments_by_job
            .entry(Id::from(d.job_id.as_str()))
            .or_default()
            .insert(id.clone());
        s.deployments.insert(id, Arc::new(d));
    }

    fn finish(mut self) -> State {
        // A snapshot from before node identity has no secrets; a hash that
        // is not a SHA-256 is not kept.
        let mut secrets: HashMap<String, SecretHash> = self
            .secrets
            .into_iter()
            .filter_map(|h| Some((h.node_id, SecretHash::try_from(h.sha256.as_slice()).ok()?)))
            .collect();
        for n in self.nodes {
            let secret = secrets.remove(&n.id);
            self.s
                .nodes
                .insert(Id::from(n.id.as_str()), Arc::new(NodeRow::new(&n, secret)));
        }
        self.s
    }
}
