//! Client allocation updates: runners write into their node's buffer, and
//! every [`TICK`] each node sends its buffer as one `Node.UpdateAlloc`
//! (seed 001). Writing never waits on the network, so a slow server cannot
//! push back on runners; the latest update of an allocation replaces an
//! unsent earlier one.
//!
//! Each node ticks at its own phase within the [`TICK`], as real clients'
//! timers do: one timer for the fleet fires every [`TICK`] / [`PHASES`] and
//! visits only the nodes of that phase. With one fleet-wide instant
//! (`--update-ticks fleet`, the ticks before issue 50), jobs arriving at a
//! steady rate are phase-locked to it: slowing the runner by 60 ms moved the
//! running reports too, by an amount set by when nodesim started (+90 ms in
//! one run, more than the runner; docs/bench-log/issue-50-update-ticks.md).
//!
//! In `prioritized` mode a node's buffer goes out on the next tick only if
//! it holds a `ClientStatus` change, and otherwise every 5th tick; in
//! `legacy` mode it goes out on every tick that finds it non-empty.
//!
//! A node whose send failed (an error, or no answer in time) waits
//! [`SYNC_RETRY`] plus up to as much again before it sends again, as
//! Nomad's client does: servers that fell behind are not hit by every node
//! retrying on the next tick, which would only deepen the queue they are
//! behind on. A failover is different: a send the server refused with
//! `Unavailable` (no leader yet, the leader replaced or out of touch) or
//! lost with its connection goes again within a few ticks on the next
//! server, as a Nomad client's RPC layer retries such an error on another
//! server within its hold time, up to [`FAILOVER_RETRIES`] times in a row.
//! Waiting out [`SYNC_RETRY`] after every failover held each running report
//! sent around one for 5-10 s, most of a failover's tail (BENCHMARKS.md).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;

use stampede_proto::{AllocClientStatus, AllocClientTimes, Allocation, JobStage};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::runner::{task_states, AllocReport, Delivered, ReportSink};

/// How often a node looks at its buffer (Nomad's client: 200 ms).
pub const TICK: Duration = Duration::from_millis(200);
/// Phases a [`TICK`] is cut into (10 ms each): the fleet's one timer fires
/// once per phase, and node slot `s` ticks at phase `s % PHASES`.
pub const PHASES: u64 = 20;
/// The fleet's timer: one phase of a [`TICK`].
const SUB_TICK: Duration = Duration::from_millis(TICK.as_millis() as u64 / PHASES);
/// In prioritized mode, a buffer without a status change waits for every
/// `TYPICAL_EVERY`th tick.
pub const TYPICAL_EVERY: u64 = 5;
/// After a failed send, a node waits this long, plus a random stagger of
/// up to as much again, before its next (Nomad's client: 5 s).
pub const SYNC_RETRY: Duration = Duration::from_secs(5);
/// [`SYNC_RETRY`] in ticks.
const RETRY_TICKS: u64 = (SYNC_RETRY.as_millis() / TICK.as_millis()) as u64;
/// After a send a failover explains, a node sends again on the next server:
/// the first time on its next tick, then after 1 to this many ticks
/// (0.2-0.6 s)...
const FAILOVER_RETRY_TICKS: u64 = 3;
/// ...at most this many times in a row (about 4 s in all, inside Nomad's
/// 5 s RPC hold time); then it waits [`SYNC_RETRY`] as after any failure.
pub const FAILOVER_RETRIES: u8 = 10;

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendFailed {
    pub message: String,
    /// The server refused it `Unavailable`, or the connection to it was
    /// lost: a failover, not a server behind on its work.
    pub failover: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UpdateMode {
    /// Send a status change on the next tick, anything else every 5th tick.
    Prioritized,
    /// Send whatever is buffered on every tick (before seed 001).
    Legacy,
}

impl UpdateMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Prioritized => "prioritized",
            Self::Legacy => "legacy",
        }
    }
}

