//! Garbage collection's timer, as Nomad's leader runs it: every interval,
//! one core evaluation per kind of collection goes into the broker, where a
//! worker takes it like any other (see [`crate::scheduler::core`]). A kind
//! whose previous run is still out is skipped for that tick (the broker
//! keeps one core evaluation per job).

use std::sync::Arc;
use std::time::Duration;

use super::broker::{BrokerError, EvalBroker};
use crate::scheduler::core::CoreJob;
use crate::state::StateStore;

/// Nomad's `EvalGCInterval` (and its job, deployment and node GC intervals).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// Runs for one term, until its task is aborted.
pub(super) async fn run(store: Arc<StateStore>, broker: Arc<EvalBroker>, interval: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let index = store.applied_index();
        for job in CoreJob::PERIODIC {
            broker.enqueue(Arc::new(job.eval(index)));
        }
    }
}

/// Queues a forced collection of everything that is done, whatever its
/// age (`POST /v1/system/gc`); returns the core evaluation's id.
pub fn force(store: &StateStore, broker: &EvalBroker) -> Result<String, BrokerError> {
    if !broker.enabled() {
        return Err(BrokerError::Disabled);
    }
    let eval = CoreJob::ForceGc.eval(store.applied_index());
    let id = eval.id.clone();
    broker.enqueue(Arc::new(eval));
    Ok(id)
}
