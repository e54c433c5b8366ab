//! Scheduler placement (issue 7: "a service job of 100 and 1,000 allocations
//! over 1,000 and 10,000 nodes").
//!
//! A worker turns an evaluation into a plan with `scheduler::schedule` on a
//! copy of its state; this is the CPU each worker spends per evaluation, so it
//! bounds placements per second per worker. The fleet is empty and every
//! allocation fits, which is the common case of a capacity run; the cost is
//! the feasibility scan over all nodes plus two candidates per placement.

use cluster::scheduler;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::SeedableRng;
use stampede_benches::{register, service_job, state_with_nodes};

fn place(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduler_place");
    group.sample_size(20);
    for nodes in [1_000, 10_000] {
        let fleet = state_with_nodes(nodes);
        for allocs in [100u32, 1_000] {
            let mut state = fleet.clone();
            let eval = register(&mut state, &service_job("web", allocs));
            let mut rng = StdRng::seed_from_u64(1);
            group.throughput(Throughput::Elements(allocs.into()));
            group.bench_function(format!("allocs{allocs}_nodes{nodes}"), |b| {
                b.iter(|| {
                    let outcome = scheduler::schedule(&state, &eval, &mut rng);
                    assert!(outcome.failed.is_empty(), "every allocation fits");
                    outcome
                })
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion();
    targets = place
}
criterion_main!(benches);