/// When in a [`TICK`] each node sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UpdateTicks {
    /// Each node at its own phase, spread evenly over the tick.
    #[default]
    Staggered,
    /// Every node at the same instant (before issue 50): a steady job
    /// stream is phase-locked to it.
    Fleet,
}

impl UpdateTicks {
    pub fn name(self) -> &'static str {
        match self {
            Self::Staggered => "staggered",
            Self::Fleet => "fleet",
        }
    }
}

/// Sends one node's batch; an error puts the batch back for the next tick.
pub type SendBatch = Arc<
    dyn Fn(u32, Vec<Allocation>) -> Pin<Box<dyn Future<Output = Result<(), SendFailed>> + Send>>
        + Send
        + Sync,
>;

/// One allocation's latest report, as its runner made it: it becomes the
/// update on the wire only when it is sent. A runner reports several times
/// per allocation and most reports are replaced before a send, so building
/// each one's message (and dropping it when replaced) was wasted; a failed
/// send keeps these, not a copy of the messages.
struct Pending {
    alloc_id: Arc<str>,
    report: AllocReport,
    /// Set on the report that first says running, and carried by the
    /// update that sends it (or replaces it): the job's critical path.
    times: Option<AllocClientTimes>,
}

impl Pending {
    fn to_update(&self) -> Allocation {
        Allocation {
            id: self.alloc_id.to_string(),
            client_status: self.report.client_status as i32,
            client_description: self.report.description.clone(),
            task_states: task_states(&self.report),
            healthy: self.report.healthy,
            client_times: self.times,
            ..Default::default()
        }
    }
}

#[derive(Default)]
struct Buffer {
    updates: Vec<Pending>,
    /// Holds a `ClientStatus` change.
    urgent: bool,
    /// On the dirty list already.
    queued: bool,
    /// A batch of this node is on the wire; the next waits for it.
    in_flight: bool,
    /// After a failed send: the first of its ticks on which the node sends
    /// again.
    retry_at: u64,
    /// Sends in a row that a failover failed.
    failovers: u8,
}

pub struct AllocSync {
    mode: UpdateMode,
    ticks: UpdateTicks,
    buffers: Vec<Mutex<Buffer>>,
    /// The slots with something buffered, one list per phase: a phase's
    /// sub-tick visits only its own nodes.
    dirty: Vec<Mutex<Vec<u32>>>,
    /// The latest tick, for scheduling retries.
    tick: AtomicU64,
    metrics: Metrics,
    send: SendBatch,
    /// Whether running reports carry the node's times (`--job-times`).
    job_times: std::sync::atomic::AtomicBool,
}

impl AllocSync {
    /// `--job-times`: whether running reports carry the node's times.
    pub fn set_job_times(&self, on: bool) {
        self.job_times.store(on, Ordering::Relaxed);
    }

    /// Buffers for `nodes` node slots, numbered from 0, on staggered ticks.
    pub fn new(mode: UpdateMode, nodes: usize, metrics: Metrics, send: SendBatch) -> Arc<Self> {
        Self::with_ticks(mode, UpdateTicks::default(), nodes, metrics, send)
    }

