//! Encode and decode of a large plan (issue 7: "encode and decode of a large
//! plan").
//!
//! A plan placing 1,000 allocations (the scheduler's own, over 1,000 nodes)
//! travels twice in the encodings the cluster really uses:
//! - `plan_*`: the protobuf `Plan` a worker submits to the leader
//!   (`Plan.Submit`, prost);
//! - `log_entry_*`: the raft entry the leader commits for it, an openraft
//!   `Entry` whose command is the protobuf `PlanApplyEntry`, serialized with
//!   bincode: the bytes written to RocksDB and sent in AppendEntries. The
//!   command carries its protobuf bytes (`cluster::raft::Command`), so
//!   `log_entry_encode` (an append, an AppendEntries) and `log_entry_read`
//!   (a read back for replication) copy them; `log_entry_decode` is a read
//!   back for the apply, which decodes the command as well.
//!
//! Throughput is the encoded size, so the figures read as MiB/s.

use cluster::raft::{Command, Entry, LogId};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use openraft::{CommittedLeaderId, EntryPayload};
use prost::Message;
use stampede_benches::state_with_nodes;
use stampede_benches::{placed, plan_apply, register, scheduled_plan, service_job};
use stampede_proto::Plan;

const NODES: usize = 1_000;
const ALLOCS: u32 = 1_000;

fn plan_codec(c: &mut Criterion) {
    let mut state = state_with_nodes(NODES);
    let eval = register(&mut state, &service_job("web", ALLOCS));
    let plan = scheduled_plan(&state, &eval);
    let entry = Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), state.index() + 1),
        payload: EntryPayload::Normal(Command::new(plan_apply(placed(&plan)))),
    };
    let plan_bytes = plan.encode_to_vec();
    let entry_bytes = bincode::serialize(&entry).expect("bincode-encode a raft entry");

    let mut group = c.benchmark_group("plan_codec_1000_allocs");
    // Around a millisecond per iteration: 50 samples fit the measurement time.
    group.sample_size(50);
    group.throughput(Throughput::Bytes(plan_bytes.len() as u64));
    group.bench_function("plan_encode", |b| b.iter(|| plan.encode_to_vec()));
    group.bench_function("plan_decode", |b| {
        b.iter(|| Plan::decode(plan_bytes.as_slice()).expect("decode the plan"))
    });
    group.throughput(Throughput::Bytes(entry_bytes.len() as u64));
    group.bench_function("log_entry_encode", |b| {
        b.iter(|| bincode::serialize(&entry).expect("encode the raft entry"))
    });
    group.bench_function("log_entry_read", |b| {
        b.iter(|| bincode::deserialize::<Entry>(&entry_bytes).expect("read the raft entry"))
    });
    group.bench_function("log_entry_decode", |b| {
        b.iter(|| {
            let entry = bincode::deserialize::<Entry>(&entry_bytes).expect("read the raft entry");
            match entry.payload {
                EntryPayload::Normal(cmd) => {
                    cmd.entry().expect("decode the command");
                }
                _ => unreachable!("the entry is a command"),
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion();
    targets = plan_codec
}
criterion_main!(benches);
