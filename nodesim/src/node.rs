//! One simulated client node: it registers, heartbeats within its TTL, keeps
//! exactly one blocking query for its allocations in flight, and starts,
//! updates and stops runners as the answers change. Its runners report into
//! the fleet's [`AllocSync`](crate::alloc_sync::AllocSync) buffers.
//!
//! A node is one tokio task, as large as its largest wait. Every RPC future
//! and every rare step (registering again, taking a changed answer) is
//! boxed, so an idle node, waiting on its query and its next heartbeat,
//! holds only what those waits need.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use stampede_proto::client::retryable;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, AllocsGetRequest, NodeClientAllocsReply,
    NodeClientAllocsRequest, NodeRegisterRequest, NodeStatus, NodeUpdateStatusRequest,
    QueryOptions,
};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tonic::{Code, Status};

use crate::alloc_sync::AllocSync;
use crate::calls::Calls;
use crate::identity::Identity;
use crate::metrics::{Metrics, NodeState, SOURCE};
use crate::profile::NodeProfile;
use crate::runner::{AllocReport, AllocRunner, AllocRunnerFactory, Reporter};

/// What every node of the fleet shares: made by the fleet
/// (`Fleet::start`) and handed to each node it starts.
pub(crate) struct Shared {
    /// The nodes' calls, on one stream per channel of the cluster client.
    pub calls: Arc<Calls>,
    pub profile: NodeProfile,
    pub metrics: Metrics,
    pub sync: Arc<AllocSync>,
    pub factory: AllocRunnerFactory,
    pub query_wait: Duration,
    pub register_permits: Semaphore,
    /// Each node's secret_id, derived when a call is built.
    pub identity: Arc<Identity>,
    /// Each node's current channel into the cluster client (one slot per
    /// node of this shard).
    pub channels: Arc<Vec<AtomicU32>>,
}

impl Shared {
    fn channel_of(&self, slot: u32) -> usize {
        current_channel(&self.channels, &self.calls, slot)
    }

    fn rotate_channel(&self, slot: u32) {
        rotate(&self.channels, &self.calls, slot);
    }

    /// The stagger of a node that moved after its first failure: see
    /// [`MOVED_STAGGER`].
    fn moved_stagger(&self) -> Duration {
        let per_server = self.channels.len() / self.calls.server_count().max(1);
        MOVED_STAGGER.max(MOVED_STAGGER_PER_NODE * per_server as u32)
    }
}

/// The channel node `slot` calls on: its own, unless that one is passed
/// over (another node's call found its connection lost), when the node
/// moves first. A node whose query was not in flight when the connection
/// died learned nothing of it, and its next call waited out a connect
/// timeout on the dead server (a pause's delivery, 1 s late).
/// With every channel passed over, it stays: moving would only churn.
pub(crate) fn current_channel(channels: &[AtomicU32], calls: &Calls, slot: u32) -> usize {
    let own = &channels[slot as usize];
    let c = own.load(Ordering::Relaxed) as usize;
    if !calls.passed_over(c) {
        return c;
    }
    let next = calls.next_healthy(c);
    if calls.passed_over(next) {
        return c;
    }
    match own.compare_exchange(c as u32, next as u32, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => next,
        // Moved meanwhile by its own failed call.
        Err(moved) => moved as usize,
    }
}

/// Moves node `slot` to the next channel (another server) whose connection
/// has not been lost lately.
pub(crate) fn rotate(channels: &[AtomicU32], calls: &Calls, slot: u32) {
    let c = &channels[slot as usize];
    let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |i| {
        Some(calls.next_healthy(i as usize) as u32)
    });
}

/// The longest an RPC other than the blocking query may take before the
/// node tries the next server: the cluster client's attempt timeout, short
/// enough that a node whose server was paused or cut off heartbeats through
/// another one well within its TTL.
pub const RPC_TIMEOUT: Duration = stampede_proto::client::DEFAULT_ATTEMPT_TIMEOUT;
/// How long `GetAllocs` may wait for its server to catch up with the query.
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// Exponential backoff with jitter, from 250 ms to 5 s.
struct Backoff(u32);

/// The most a node waits before asking again on the server it moved to
/// after its first failure: a stagger, so that the nodes of a server that
/// died do not all ask the others in the same instant...
const MOVED_STAGGER: Duration = Duration::from_millis(50);
/// ...or longer with many nodes on a server, this much per node: the
/// 83,000 nodes of one of three servers in `fleet-250k` spread over 250 ms,
/// as wide as the backoff they had before.
const MOVED_STAGGER_PER_NODE: Duration = Duration::from_micros(3);

impl Backoff {
    async fn wait(&mut self) {
        let base = Duration::from_millis(250) * 2u32.pow(self.0.min(4));
        self.0 += 1;
        let jitter = rand::thread_rng().gen_range(0.75..1.25);
        tokio::time::sleep(base.mul_f64(jitter).min(Duration::from_secs(5))).await;
    }