    /// Buffers for `nodes` node slots, each node sending at the phase of
    /// the tick that `ticks` gives it.
    pub fn with_ticks(
        mode: UpdateMode,
        ticks: UpdateTicks,
        nodes: usize,
        metrics: Metrics,
        send: SendBatch,
    ) -> Arc<Self> {
        Arc::new(Self {
            mode,
            ticks,
            buffers: (0..nodes).map(|_| Mutex::default()).collect(),
            dirty: (0..PHASES).map(|_| Mutex::default()).collect(),
            tick: AtomicU64::new(0),
            metrics,
            send,
            job_times: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The sink node `slot`'s runners report into.
    pub fn sink(self: &Arc<Self>, slot: u32) -> Arc<dyn ReportSink> {
        Arc::new(NodeSink {
            slot,
            sync: self.clone(),
        })
    }

    /// The phase of a [`TICK`] at which node `slot` sends: computed, not
    /// stored, so it costs no memory per node.
    fn phase(&self, slot: u32) -> usize {
        match self.ticks {
            UpdateTicks::Staggered => (slot as u64 % PHASES) as usize,
            UpdateTicks::Fleet => 0,
        }
    }

    /// Puts `slot` on its phase's dirty list.
    fn queue(&self, slot: u32) {
        self.dirty[self.phase(slot)].lock().unwrap().push(slot);
    }

    fn push(&self, slot: u32, update: Pending, urgent: bool) {
        let mut b = self.buffers[slot as usize].lock().unwrap();
        merge(&mut b.updates, update);
        b.urgent |= urgent;
        if !b.queued {
            b.queued = true;
            self.queue(slot);
        }
    }

    /// Runs the fleet's timer, one phase at a time, until `stop` turns true.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(SUB_TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Tick 1, phase 0, fires at once, as the fleet-wide ticker's first did.
        let mut sub_tick = PHASES;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            self.clone().sub_tick(sub_tick);
            sub_tick += 1;
        }
    }

    /// Every phase of tick `tick` in turn (with `flush`, sends every buffer
    /// whatever is due); returns the sends it started.
    pub fn tick(self: Arc<Self>, tick: u64, flush: bool) -> Vec<tokio::task::JoinHandle<()>> {
        (0..PHASES as usize)
            .flat_map(|phase| self.clone().visit(tick, phase, flush))
            .collect()
    }

    /// Sub-tick `n` of the fleet's timer: phase `n % PHASES` of tick
    /// `n / PHASES`; returns the sends it started.
    pub fn sub_tick(self: Arc<Self>, n: u64) -> Vec<tokio::task::JoinHandle<()>> {
        self.visit(n / PHASES, (n % PHASES) as usize, false)
    }

    /// Sends the buffers of `phase`'s nodes that are due on tick `tick`.
    fn visit(
        self: Arc<Self>,
        tick: u64,
        phase: usize,
        flush: bool,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        self.tick.fetch_max(tick, Ordering::Relaxed);
        let dirty = std::mem::take(&mut *self.dirty[phase].lock().unwrap());
        let mut keep = Vec::new();
        let mut sends = Vec::new();
        for slot in dirty {
            let mut b = self.buffers[slot as usize].lock().unwrap();
            let due = flush
                || self.mode == UpdateMode::Legacy
                || b.urgent
                || (tick + slot as u64).is_multiple_of(TYPICAL_EVERY);
            let waits = !flush && tick < b.retry_at;
            if b.in_flight || !due || waits || b.updates.is_empty() {
                if b.updates.is_empty() {
                    b.queued = false;
                } else {
                    keep.push(slot);
                }
                continue;
            }
            let batch = std::mem::take(&mut b.updates);
            let urgent = std::mem::take(&mut b.urgent);
            b.queued = false;
            b.in_flight = true;
            drop(b);
            sends.push(tokio::spawn(self.clone().send_batch(slot, batch, urgent)));
        }
        self.dirty[phase].lock().unwrap().extend(keep);
        sends
    }

    async fn send_batch(self: Arc<Self>, slot: u32, batch: Vec<Pending>, urgent: bool) {
        let priority = if urgent { "urgent" } else { "typical" };
        self.metrics
            .update_rpcs
            .with_label_values(&[priority])
            .inc();
        self.metrics.updates_per_rpc.observe(batch.len() as f64);
        let updates = batch.iter().map(Pending::to_update).collect();
        let result = (self.send)(slot, updates).await;
        if result.is_ok() {
            for t in batch.iter().filter_map(|p| p.times) {
                self.metrics
                    .stage_since(JobStage::ReportRunning, t.started_us);
            }
        }
        let mut b = self.buffers[slot as usize].lock().unwrap();
        b.in_flight = false;
        if result.is_ok() {
            b.failovers = 0;
        }
        if let Err(e) = result {
            self.metrics.error("update_alloc");
            tracing::debug!(
                "node slot {slot}: update of {} allocations failed: {}",
                batch.len(),
                e.message
            );
            // What was reported since is newer: put the batch back under it.
            let newer = std::mem::replace(&mut b.updates, batch);
            for u in newer {
                merge(&mut b.updates, u);
            }
            b.urgent |= urgent;
            let now = self.tick.load(Ordering::Relaxed);
            let mut rng = rand::thread_rng();
            b.retry_at = if e.failover && b.failovers < FAILOVER_RETRIES {
                b.failovers += 1;
                // The first goes on the node's next tick: it goes to
                // another server, and the nodes' phases already spread the
                // fleet's over the tick.
                now + match b.failovers {
                    1 => 1,
                    _ => rng.gen_range(1..=FAILOVER_RETRY_TICKS),
                }
            } else {
                b.failovers = 0;
                now + RETRY_TICKS + rng.gen_range(0..=RETRY_TICKS)
            };
        }
        if !b.updates.is_empty() && !b.queued {
            b.queued = true;
            self.queue(slot);
        }
    }

    /// Sends everything still buffered, waiting for the sends.
    pub async fn flush(self: &Arc<Self>) {
        for send in self.clone().tick(0, true) {
            let _ = send.await;
        }
    }

    /// Updates buffered and not yet sent.
    pub fn pending(&self) -> usize {
        self.buffers
            .iter()
            .map(|b| b.lock().unwrap().updates.len())
            .sum()
    }
}

/// The latest report of an allocation wins; health, once known, is kept.
fn merge(updates: &mut Vec<Pending>, mut update: Pending) {
    // A runner's reports share its id, and `Arc<str>`'s equality looks at
    // the address first: most are found without comparing the text.
    match updates.iter_mut().find(|u| u.alloc_id == update.alloc_id) {
        Some(old) => {
            update.report.healthy = update.report.healthy.or(old.report.healthy);
            update.times = update.times.or(old.times);
            *old = update;
        }
        None => updates.push(update),
    }
}

/// The node's times as its running report carries them: after the
/// allocation's creation when the node knows it, else since 1970.
fn client_times(delivered: Delivered, started_us: u64) -> AllocClientTimes {
    if delivered.created_ms == 0 {
        return AllocClientTimes {
            delivered_us: delivered.at_us,
            started_us,
            ..Default::default()
        };
    }
    let created_us = delivered.created_ms as i64 * 1000;
    AllocClientTimes {
        delivered_after_create_us: delivered.at_us as i64 - created_us,
        started_after_create_us: started_us as i64 - created_us,
        ..Default::default()
    }
}

struct NodeSink {
    slot: u32,
    sync: Arc<AllocSync>,
}

impl ReportSink for NodeSink {
    fn report(
        &self,
        alloc_id: &Arc<str>,
        report: AllocReport,
        previous: AllocClientStatus,
        delivered: Delivered,
    ) {
        let changed = report.client_status != previous;
        self.sync.metrics.move_alloc(previous, report.client_status);
        let running = changed && report.client_status == AllocClientStatus::Running;
        let timed = running && self.sync.job_times.load(Ordering::Relaxed);
        let times = timed.then(|| {
            self.sync
                .metrics
                .stage_since(JobStage::RunnerStart, delivered.at_us);
            client_times(delivered, stampede_proto::unix_us())
        });
        let update = Pending {
            alloc_id: alloc_id.clone(),
            report,
            times,
        };
        self.sync.push(self.slot, update, changed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    fn recorder(calls: Arc<AtomicUsize>, sent: Arc<Mutex<Vec<Allocation>>>) -> SendBatch {
        Arc::new(move |_, batch| {
            let calls = calls.clone();
            let sent = sent.clone();
            Box::pin(async move {
                calls.fetch_add(1, Ordering::SeqCst);
                sent.lock().unwrap().extend(batch);
                Ok(())
            })
        })
    }

    fn report(status: AllocClientStatus, description: &str) -> AllocReport {
        AllocReport {
            client_status: status,
            description: description.into(),
            task_state: "pending".into(),
            healthy: None,
        }
    }

    /// One allocation's life on one node, a report per tick: three task
    /// events, then running. Returns the RPCs sent and the last update sent.
    async fn lifecycle(mode: UpdateMode) -> (usize, Allocation) {
        let calls = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let sync = AllocSync::new(
            mode,
            1,
            Metrics::new(),
            recorder(calls.clone(), sent.clone()),
        );
        let sink = sync.sink(0);
        let steps = [
            (AllocClientStatus::Pending, "received"),
            (AllocClientStatus::Pending, "task setup"),
            (AllocClientStatus::Pending, "driver started"),
            (AllocClientStatus::Running, "running"),
        ];
        let mut previous = AllocClientStatus::Pending;
        for (tick, (status, what)) in steps.into_iter().enumerate() {
            sink.report(
                &"a1".into(),
                report(status, what),
                previous,
                Delivered {
                    at_us: 1,
                    created_ms: 0,
                },
            );
            previous = status;
            for send in sync.clone().tick(tick as u64 + 1, false) {
                send.await.unwrap();
            }
        }
        sync.flush().await;
        let last = sent.lock().unwrap().last().cloned().unwrap();
        (calls.load(Ordering::SeqCst), last)
    }

    #[tokio::test]
    async fn prioritized_sends_fewer_rpcs_than_legacy_and_the_same_final_state() {
        let (legacy, legacy_last) = lifecycle(UpdateMode::Legacy).await;
        let (prioritized, prioritized_last) = lifecycle(UpdateMode::Prioritized).await;
        assert_eq!(legacy, 4, "legacy sends on every tick with an update");
        // Slot 0 is due on ticks 5, 10, ...: the three task events wait and
        // go out with the status change on tick 4.
        assert_eq!(prioritized, 1);
        // The running report carries the node's times; they differ by when
        // each ran, the rest is the same.
        let times = |a: &Allocation| a.client_times.expect("the running report's times");
        for last in [&legacy_last, &prioritized_last] {
            assert_eq!(times(last).delivered_us, 1);
            assert!(times(last).started_us > 1);
        }
        let without_times = |a: Allocation| Allocation {
            client_times: None,
            ..a
        };
        assert_eq!(
            without_times(legacy_last),
            without_times(prioritized_last.clone())
        );
        assert_eq!(
            prioritized_last.client_status,
            AllocClientStatus::Running as i32
        );
    }

    #[tokio::test]
    async fn a_failed_send_keeps_its_updates_under_newer_ones() {
        let calls = Arc::new(AtomicUsize::new(0));
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sent = Arc::new(Mutex::new(Vec::<Allocation>::new()));
        let send: SendBatch = {
            let (calls, fail, sent) = (calls.clone(), fail.clone(), sent.clone());
            Arc::new(move |_, batch| {
                let (calls, fail, sent) = (calls.clone(), fail.clone(), sent.clone());
                Box::pin(async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    if fail.load(Ordering::SeqCst) {
                        return Err(SendFailed {
                            message: "server behind".into(),
                            failover: false,
                        });
                    }
                    sent.lock().unwrap().extend(batch);
                    Ok(())
                })
            })
        };
        let sync = AllocSync::new(UpdateMode::Legacy, 1, Metrics::new(), send);
        let sink = sync.sink(0);
        sink.report(
            &"a1".into(),
            report(AllocClientStatus::Running, "up"),
            AllocClientStatus::Pending,
            Delivered::default(),
        );
        sink.report(
            &"a2".into(),
            report(AllocClientStatus::Running, "up"),
            AllocClientStatus::Pending,
            Delivered::default(),
        );
        for send in sync.clone().tick(1, false) {
            send.await.unwrap();
        }
        assert_eq!(sync.pending(), 2, "a failed batch is kept");
        sink.report(
            &"a1".into(),
            report(AllocClientStatus::Complete, "done"),
            AllocClientStatus::Running,
            Delivered::default(),
        );
        fail.store(false, Ordering::SeqCst);
        // The node waits out the retry interval (with its stagger)...
        for tick in 2..1 + RETRY_TICKS {
            assert!(
                sync.clone().tick(tick, false).is_empty(),
                "tick {tick}: sent before the retry interval passed"
            );
        }
        // ...and has sent once it and the longest stagger have passed.
        for tick in 1 + RETRY_TICKS..=1 + 2 * RETRY_TICKS {
            for send in sync.clone().tick(tick, false) {
                send.await.unwrap();
            }
        }
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 2);
        let a1 = sent.iter().find(|u| u.id == "a1").unwrap();
        assert_eq!(a1.client_status, AllocClientStatus::Complete as i32);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(sync.pending(), 0);
    }

