//! The in-memory state store that raft entries are applied to.
//!
//! Tables are persistent maps (`imbl`): a copy of the whole state is an O(1)
//! clone that shares structure with the live one. Snapshot builders, workers
//! and readers take such a copy and never hold the apply path up.
//!
//! Every row keeps the raft index that created it and the one that last
//! changed it; every table, each node's allocations and each job's
//! allocations keep the latest index that touched them, which is what
//! blocking queries compare against.
//!
//! The type and its tables are here: keyed by [`Id`] (`SmolStr`) and, for
//! allocations, by the UUID's 128 bits ([`AllocKey`], `alloc_key`);
//! allocations indexed by node (the allocations themselves) and by job
//! (their ids), and each job's allocations counted by version and status as
//! they change (Nomad's job summaries, for `JobService.Summary`). What it
//! does is in files of their own:
//!
//! - `apply` applies entries (allocations in `allocs`); `changes` is what a
//!   batch changed (its watch keys); `reads`, `snapshot`, `spec` (comparing
//!   job versions) and `node_row` (a node as the state keeps it).
//! - `store`: the live store, behind its lock (one writer, O(1) copies for
//!   readers).
//! - `gc`: what garbage collection may remove (asked with age cutoffs by
//!   a worker, again without them when a `gc_*` entry is applied) and the
//!   time table that turns an age into a raft index.
//! - `apply_clock`: when this server applied each recent index; `trace`: a
//!   job's critical path from it (`JobService.Trace`).
//! - [`blocking`]: blocking queries; [`parking`]: the bounds on callers'
//!   parked queries; [`contact`]: whether the server is in touch with the
//!   cluster (a caller's query does not park on one out of touch).

mod alloc_key;
mod allocs;
mod apply;
mod apply_clock;
pub mod blocking;
mod changes;
pub mod contact;
pub(crate) mod gc;
mod node_row;
pub mod parking;
mod reads;
mod snapshot;
mod spec;
mod store;
#[cfg(test)]
mod tests;
mod trace;

pub use alloc_key::AllocKey;
pub use apply_clock::ApplyClock;
pub use changes::{
    Changes, Collected, Objects, RefusedReports, WatchKey, ANY_CLASS, REFUSAL_REASONS, TABLES,
};
pub use node_row::NodeRow;
pub use spec::{same_group, same_spec};
pub use store::StateStore;

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use stampede_proto::{Allocation, Deployment, Evaluation, Job, Resources, TableIndexes};

/// Allocations counted by (job version, desired status, client status).
pub type AllocCounts = BTreeMap<(u64, i32, i32), u64>;

/// A row's id as the tables key it. Writing a row copies the tree nodes on
/// its path that a snapshot still shares, each with up to 64 keys: with
/// `String` keys every copy allocated and copied each key, and dropping the
/// old copy freed each one (a fifth of a server's CPU under load); an
/// `Arc<str>` is copied and dropped with a count. An id of up to 23 bytes
/// (a node's or a job's, as nodesim and loadgen name them) is kept inside
/// the key itself, so a lookup compares the bytes in the tree node instead
/// of following a pointer to them for each key it passes.
pub type Id = smol_str::SmolStr;

/// Every allocation by id. A hash trie, not a tree like the other tables:
/// under load each client's report looks its allocation up among a hundred
/// thousand, and a tree's walk compared keys spread over several cache lines
/// at each of its levels. Nothing reads it in id order (the tables beside
/// it are trees, ordered, for that).
type AllocTable = imbl::GenericHashMap<
    AllocKey,
    Arc<Allocation>,
    rustc_hash::FxBuildHasher,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// Rows by node id, for the tables only ever read one node at a time: a
/// hash trie, as [`AllocTable`], since each report, placement and node
/// query looks up its node among ten thousand.
type NodeTable<V> =
    imbl::GenericHashMap<Id, V, rustc_hash::FxBuildHasher, imbl::shared_ptr::DefaultSharedPtr>;

/// One consistent version of every table.
#[derive(Clone, Debug, Default)]
pub struct State {
    nodes: OrdMap<Id, Arc<NodeRow>>,
    /// Each node, with its secret's hash (node identity).
    jobs: OrdMap<Id, Arc<Job>>,
    evals: OrdMap<Id, Arc<Evaluation>>,
    allocs: AllocTable,
    deployments: OrdMap<Id, Arc<Deployment>>,
    /// Each node's allocations themselves, by id, not only their ids: the
    /// node's query, the scheduler and the plan applier read a node's
    /// allocations all the time, and looking each id up in `allocs` (a
    /// hundred thousand string keys) cost more than the reading itself.
    allocs_by_node: NodeTable<OrdMap<AllocKey, Arc<Allocation>>>,
    /// What each node's live allocations hold, kept as they change: a
    /// node's usage is one lookup, not a walk over its allocations (200 a
    /// node in `c2m`, walked for every node a plan or a scheduler touches).
    node_used: NodeTable<Resources>,
    allocs_by_job: OrdMap<Id, OrdSet<AllocKey>>,
    evals_by_job: OrdMap<Id, OrdSet<Id>>,
    /// The system jobs' ids (stopped ones too): a node that becomes ready
    /// is evaluated for each live one where its entry applies, without a
    /// walk over every job.
    system_jobs: OrdSet<Id>,
    deployments_by_job: OrdMap<Id, OrdSet<Id>>,
    node_alloc_index: NodeTable<u64>,
    job_alloc_index: OrdMap<Id, u64>,
    /// Each job's allocations counted by version and status, kept as they
    /// change (Nomad's job summaries), so `JobService.Summary` reads a few
    /// counts instead of every allocation of the job.
    job_summaries: OrdMap<Id, Arc<AllocCounts>>,
    indexes: TableIndexes,
    /// The raft index of the last entry applied.
    index: u64,
}
