//! The client update batcher, legacy vs prioritized (issue 7: "RPCs and bytes
//! per 1,000 updates"; seed 001).
//!
//! Client allocation updates were ~70% of Nomad's raft traffic, and every
//! `Node.UpdateAlloc` RPC becomes raft bytes on the servers. This replays the
//! first 1,000 reports of a steady stream of service allocations (one starting
//! every 5 ms, round robin over 100 nodes, each running the mock runner's
//! default script: received, three task events, running, healthy) through
//! nodesim's `AllocSync`, ticking every 200 ms of simulated time until every
//! update is sent. The send counts RPCs and the encoded size of each
//! `NodeUpdateAllocRequest` instead of calling a server.
//!
//! Criterion times the batching itself (buffering, merging, ticks, sends).
//! The RPC and byte counts per 1,000 updates, the figures that matter, are
//! printed once at the start; throughput is those bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nodesim::alloc_sync::{AllocSync, SendBatch, UpdateMode, TICK};
use nodesim::metrics::Metrics;
use nodesim::runner::{AllocReport, MockConfig, Reporter, TASK_EVENTS};
use prost::Message;
use stampede_proto::{AllocClientStatus, NodeSecret, NodeUpdateAllocRequest};

const NODES: usize = 100;
const UPDATES: usize = 1_000;
/// A new allocation starts this often, on the next node in turn.
const START_EVERY_MS: u64 = 5;

/// One runner report at a moment of simulated time.
struct Scheduled {
    at_ms: u64,
    alloc: usize,
    report: AllocReport,
}

fn report(status: AllocClientStatus, description: &str, healthy: Option<bool>) -> AllocReport {
    let task_state = if status == AllocClientStatus::Pending {
        "pending"
    } else {
        "running"
    };
    AllocReport {
        client_status: status,
        description: description.into(),
        task_state: task_state.into(),
        healthy,
    }
}

/// The first `UPDATES` reports of the stream, in time order: what
/// `MockRunner` reports with `MockConfig::default()`.
fn script() -> Vec<Scheduled> {
    let mock = MockConfig::default();
    let delay = mock.event_delay.as_millis() as u64;
    let mut reports = Vec::new();
    // More allocations than needed: the stream is cut at UPDATES reports.
    for alloc in 0..UPDATES {
        let mut at_ms = alloc as u64 * START_EVERY_MS;
        let mut push = |at_ms, report| {
            reports.push(Scheduled {
                at_ms,
                alloc,
                report,
            })
        };
        push(at_ms, report(AllocClientStatus::Pending, "received", None));
        for i in 0..mock.task_events as usize {
            at_ms += delay;
            let event = TASK_EVENTS[i % TASK_EVENTS.len()];
            push(at_ms, report(AllocClientStatus::Pending, event, None));
        }
        at_ms += delay;
        push(
            at_ms,
            report(AllocClientStatus::Running, "task started", None),
        );
        at_ms += mock.min_healthy_time.as_millis() as u64;
        push(
            at_ms,
            report(AllocClientStatus::Running, "healthy", Some(true)),
        );
    }
    reports.sort_by_key(|r| r.at_ms);
    reports.truncate(UPDATES);
    reports
}

/// What the batcher sent.
#[derive(Default)]
struct Sent {
    rpcs: AtomicU64,
    bytes: AtomicU64,
}

/// A send that counts instead of calling a server.
fn counting(sent: Arc<Sent>) -> SendBatch {
    Arc::new(move |slot, allocs| {
        let sent = sent.clone();
        // The node's id and secret, as nodesim sends them (64 hex digits).
        let secrets = vec![NodeSecret {
            node_id: format!("sim-0123abcd-{slot}"),
            secret_id: "0".repeat(64),
        }];
        Box::pin(async move {
            let bytes = NodeUpdateAllocRequest { allocs, secrets }.encoded_len() as u64;
            sent.rpcs.fetch_add(1, Ordering::Relaxed);
            sent.bytes.fetch_add(bytes, Ordering::Relaxed);
            Ok(())
        })
    })
}

/// A fresh fleet's batcher and one reporter per allocation of the script.
struct Fleet {
    sync: Arc<AllocSync>,
    reporters: Vec<Reporter>,
    sent: Arc<Sent>,
}

fn fleet(mode: UpdateMode, script: &[Scheduled]) -> Fleet {
    let sent = Arc::new(Sent::default());
    let sync = AllocSync::new(mode, NODES, Metrics::new(), counting(sent.clone()));
    let allocs = script.iter().map(|r| r.alloc + 1).max().unwrap_or(0);
    let reporters = (0..allocs)
        .map(|a| {
            let sink = sync.sink((a % NODES) as u32);
            Reporter::new(&format!("alloc-{a:04}"), AllocClientStatus::Pending, sink)
        })
        .collect();
    Fleet {
        sync,
        reporters,
        sent,
    }
}

/// Feeds the script through the batcher tick by tick until nothing is left
/// to send; returns the RPCs and bytes sent.
async fn replay(fleet: Fleet, script: &[Scheduled]) -> (u64, u64) {
    let tick_ms = TICK.as_millis() as u64;
    let mut next = 0;
    let mut tick = 0;
    while next < script.len() || fleet.sync.pending() > 0 {
        tick += 1;
        assert!(tick < 10_000, "the batcher sends everything eventually");
        while next < script.len() && script[next].at_ms < tick * tick_ms {
            let r = &script[next];
            fleet.reporters[r.alloc].report(r.report.clone());
            next += 1;
        }
        for send in fleet.sync.clone().tick(tick, false) {
            send.await.expect("a send task finishes");
        }
    }
    let sent = &fleet.sent;
    (
        sent.rpcs.load(Ordering::Relaxed),
        sent.bytes.load(Ordering::Relaxed),
    )
}

fn client_updates(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a tokio runtime");
    let script = script();
    let mut group = c.benchmark_group("client_updates_per_1000");
    // Around a millisecond per iteration: 50 samples fit the measurement time.
    group.sample_size(50);
    for mode in [UpdateMode::Legacy, UpdateMode::Prioritized] {
        let (rpcs, bytes) = rt.block_on(replay(fleet(mode, &script), &script));
        eprintln!(
            "client_updates_per_1000/{}: {rpcs} Node.UpdateAlloc RPCs, {bytes} bytes \
             ({:.1} updates per RPC) per {UPDATES} updates",
            mode.name(),
            UPDATES as f64 / rpcs as f64,
        );
        group.throughput(Throughput::Bytes(bytes));
        group.bench_function(mode.name(), |b| {
            b.to_async(&rt).iter_batched(
                || fleet(mode, &script),
                |fleet| replay(fleet, &script),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion();
    targets = client_updates
}
criterion_main!(benches);