    /// A node whose sends all fail, driven by the fleet's sub-ticks; returns
    /// the ticks on which it sent.
    async fn sends_while_failing(failover: bool, ticks: u64) -> Vec<u64> {
        // A slot whose phase is not the tick's first.
        const SLOT: u32 = 13;
        let at = Arc::new(Mutex::new(Vec::new()));
        let now = Arc::new(AtomicU64::new(0));
        let send: SendBatch = {
            let (at, now) = (at.clone(), now.clone());
            Arc::new(move |_, _| {
                at.lock().unwrap().push(now.load(Ordering::SeqCst));
                Box::pin(async move {
                    Err(SendFailed {
                        message: "refused".into(),
                        failover,
                    })
                })
            })
        };
        let sync = AllocSync::new(UpdateMode::Legacy, SLOT as usize + 1, Metrics::new(), send);
        sync.sink(SLOT).report(
            &"a1".into(),
            report(AllocClientStatus::Running, "up"),
            AllocClientStatus::Pending,
            Delivered::default(),
        );
        for n in PHASES..(ticks + 1) * PHASES {
            now.store(n, Ordering::SeqCst);
            for send in sync.clone().sub_tick(n) {
                send.await.unwrap();
            }
        }
        let sent = at.lock().unwrap().clone();
        assert!(
            sent.iter().all(|n| n % PHASES == SLOT as u64 % PHASES),
            "the node sends at its own phase: {sent:?}"
        );
        sent.iter().map(|n| n / PHASES).collect()
    }