    /// After a failure: a node that `moved` to another server after its
    /// first failure in a row asks there within `stagger`, as a Nomad
    /// client retries an RPC on the next server within its stagger; the
    /// server it left (killed, paused, cut off) says nothing of the next
    /// one. Otherwise the backoff.
    async fn wait_unless_moved(&mut self, moved: bool, stagger: Duration) {
        if moved && self.0 == 0 {
            self.0 += 1;
            let stagger = rand::thread_rng().gen_range(Duration::ZERO..=stagger);
            tokio::time::sleep(stagger).await;
            return;
        }
        self.wait().await;
    }
}

/// What the node knows of one allocation.
struct Tracked {
    /// The server-side version last seen: a higher one is fetched.
    alloc_modify_index: u64,
    /// Absent for an allocation that was already over when first seen.
    runner: Option<(Box<dyn AllocRunner>, Reporter)>,
    stopped: bool,
}

/// Its id is made when a call needs it, not kept: a fleet holds many nodes.
pub(crate) struct SimNode {
    shared: Arc<Shared>,
    slot: u32,
    index: u64,
}

/// Whether the server wants this allocation to stop running.
fn server_stops(a: &Allocation) -> bool {
    a.desired_status != AllocDesiredStatus::Run as i32
        || a.client_status == AllocClientStatus::Lost as i32
}

impl SimNode {
    pub(crate) fn new(shared: Arc<Shared>, slot: u32, index: u64) -> Self {
        Self {
            shared,
            slot,
            index,
        }
    }

    fn id(&self) -> String {
        self.shared.profile.id(self.index)
    }

    /// The channel this node's calls go on.
    fn channel(&self) -> usize {
        self.shared.channel_of(self.slot)
    }

    /// Moves this node to the next server (another connection).
    fn rotate(&self) {
        self.shared.rotate_channel(self.slot);
    }

    /// Registers, then heartbeats and watches allocations until the task is
    /// dropped. Returns early only if the cluster refuses the node.
    pub(crate) async fn run(self) {
        let m = &self.shared.metrics;
        m.set_node_state(None, NodeState::Registering);
        let mut state = NodeState::Registering;
        if !self.register().await {
            return;
        }
        tokio::join!(self.heartbeat_loop(&mut state), self.watch_loop());
    }

    async fn register(&self) -> bool {
        let mut backoff = Backoff(0);
        loop {
            let permit = self.shared.register_permits.acquire().await;
            let req = NodeRegisterRequest {
                node: Some(self.shared.profile.node(self.index)),
                secret_id: self.shared.identity.secret(&self.id()),
            };
            let calls = &self.shared.calls;
            let result = timed(Box::pin(calls.register(self.channel(), req))).await;
            drop(permit);
            match result {
                Ok(_) => {
                    self.shared.metrics.registrations.inc();
                    return true;
                }
                Err(s) if retryable(&s) => {
                    self.shared.metrics.error("register");
                    self.rotate();
                    backoff.wait().await;
                }
                Err(s) => {
                    self.shared.metrics.error("register");
                    tracing::error!(
                        "node {}: the cluster refused it: {}",
                        self.id(),
                        s.message()
                    );
                    return false;
                }
            }
        }
    }

    async fn heartbeat_loop(&self, state: &mut NodeState) {
        let m = &self.shared.metrics;
        let mut backoff = Backoff(0);
        loop {
            let req = NodeUpdateStatusRequest {
                node_id: self.id(),
                status: NodeStatus::Ready as i32,
                secret_id: self.shared.identity.secret(&self.id()),
            };
            let started = Instant::now();
            let calls = &self.shared.calls;
            let result = timed(Box::pin(calls.update_status(self.channel(), req))).await;
            // Only the TTL or the code is kept: what a `match` on the
            // result holds lives across the waits in its arms.
            match result.map(|r| r.heartbeat_ttl_ms).map_err(|s| s.code()) {
                Ok(ttl_ms) => {
                    m.heartbeat_seconds.observe(started.elapsed().as_secs_f64());
                    m.set_node_state(Some(*state), NodeState::Ready);
                    *state = NodeState::Ready;
                    backoff = Backoff(0);
                    // Somewhere in the first half to three quarters of the
                    // TTL, so the fleet's heartbeats spread out.
                    let ttl = Duration::from_millis(ttl_ms).max(Duration::from_secs(1));
                    m.heartbeat_ttl_seconds.set(ttl.as_secs_f64());
                    let at = rand::thread_rng().gen_range(0.5..0.75);
                    tokio::time::sleep(ttl.mul_f64(at)).await;
                }
                Err(Code::NotFound) => {
                    // The cluster lost the node (its state was reset): join again.
                    m.error("heartbeat");
                    m.set_node_state(Some(*state), NodeState::Registering);
                    *state = NodeState::Registering;
                    // Boxed, as is all the rare work: a node's task is as
                    // large as its largest wait, and most nodes only idle.
                    if !Box::pin(self.register()).await {
                        return;
                    }
                }
                Err(_) => {
                    m.error("heartbeat");
                    m.set_node_state(Some(*state), NodeState::Disconnected);
                    *state = NodeState::Disconnected;
                    self.rotate();
                    backoff.wait().await;
                }
            }
        }
    }

