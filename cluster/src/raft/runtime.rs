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

/// The runtime, shut down in the background when dropped (dropping a tokio
/// runtime from inside another one would panic).
pub struct RaftRuntime(Option<Runtime>);

impl RaftRuntime {
    pub fn start() -> std::io::Result<Self> {
        let rt = Builder::new_multi_thread()
            .worker_threads(RAFT_THREADS)
            .thread_name("raft")
            .enable_all()
            .build()?;
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