    #[tokio::test]
    async fn a_failover_is_retried_within_ticks_a_limited_number_of_times_then_after_the_sync_retry(
    ) {
        let ticks = 1 + FAILOVER_RETRIES as u64 * FAILOVER_RETRY_TICKS + RETRY_TICKS;
        let sent = sends_while_failing(true, ticks).await;
        let gaps: Vec<u64> = sent.windows(2).map(|w| w[1] - w[0]).collect();
        let (quick, rest) = gaps.split_at(FAILOVER_RETRIES as usize);
        assert_eq!(quick[0], 1, "the first on the next tick: {gaps:?}");
        assert!(
            quick.iter().all(|g| (1..=FAILOVER_RETRY_TICKS).contains(g)),
            "failover retries within {FAILOVER_RETRY_TICKS} ticks: {gaps:?}"
        );
        // Then the node backs off as after any failure.
        assert!(
            rest.first().is_none_or(|g| *g >= RETRY_TICKS),
            "after {FAILOVER_RETRIES} failovers in a row, the sync retry: {gaps:?}"
        );
        // A server behind is never retried within the sync retry.
        let slow = sends_while_failing(false, ticks).await;
        assert!(
            slow.windows(2).all(|w| w[1] - w[0] >= RETRY_TICKS),
            "{slow:?}"
        );
        assert!(slow.len() < sent.len());
    }

