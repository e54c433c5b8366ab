//! The raft storage path: appending entries to the RocksDB log (synced, as a
//! server does) and applying them to the in-memory state.

use cluster::log_store::{Identity, LogStore};
use cluster::state::{Changes, State};
use cluster::types::{Command, Entry, LogId};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use openraft::{CommittedLeaderId, EntryPayload};
use stampede_benches::node_register;

fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Command(node_register(index))),
    }
}

/// One synced `WriteBatch` per append, as openraft calls it.
fn log_append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity {
        server_id: 1,
        members: [1].into(),
    };
    let store = LogStore::open(dir.path(), &identity).unwrap();
    let mut next = 1u64;
    let mut group = c.benchmark_group("raft_log_append_synced");
    for batch in [1u64, 16, 256] {
        group.throughput(Throughput::Elements(batch));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter(|| {
                let entries: Vec<Entry> = (next..next + batch).map(entry).collect();
                next += batch;
                store.append_synced(entries).unwrap();
            })
        });
    }
    group.finish();
}

fn state_apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("state_apply");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("node_register/1000", |b| {
        let entries: Vec<_> = (0..1000).map(node_register).collect();
        b.iter_batched(
            State::default,
            |mut state| {
                for (i, e) in entries.iter().enumerate() {
                    state.apply(i as u64 + 1, e, &mut Changes::default());
                }
                state
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, log_append, state_apply);
criterion_main!(benches);
