//! The live state, behind a lock, with when each index was applied.

use std::sync::RwLock;

use tokio::sync::watch;

use super::{gc, ApplyClock, State};

/// The live state, shared by the state machine (the one writer) and readers.
#[derive(Debug)]
pub struct StateStore {
    state: RwLock<State>,
    applied: watch::Sender<u64>,
    /// When each index was applied here, for garbage collection's thresholds.
    times: std::sync::Mutex<gc::TimeTable>,
    /// When each recent index was applied here, to the microsecond
    /// (`None` with `--job-times off`).
    clock: Option<std::sync::Mutex<ApplyClock>>,
}

impl Default for StateStore {
    fn default() -> Self {
        Self {
            state: RwLock::default(),
            applied: watch::channel(0).0,
            times: Default::default(),
            clock: Some(Default::default()),
        }
    }
}

impl StateStore {
    /// A consistent copy of the current state; cheap, see the module docs.
    pub fn snapshot(&self) -> State {
        stampede_proto::read(&self.state).clone()
    }

    /// Runs `f` on the current state under the read lock, without a copy.
    /// For short reads (a lookup, a node's allocations): a copy of the state
    /// that is alive when an entry applies makes the apply copy every tree
    /// node it touches instead of changing it, and nodes' queries and
    /// reports read all the time.
    pub fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&stampede_proto::read(&self.state))
    }

    /// Runs `f` with the state locked for writing, then publishes the new index.
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let (out, index) = {
            let mut guard = stampede_proto::write(&self.state);
            let out = f(&mut guard);
            (out, guard.index)
        };
        self.applied.send_if_modified(|i| {
            let moved = *i != index;
            *i = index;
            moved
        });
        let now_us = stampede_proto::unix_us();
        if let Some(clock) = &self.clock {
            stampede_proto::lock(clock).applied(index, now_us);
        }
        stampede_proto::lock(&self.times).witness(index, now_us / 1000);
        out
    }

    /// Entries up to `index` were in this server's log when it started:
    /// their replay keeps no apply time ([`ApplyClock`]).
    pub fn replayed_until(&self, index: u64) {
        if let Some(clock) = &self.clock {
            stampede_proto::lock(clock).replayed_until(index);
        }
    }

    /// When this server applied `index` (unix µs), if it still knows.
    pub fn applied_at_us(&self, index: u64) -> Option<u64> {
        stampede_proto::lock(self.clock.as_ref()?).at(index)
    }

    /// A store that keeps no apply times (`--job-times off`).
    pub fn without_apply_times() -> Self {
        Self {
            clock: None,
            ..Self::default()
        }
    }

    /// The newest index this server had applied `age` ago (0 if it was not
    /// running then): everything last changed at or before it is that old.
    pub fn index_as_of(&self, age: std::time::Duration) -> u64 {
        let at = crate::model::now_ms().saturating_sub(age.as_millis() as u64);
        stampede_proto::lock(&self.times).index_at(at)
    }

    pub fn replace(&self, state: State) {
        self.write(|s| *s = state);
    }

    /// Waits until the state has applied at least `index`; false on timeout.
    pub async fn wait_for_index(&self, index: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|i| *i >= index))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }
}