    async fn watch_loop(&self) {
        let m = &self.shared.metrics;
        let mut known: HashMap<String, Tracked> = HashMap::new();
        let mut min_index = 0;
        // Ask for every allocation id of the node, not only the changed
        // ones: after a removal was missed, or the cluster's state reset.
        let mut in_full = false;
        let mut backoff = Backoff(0);
        let wait = self.shared.query_wait;
        loop {
            let req = NodeClientAllocsRequest {
                node_id: self.id(),
                query: Some(QueryOptions {
                    min_index,
                    max_wait_ms: wait.as_millis() as u64,
                    source: SOURCE.label().into(),
                }),
                with_changed: true,
                secret_id: self.shared.identity.secret(&self.id()),
                changed_only: !in_full,
            };
            let started = Instant::now();
            let channel = self.channel();
            let calls = &self.shared.calls;
            let call = Box::pin(calls.get_client_allocs(channel, req));
            let reply = match tokio::time::timeout(wait + RPC_TIMEOUT, call).await {
                Ok(Ok(r)) => Some(r),
                failed => {
                    observe(m, "error", started);
                    m.error("allocs_query");
                    match &failed {
                        Ok(Err(s)) => tracing::debug!(
                            node = self.index,
                            channel,
                            after_ms = started.elapsed().as_millis() as u64,
                            "allocs query failed: {:?} {}",
                            s.code(),
                            s.message()
                        ),
                        _ => tracing::debug!(node = self.index, channel, "allocs query timed out"),
                    }
                    if !matches!(&failed, Ok(Err(s)) if s.code() == Code::NotFound) {
                        self.rotate();
                    }
                    None
                }
            };
            // The backoff is out of the `match`, whose failure would live
            // across it.
            let Some(reply) = reply else {
                let moved = self.channel() != channel;
                backoff
                    .wait_unless_moved(moved, self.shared.moved_stagger())
                    .await;
                continue;
            };
            backoff = Backoff(0);
            if reply.index == min_index {
                observe(m, "unchanged", started);
                continue;
            }
            observe(m, "changed", started);
            let (index, total, full) = (reply.index, reply.total, in_full);
            if !full && index < min_index {
                // The cluster's state was reset: what changed since our
                // index says nothing of it.
                in_full = true;
                continue;
            }
            if Box::pin(self.take(&mut known, reply, full, channel)).await {
                // Only the changes came: knowing more than the node has
                // means one was removed, which a change list cannot say.
                in_full = !full && known.len() as u64 != total;
                if !in_full {
                    min_index = index;
                }
            } else {
                // Ask again from the same index, elsewhere.
                self.rotate();
                backoff.wait().await;
            }
        }
    }

    /// Brings the runners in line with a changed answer (`full`: it lists
    /// every allocation of the node, else only the changed ones); false if
    /// the allocations it lists could not be fetched.
    async fn take(
        &self,
        known: &mut HashMap<String, Tracked>,
        reply: NodeClientAllocsReply,
        full: bool,
        channel: usize,
    ) -> bool {
        // An index below ours means the cluster's state was reset: the
        // diff below is the same either way, so take the answer as it is.
        let gone: Vec<String> = match full {
            true => known
                .keys()
                .filter(|id| !reply.allocs.contains_key(*id))
                .cloned()
                .collect(),
            false => Vec::new(),
        };
        for id in gone {
            if let Some(t) = known.remove(&id) {
                self.forget(t);
            }
        }
        // What changed since `min_index` came with the answer; anything
        // else newer than what we know (after a reset) is fetched.
        for a in reply.changed {
            if known
                .get(&a.id)
                .is_none_or(|t| t.alloc_modify_index < a.alloc_modify_index)
            {
                self.apply(known, a);
            }
        }
        let pull: Vec<String> = reply
            .allocs
            .iter()
            .filter(|(id, ami)| known.get(*id).is_none_or(|t| t.alloc_modify_index < **ami))
            .map(|(id, _)| id.clone())
            .collect();
        if pull.is_empty() {
            return true;
        }
        let req = AllocsGetRequest {
            alloc_ids: pull,
            query: Some(QueryOptions {
                min_index: reply.index,
                max_wait_ms: CATCH_UP_WAIT.as_millis() as u64,
                source: SOURCE.label().into(),
            }),
        };
        match timed(Box::pin(self.shared.calls.get_allocs(channel, req))).await {
            Ok(r) => {
                for a in r.allocs {
                    self.apply(known, a);
                }
                true
            }
            Err(_) => {
                self.shared.metrics.error("get_allocs");
                false
            }
        }
    }

