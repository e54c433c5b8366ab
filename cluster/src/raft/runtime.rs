//! Raft's own threads. The raft core, its replication and vote calls, the
//! log's appends and the state machine run on a runtime of their own, so a
//! leader's heartbeats and a follower's election timer keep their timing
//! however busy the control plane's threads are with scheduling, blocking
//! queries and thousands of nodes. That is what lets the election timeouts
//! be short (`server::config`).

use std::future::Future;

use tokio::runtime::{Builder, Runtime};

/// Threads for raft: one. What runs here is short (appends to the
/// memtable, replication, applying an entry, a follower's fsync); snapshots
/// are built and saved on the blocking pool. A second thread bought only
/// handovers: tokio wakes an idle worker to steal each task made ready
/// while the other is busy. With followers syncing inline, one thread took
/// a lone writer straight to the leader from about 920 to 1,060 writes/s
/// and thread switches from 67 to 45 per write (all processes), and cost
/// `c2m-mini` nothing (BENCHMARKS.md, the write path, seventh round).
const RAFT_THREADS: usize = 1;

/// How much more raft's thread weighs than the server's others (a nice
/// value, lowered from the process's own). On a machine whose cores are all
/// busy (a capacity run at its limit, a busy neighbour, a snapshot build)
/// the scheduler hands a core out in turns, and a leader whose heartbeat
/// waited its turn past a follower's election timeout, or a follower that
/// took its leader's message late, brought an election though every server
/// was alive. What raft's thread runs is short, so favouring it costs the
/// others little. Best effort: without the privilege to raise a priority
/// (`CAP_SYS_NICE`) raft runs at the process's own.
pub const RAFT_NICE: i32 = -10;

/// The runtime, shut down in the background when dropped (dropping a tokio
/// runtime from inside another one would panic).
pub struct RaftRuntime(Option<Runtime>);

impl RaftRuntime {
    pub fn start() -> std::io::Result<Self> {
        let rt = Builder::new_multi_thread()
            .worker_threads(RAFT_THREADS)
            .thread_name("raft")
            // A thread inherits the priority of the thread that starts it:
            // the blocking pool's, started from the favoured worker, are
            // put back to the process's.
            .on_thread_start(|| {
                let _ = set_thread_nice(0);
            })
            .enable_all()
            .build()?;
        // On the one worker thread (a spawned task runs there, never on the
        // blocking pool, which must keep the process's priority).
        rt.spawn(async {
            if let Err(e) = set_thread_nice(RAFT_NICE) {
                tracing::info!("raft's thread keeps the process's priority: {e}");
            }
        });
        Ok(Self(Some(rt)))
    }

    /// A handle to spawn long-lived tasks on raft's threads.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("the raft runtime runs until dropped")
            .handle()
            .clone()
    }

    /// Runs `future` on raft's threads: whatever it spawns (openraft spawns
    /// its core and replication tasks, tonic its connections) stays there.
    pub async fn run<F>(&self, future: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let rt = self
            .0
            .as_ref()
            .expect("the raft runtime runs until dropped");
        match rt.spawn(future).await {
            Ok(out) => out,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

impl Drop for RaftRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Sets the calling thread's nice value to the process's (its main
/// thread's) plus `delta` (negative: more weight), within Linux's -20..=19.
/// Relative to the process, not to the thread: a thread starts with the
/// priority of the thread that started it.
pub fn set_thread_nice(delta: i32) -> std::io::Result<()> {
    let nice = (process_nice() + delta).clamp(-20, 19);
    // SAFETY: gettid and setpriority on the calling thread only.
    let failed =
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) != 0 };
    if failed {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The nice value of the process's main thread.
pub fn process_nice() -> i32 {
    // SAFETY: getpid and getpriority have no preconditions.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::getpid() as libc::id_t) }
}

/// The nice value of the calling thread.
pub fn current_thread_nice() -> i32 {
    // SAFETY: getpriority on the calling thread only.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn raft_runs_on_a_favoured_thread_and_its_blocking_pool_does_not() {
        let own = process_nice();
        let rt = RaftRuntime::start().unwrap();
        let worker = rt.run(async { current_thread_nice() }).await;
        let blocking = rt
            .run(async {
                tokio::task::spawn_blocking(current_thread_nice)
                    .await
                    .unwrap()
            })
            .await;
        // Raised where the privilege allows it (root here), else unchanged.
        let raised = (own + RAFT_NICE).clamp(-20, 19);
        assert!(worker == raised || worker == own, "{worker}");
        if is_root() {
            assert_eq!(worker, raised);
        }
        assert_eq!(
            blocking, own,
            "the blocking pool keeps the process's priority"
        );
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }
}