    /// A fleet of `nodes` whose sends record (slot, sub-tick); every node
    /// reports a status change just before sub-tick `first`, then the
    /// fleet's timer runs `sub_ticks` sub-ticks from `first`, each node
    /// reporting again before each with `again`.
    async fn sends_at(
        mode: UpdateMode,
        ticks: UpdateTicks,
        nodes: u32,
        first: u64,
        sub_ticks: u64,
        again: bool,
    ) -> Vec<(u32, u64)> {
        let at = Arc::new(Mutex::new(Vec::new()));
        let now = Arc::new(AtomicU64::new(0));
        let send: SendBatch = {
            let (at, now) = (at.clone(), now.clone());
            Arc::new(move |slot, _| {
                at.lock().unwrap().push((slot, now.load(Ordering::SeqCst)));
                Box::pin(async { Ok(()) })
            })
        };
        let sync = AllocSync::with_ticks(mode, ticks, nodes as usize, Metrics::new(), send);
        let sinks: Vec<_> = (0..nodes).map(|slot| sync.sink(slot)).collect();
        for n in first..first + sub_ticks {
            for sink in sinks.iter().filter(|_| n == first || again) {
                // The first report changes the status; later ones do not.
                let previous = if n == first {
                    AllocClientStatus::Pending
                } else {
                    AllocClientStatus::Running
                };
                let what = format!("event {n}");
                sink.report(
                    &"a1".into(),
                    report(AllocClientStatus::Running, &what),
                    previous,
                    Delivered::default(),
                );
            }
            now.store(n, Ordering::SeqCst);
            for send in sync.clone().sub_tick(n) {
                send.await.unwrap();
            }
        }
        let sent = at.lock().unwrap().clone();
        sent
    }

