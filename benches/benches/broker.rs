//! The eval broker (issue 7: "eval broker enqueue, dequeue and ack").
//!
//! Every evaluation passes through the leader's broker once per delivery:
//! enqueued when its raft entry is applied, dequeued by a worker, acked when
//! the plan is in. All three run under one lock on the leader, so their cost
//! bounds how fast the whole cluster can schedule. Each bench handles 1,000
//! evaluations. `enqueue_one_job` queues them all for one job, the pile-up
//! that eval cancelation (seed 002) is about: all but the first wait behind
//! the job's outstanding evaluation.

use std::sync::Arc;
use std::time::Duration;

use cluster::control::leader::broker::{BrokerConfig, EvalBroker};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use prometheus::Registry;
use stampede_benches::{eval_for, service_job};
use stampede_proto::{Evaluation, JobType};

const EVALS: usize = 1_000;

/// A leader's broker, empty.
fn broker() -> EvalBroker {
    let broker = EvalBroker::new(BrokerConfig::default(), &Registry::new());
    broker.set_enabled(true);
    broker
}

/// `EVALS` evaluations, each for its own job, or all for one job.
fn evals(one_job: bool) -> Vec<Arc<Evaluation>> {
    (0..EVALS)
        .map(|i| {
            let job = if one_job { 0 } else { i };
            let job = service_job(&format!("job-{job:04}"), 1);
            Arc::new(eval_for(&job, &format!("eval-{i:04}")))
        })
        .collect()
}

/// A broker holding `evals`, ready for workers.
fn filled(evals: &[Arc<Evaluation>]) -> EvalBroker {
    let broker = broker();
    for e in evals {
        broker.enqueue(e.clone());
    }
    broker
}

/// Takes every ready evaluation, as workers do; returns (eval id, token) pairs.
fn dequeue_all(rt: &tokio::runtime::Runtime, broker: &EvalBroker) -> Vec<(String, String)> {
    rt.block_on(async {
        let mut taken = Vec::with_capacity(EVALS);
        while let Some((eval, token)) = broker
            .dequeue(&[JobType::Service], Duration::ZERO)
            .await
            .expect("the broker is enabled")
        {
            taken.push((eval.id.clone(), token));
        }
        taken
    })
}

fn eval_broker(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a tokio runtime");
    let distinct = evals(false);
    let one_job = evals(true);
    let mut group = c.benchmark_group("eval_broker");
    // Up to 2 ms per iteration: 20 samples fit the measurement time.
    group.sample_size(20);
    group.throughput(Throughput::Elements(EVALS as u64));
    for (name, evals) in [("enqueue", &distinct), ("enqueue_one_job", &one_job)] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || (broker(), evals.clone()),
                |(broker, evals)| {
                    for e in evals {
                        broker.enqueue(e);
                    }
                    broker
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.bench_function("dequeue", |b| {
        b.iter_batched(
            || filled(&distinct),
            |broker| {
                let taken = dequeue_all(&rt, &broker);
                assert_eq!(taken.len(), EVALS);
                (broker, taken)
            },
            BatchSize::SmallInput,
        )
    });
    // Each ack needs its evaluations dequeued first, untimed and ten times
    // slower than acking: a shorter measurement keeps the wall time down.
    group.measurement_time(Duration::from_secs(1));
    group.bench_function("ack", |b| {
        b.iter_batched(
            || {
                let broker = filled(&distinct);
                let taken = dequeue_all(&rt, &broker);
                (broker, taken)
            },
            |(broker, taken)| {
                for (id, token) in &taken {
                    broker
                        .ack(id, token)
                        .expect("ack an outstanding evaluation");
                }
                broker
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion();
    targets = eval_broker
}
criterion_main!(benches);