    /// Starts, updates or stops the runner of one allocation the server changed.
    fn apply(&self, known: &mut HashMap<String, Tracked>, a: Allocation) {
        let stop = server_stops(&a);
        if let Some(t) = known.get_mut(&a.id) {
            t.alloc_modify_index = a.alloc_modify_index;
            if let Some((runner, _)) = t.runner.as_mut() {
                if stop && !t.stopped {
                    t.stopped = true;
                    runner.destroy();
                } else if !stop {
                    runner.update(&a);
                }
            }
            return;
        }
        let status = AllocClientStatus::try_from(a.client_status).unwrap_or_default();
        let reporter = Reporter::new(&a.id, status, self.shared.sync.sink(self.slot))
            .created_at(a.create_time_ms);
        let runner = if AllocClientStatus::is_terminal(status as i32) {
            None
        } else if stop {
            // Never ran here (nodesim restarted): say it is stopped.
            self.shared.metrics.track_alloc(status);
            reporter.report(AllocReport {
                client_status: AllocClientStatus::Complete,
                description: "stopped by the server".into(),
                task_state: "dead".into(),
                healthy: None,
            });
            None
        } else {
            self.shared.metrics.track_alloc(status);
            let mut runner = (self.shared.factory)(&a, reporter.clone());
            runner.run();
            self.shared.metrics.runners_started.inc();
            Some((runner, reporter))
        };
        known.insert(
            a.id.clone(),
            Tracked {
                alloc_modify_index: a.alloc_modify_index,
                runner,
                stopped: stop,
            },
        );
    }

    /// The server no longer lists the allocation: stop it and stop counting it.
    fn forget(&self, t: Tracked) {
        if let Some((mut runner, reporter)) = t.runner {
            if !t.stopped {
                runner.destroy();
            }
            self.shared.metrics.untrack_alloc(reporter.status());
        }
    }
}

fn observe(m: &Metrics, outcome: &str, started: Instant) {
    m.query_seconds
        .with_label_values(&[outcome])
        .observe(started.elapsed().as_secs_f64());
}

/// An RPC with [`RPC_TIMEOUT`]; running out of time is `DeadlineExceeded`.
async fn timed<T>(call: impl std::future::Future<Output = Result<T, Status>>) -> Result<T, Status> {
    tokio::time::timeout(RPC_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(
                "no answer within the RPC timeout",
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::client::ClusterClient;
    use stampede_proto::security::Security;
    use std::future::Future;

    /// Virtual time a wait took (the clock is paused: exact, not a timing).
    async fn took(wait: impl Future<Output = ()>) -> Duration {
        let start = tokio::time::Instant::now();
        wait.await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_moved_after_its_first_failure_asks_again_within_the_stagger() {
        let mut b = Backoff(0);
        assert!(took(b.wait_unless_moved(true, MOVED_STAGGER)).await <= MOVED_STAGGER);
        // A second failure in a row backs off, moved or not.
        let second = took(b.wait_unless_moved(true, MOVED_STAGGER)).await;
        assert!(second >= Duration::from_millis(375), "{second:?}");
        // A first failure that left the node where it was backs off too.
        let mut b = Backoff(0);
        let stayed = took(b.wait_unless_moved(false, MOVED_STAGGER)).await;
        assert!(stayed >= Duration::from_millis(187), "{stayed:?}");
    }

    #[tokio::test]
    async fn a_node_on_a_server_another_node_lost_moves_before_its_next_call() {
        let addrs = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"];
        let calls = Calls::new(ClusterClient::new(&addrs, &Security::insecure()).unwrap());
        let channels: Vec<AtomicU32> = [1, 2].into_iter().map(AtomicU32::new).collect();
        assert_eq!(current_channel(&channels, &calls, 0), 1);
        // Another node's call on channel 1 lost its connection.
        calls.note_lost(1);
        assert_eq!(current_channel(&channels, &calls, 0), 2);
        assert_eq!(channels[0].load(Ordering::Relaxed), 2, "the node moved");
        assert_eq!(current_channel(&channels, &calls, 1), 2, "others stay");
        // Every server passed over: no one moves.
        calls.note_lost(0);
        calls.note_lost(2);
        assert_eq!(current_channel(&channels, &calls, 0), 2);
        assert_eq!(current_channel(&channels, &calls, 0), 2, "no churn");
    }
}
