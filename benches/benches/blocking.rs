//! Blocking-query wakeup with 10,000 parked queries (issue 7: "one node
//! changed vs all").
//!
//! Every simulated node keeps one `Node.GetClientAllocs` blocking query parked
//! on its server, so a big fleet means tens of thousands of parked queries.
//! When an entry is applied, the server wakes the queries watching what it
//! changed. These benches park one query per node on 10,000 nodes, then
//! change the allocations of one node, or of every node, and time from the
//! server publishing the change (`Watchers::notify`, right after the state
//! write) until every woken query has answered with the new index. The state
//! write itself is not timed (see `state_apply`). One node changed should cost
//! the same however many queries are parked; all changed shows the cost of a
//! wakeup storm. Throughput counts woken queries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::state::blocking::{Blocking, BlockingMetrics};
use cluster::state::contact::Contact;
use cluster::state::{StateStore, WatchKey};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use prometheus::Registry;
use stampede_benches::{alloc, apply, node_id, plan_apply, service_job, state_with_nodes};
use stampede_proto::{Allocation, QueryOptions};
use tokio::sync::mpsc;

const NODES: usize = 10_000;

/// Node `i`'s one allocation; rewriting it moves the node's allocation index.
fn node_alloc(i: usize) -> Allocation {
    alloc(&service_job("web", NODES as u32), i as u32, &node_id(i))
}

/// A server's blocking-query machinery over 10,000 nodes with one
/// allocation each, and one client-allocs query parked per node.
struct Fleet {
    blocking: Arc<Blocking>,
    /// Each query sends here when it answers.
    answered: mpsc::UnboundedSender<()>,
    answers: mpsc::UnboundedReceiver<()>,
}

impl Fleet {
    /// Must run within the runtime: the queries are its tasks.
    fn park_all() -> Self {
        let mut state = state_with_nodes(NODES);
        apply(
            &mut state,
            &plan_apply((0..NODES).map(node_alloc).collect()),
        );
        let blocking = Arc::new(Blocking {
            store: Arc::new(StateStore::default()),
            watchers: Arc::default(),
            metrics: Arc::new(BlockingMetrics::new(&Registry::new())),
            parking: Default::default(),
            contact: Contact::always(),
        });
        blocking.store.replace(state);
        let (answered, answers) = mpsc::unbounded_channel();
        let fleet = Fleet {
            blocking,
            answered,
            answers,
        };
        for i in 0..NODES {
            fleet.park(i);
        }
        fleet
    }

    /// Node `i`'s client-allocs query, waiting for a change after the
    /// node's current allocation index, as nodesim's query loop does.
    fn park(&self, i: usize) {
        let (blocking, answered) = (self.blocking.clone(), self.answered.clone());
        tokio::spawn(async move {
            let node = node_id(i);
            let opts = QueryOptions {
                min_index: blocking.store.snapshot().node_alloc_index(&node),
                max_wait_ms: 600_000,
                source: stampede_proto::QuerySource::ClientAllocs.label().into(),
            };
            let key = WatchKey::NodeAllocs(node.clone());
            blocking
                .query(Some(&opts), key, |s| s.node_alloc_index(&node), |_| ())
                .await;
            let _ = answered.send(());
        });
    }

    /// One wakeup: writes new allocations for `nodes` once every query is
    /// parked (untimed), then publishes the change and waits until each of
    /// their queries has answered (timed); parks their next queries after.
    async fn wake(&mut self, nodes: &[usize]) -> Duration {
        while self.blocking.watchers.watched() < NODES {
            // Let the queries run; a timer would round every wait up to a millisecond.
            tokio::task::yield_now().await;
        }
        let entry = plan_apply(nodes.iter().map(|&i| node_alloc(i)).collect());
        let changes = self.blocking.store.write(|s| apply(s, &entry));
        let start = Instant::now();
        self.blocking.watchers.notify(&changes.keys, changes.index);
        for _ in nodes {
            self.answers.recv().await.expect("the parked queries run");
        }
        let took = start.elapsed();
        for &i in nodes {
            self.park(i);
        }
        took
    }
}

fn blocking_wakeup(c: &mut Criterion) {
    // One thread: the figures are the CPU the server spends on a wakeup, not
    // how quickly a busy machine's OS wakes idle runtime threads (which, for
    // one node, takes longer than the work itself and varies as much).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a tokio runtime");
    let fleet = tokio::sync::Mutex::new(rt.block_on(async { Fleet::park_all() }));
    let all: Vec<usize> = (0..NODES).collect();

    let mut group = c.benchmark_group("blocking_wakeup_10k_parked");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);

    group.throughput(Throughput::Elements(1));
    group.bench_function("one_node_changed", |b| {
        // A different node each time, round robin.
        let mut next = 0;
        b.to_async(&rt).iter_custom(|iters| {
            let (fleet, first) = (&fleet, next);
            next += iters as usize;
            async move {
                let mut fleet = fleet.lock().await;
                let mut total = Duration::ZERO;
                for n in first..first + iters as usize {
                    total += fleet.wake(&[n % NODES]).await;
                }
                total
            }
        })
    });

    group.throughput(Throughput::Elements(NODES as u64));
    group.measurement_time(Duration::from_secs(1));
    group.bench_function("all_nodes_changed", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (fleet, all) = (&fleet, &all);
            async move {
                let mut fleet = fleet.lock().await;
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += fleet.wake(all).await;
                }
                total
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion();
    targets = blocking_wakeup
}
criterion_main!(benches);