    #[tokio::test]
    async fn staggered_nodes_send_over_every_phase_of_the_tick_and_fleet_nodes_at_one_instant() {
        let nodes = 3 * PHASES as u32;
        for mode in [UpdateMode::Prioritized, UpdateMode::Legacy] {
            let sent = sends_at(mode, UpdateTicks::Staggered, nodes, PHASES, PHASES, false).await;
            assert_eq!(sent.len(), nodes as usize, "{mode:?}: every node sent once");
            for (slot, n) in &sent {
                assert_eq!(
                    n % PHASES,
                    *slot as u64 % PHASES,
                    "{mode:?}: slot {slot}'s phase"
                );
            }
            let phases: std::collections::BTreeSet<u64> = sent.iter().map(|(_, n)| *n).collect();
            assert_eq!(phases.len() as u64, PHASES, "{mode:?}: every phase sends");

            let fleet = sends_at(mode, UpdateTicks::Fleet, nodes, PHASES, PHASES, false).await;
            assert_eq!(fleet.len(), nodes as usize);
            assert!(
                fleet.iter().all(|(_, n)| *n == PHASES),
                "{mode:?}: fleet ticks send at the tick's first instant: {fleet:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_node_sends_at_most_once_per_tick_in_legacy_mode() {
        let ticks = 6;
        for update_ticks in [UpdateTicks::Staggered, UpdateTicks::Fleet] {
            // A report before every sub-tick: the node always has something.
            let sent = sends_at(
                UpdateMode::Legacy,
                update_ticks,
                8,
                PHASES,
                ticks * PHASES,
                true,
            )
            .await;
            for slot in 0..8 {
                let at: Vec<u64> = sent
                    .iter()
                    .filter(|(s, _)| *s == slot)
                    .map(|(_, n)| *n)
                    .collect();
                assert_eq!(
                    at.len() as u64,
                    ticks,
                    "{update_ticks:?}: slot {slot} sends on each tick: {at:?}"
                );
                assert!(
                    at.windows(2).all(|w| w[1] - w[0] == PHASES),
                    "{update_ticks:?}: slot {slot} sends one tick apart: {at:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_status_change_waits_at_most_one_tick() {
        let nodes = 2 * PHASES as u32;
        for update_ticks in [UpdateTicks::Staggered, UpdateTicks::Fleet] {
            // The change comes at every moment of a tick in turn.
            for first in PHASES..2 * PHASES {
                let sent = sends_at(
                    UpdateMode::Prioritized,
                    update_ticks,
                    nodes,
                    first,
                    PHASES,
                    false,
                )
                .await;
                assert_eq!(
                    sent.len(),
                    nodes as usize,
                    "{update_ticks:?}, change before sub-tick {first}: every node sent within one tick"
                );
            }
        }
    }
}
