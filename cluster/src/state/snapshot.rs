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
use rustc_hash::FxHashMap;
use stampede_proto::node_secret::SecretHash;
use stampede_proto::{
    Allocation, Deployment, Evaluation, Job, Node, NodeSecretHash, Resources, StateSnapshot,
    TableIndexes,
};

use super::allocs::summary_key;
use super::{AllocCounts, AllocKey, Id, NodeRow, State};
use crate::model::{add_resources, alloc_terminal};

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
/// its secret's hash), and so do each job's and each node's allocations,
/// gathered as they come and put in the job's and the node's tables in
/// one go each (sorted, a table at a time), instead of six lookups in the
/// state's tables for every allocation.
struct Loading {
    s: State,
    nodes: Vec<Node>,
    secrets: Vec<NodeSecretHash>,
    jobs_allocs: FxHashMap<Id, JobAllocs>,
    nodes_allocs: FxHashMap<Id, NodeAllocs>,
}

/// A job's allocations, as its tables keep them.
#[derive(Default)]
struct JobAllocs {
    keys: Vec<AllocKey>,
    /// The highest `modify_index`.
    index: u64,
    summary: AllocCounts,
}

/// A node's allocations, as its tables keep them.
#[derive(Default)]
struct NodeAllocs {
    allocs: Vec<(AllocKey, Arc<Allocation>)>,
    /// The highest `alloc_modify_index`.
    index: u64,
    /// What its live allocations hold, if it has any.
    used: Option<Resources>,
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
            jobs_allocs: FxHashMap::default(),
            nodes_allocs: FxHashMap::default(),
        }
    }

    fn job(&mut self, j: Job) {
        self.s.put_job(Arc::new(j));
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
        let id = AllocKey::new(&a.id);
        let job = self
            .jobs_allocs
            .entry(Id::from(a.job_id.as_str()))
            .or_default();
        job.keys.push(id.clone());
        job.index = job.index.max(a.modify_index);
        *job.summary.entry(summary_key(&a)).or_default() += 1;
        let node = self
            .nodes_allocs
            .entry(Id::from(a.node_id.as_str()))
            .or_default();
        node.index = node.index.max(a.alloc_modify_index);
        if !alloc_terminal(&a) {
            let used = node.used.get_or_insert_with(Resources::default);
            add_resources(used, a.resources.as_ref());
        }
        let a = Arc::new(a);
        node.allocs.push((id.clone(), a.clone()));
        self.s.allocs.insert(id, a);
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
        let s = &mut self.s;
        for (id, mut job) in self.jobs_allocs {
            job.keys.sort_unstable();
            s.allocs_by_job
                .insert(id.clone(), job.keys.into_iter().collect());
            s.job_alloc_index.insert(id.clone(), job.index);
            s.job_summaries.insert(id, Arc::new(job.summary));
        }
        for (id, mut node) in self.nodes_allocs {
            node.allocs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            s.allocs_by_node
                .insert(id.clone(), node.allocs.into_iter().collect());
            s.node_alloc_index.insert(id.clone(), node.index);
            if let Some(used) = node.used {
                s.node_used.insert(id, used);
            }
        }
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
