//! The raft log on RocksDB (issue 7: "RocksDB raft-log append (batch sizes,
//! synced) and read").
//!
//! Every write is durable on a quorum before it is acknowledged, so the synced
//! append is on the path of every raft commit, and openraft appends whatever
//! has queued up as one batch: the batch sizes show how much a busy leader
//! gains from batching. The leader reads recent entries back to replicate
//! them to followers. Real RocksDB in a temporary directory on the build
//! machine's disk, through the server's own `LogStore`.

use cluster::raft::log_store::{Identity, LogStore};
use cluster::raft::{Command, Entry, LogId};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader};
use stampede_benches::node_register;

/// Entries per append or read; openraft batches whatever has queued up.
const BATCHES: [u64; 3] = [1, 16, 256];
/// Entries in the log that reads pick ranges from.
const LOG_LEN: u64 = 10_000;

/// A typical small entry (a node registration) at `index`.
fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Command::new(node_register(index as usize))),
    }
}

fn open(dir: &tempfile::TempDir) -> LogStore {
    let identity = Identity {
        server_id: 1,
        members: [1].into(),
    };
    LogStore::open(dir.path(), &identity).expect("open a RocksDB log store in a temporary dir")
}

/// One synced `WriteBatch` per append, as openraft calls it.
fn append_synced(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("create a temporary dir");
    let store = open(&dir);
    let mut next = 1u64;
    let mut group = c.benchmark_group("raft_log_append_synced");
    group.sample_size(20);
    for batch in BATCHES {
        group.throughput(Throughput::Elements(batch));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter_batched(
                || {
                    let entries: Vec<Entry> = (next..next + batch).map(entry).collect();
                    next += batch;
                    entries
                },
                |entries| {
                    store
                        .append_synced(entries)
                        .expect("append to the raft log")
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// Range reads of recent entries, as the leader's replication does them.
fn read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("create a temporary dir");
    let mut store = open(&dir);
    for start in (1..=LOG_LEN).step_by(1000) {
        store
            .append_synced((start..start + 1000).map(entry))
            .expect("fill the raft log");
    }
    let mut group = c.benchmark_group("raft_log_read");
    for batch in BATCHES {
        group.throughput(Throughput::Elements(batch));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            // Walk the log so that consecutive reads do not hit the same keys.
            let mut start = 1;
            b.iter(|| {
                let range = start..start + batch;
                start = (start + batch) % (LOG_LEN - batch) + 1;
                let entries = futures::executor::block_on(store.try_get_log_entries(range))
                    .expect("read the raft log");
                assert_eq!(entries.len() as u64, batch);
                entries
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion();
    targets = append_synced, read
}
criterion_main!(benches);
