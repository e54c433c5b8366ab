//! A follower's client allocation updates, sent on to the leader together.
//!
//! Every node connected to a follower reports through it. Sent on one call
//! each, every report would be a call on the leader as well, and the leader
//! is the busiest server. Instead the relay calls at most once per [`PACE`]
//! (more than once only when more than one leader entry's worth waits): a
//! report that finds the relay idle goes at once, and those that arrive
//! within the pace go together in the next call. A pace well inside
//! the leader's batch window keeps a burst of reports (nodes send on a shared
//! 200 ms tick) in the leader batch that its first call opened, where they
//! would have landed anyway. Each caller is answered with the index of the
//! entry that carries its update.
//!
//! If the leader refuses a combined call because of one caller's update (an
//! allocation it does not know, a field it rejects, a node's secret that
//! does not match), each caller's updates are sent again on their own, so
//! only that caller gets the error. Each caller's node secrets go with its
//! updates: the leader checks them again.

use std::time::Duration;

use stampede_proto::{Allocation, NodeSecret, NodeUpdateAllocRequest};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::leader::alloc_updates::MAX_ENTRY_ALLOCS;
use super::routing::{forwarded, node_client};

/// The least time between two rounds of calls: a tenth of the leader's
/// default batch window.
const PACE: Duration = Duration::from_millis(5);

struct Pending {
    /// The leader when this update was routed.
    leader: Channel,
    allocs: Vec<Allocation>,
    /// The secrets of the nodes `allocs` belong to.
    secrets: Vec<NodeSecret>,
    reply: oneshot::Sender<Result<u64, Status>>,
}

/// The relay of one server. Its task ends when this is dropped.
pub struct UpdateRelay {
    tx: mpsc::UnboundedSender<Pending>,
}

impl UpdateRelay {
    /// Starts the relay's task on the current tokio runtime.
    pub fn start() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx));
        Self { tx }
    }

    /// Sends `allocs`, with the `secrets` of their nodes, on to `leader`
    /// with whatever else is waiting; returns the index of the entry they
    /// were written in, or the leader's answer.
    pub async fn send(
        &self,
        leader: Channel,
        allocs: Vec<Allocation>,
        secrets: Vec<NodeSecret>,
    ) -> Result<u64, Status> {
        let (reply, rx) = oneshot::channel();
        let closed = || Status::unavailable("this server is shutting down; retry elsewhere");
        self.tx
            .send(Pending {
                leader,
                allocs,
                secrets,
                reply,
            })
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }
}

async fn run(mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut next_call = Instant::now();
    while let Some(first) = rx.recv().await {
        let mut waiting = vec![first];
        // Gather until the relay may call again (at once when it is idle).
        let pace = tokio::time::sleep_until(next_call);
        tokio::pin!(pace);
        loop {
            tokio::select! {
                biased;
                _ = &mut pace => break,
                next = rx.recv() => match next {
                    Some(p) => waiting.push(p),
                    None => break,
                },
            }
        }
        while let Ok(p) = rx.try_recv() {
            waiting.push(p);
        }
        // Each call answers its own callers, also after the relay is gone.
        while !waiting.is_empty() {
            tokio::spawn(relay(take_batch(&mut waiting)));
        }
        next_call = Instant::now() + PACE;
    }
}

/// The oldest waiting calls, up to one leader entry's worth of updates (at
/// least one call, however large).
fn take_batch(waiting: &mut Vec<Pending>) -> Vec<Pending> {
    let mut allocs = 0;
    let n = waiting
        .iter()
        .take_while(|p| {
            allocs += p.allocs.len();
            allocs <= MAX_ENTRY_ALLOCS
        })
        .count()
        .max(1);
    waiting.drain(..n).collect()
}

/// Sends one batch as one call; falls back to one call per caller when the
/// leader blames the request rather than itself.
async fn relay(batch: Vec<Pending>) {
    if let [_] = batch.as_slice() {
        let p = batch.into_iter().next().expect("one call");
        let result = forward(p.leader, p.allocs, p.secrets).await;
        let _ = p.reply.send(result);
        return;
    }
    // Copied, because a refusal that blames the request sends each
    // caller's updates again on their own; sized once, not grown by doubling.
    let mut allocs = Vec::with_capacity(batch.iter().map(|p| p.allocs.len()).sum());
    let mut secrets = Vec::new();
    for p in &batch {
        allocs.extend_from_slice(&p.allocs);
        secrets.extend_from_slice(&p.secrets);
    }
    // One entry per node and secret: the nodes of a fleet share calls.
    secrets.sort_unstable_by(|a, b| (&a.node_id, &a.secret_id).cmp(&(&b.node_id, &b.secret_id)));
    secrets.dedup();
    match forward(batch[0].leader.clone(), allocs, secrets).await {
        Err(s) if blames_request(&s) => {
            let mut alone = JoinSet::new();
            for p in batch {
                alone.spawn(async move {
                    let result = forward(p.leader, p.allocs, p.secrets).await;
                    let _ = p.reply.send(result);
                });
            }
            while alone.join_next().await.is_some() {}
        }
        result => {
            for p in batch {
                let _ = p.reply.send(result.clone());
            }
        }
    }
}

/// Whether a refusal is about the updates sent rather than the leader.
fn blames_request(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::InvalidArgument
            | Code::NotFound
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::PermissionDenied
    )
}

async fn forward(
    leader: Channel,
    allocs: Vec<Allocation>,
    secrets: Vec<NodeSecret>,
) -> Result<u64, Status> {
    let reply = node_client(leader)
        .update_alloc(forwarded(NodeUpdateAllocRequest { allocs, secrets }))
        .await?;
    Ok(reply.into_inner().index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiting call of `n` updates (nobody waits for its answer).
    fn pending(n: usize) -> Pending {
        Pending {
            leader: Channel::from_static("http://127.0.0.1:1").connect_lazy(),
            allocs: vec![Allocation::default(); n],
            secrets: Vec::new(),
            reply: oneshot::channel().0,
        }
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_one_entrys_worth_but_always_one_call() {
        let mut waiting: Vec<Pending> = [1500, 400, 200, 10].into_iter().map(pending).collect();
        let sizes = |b: &[Pending]| b.iter().map(|p| p.allocs.len()).collect::<Vec<_>>();
        assert_eq!(sizes(&take_batch(&mut waiting)), [1500, 400]);
        assert_eq!(sizes(&take_batch(&mut waiting)), [200, 10]);
        let mut big = vec![pending(MAX_ENTRY_ALLOCS + 1), pending(1)];
        assert_eq!(sizes(&take_batch(&mut big)), [MAX_ENTRY_ALLOCS + 1]);
        assert_eq!(sizes(&take_batch(&mut big)), [1]);
    }

    #[test]
    fn only_the_callers_mistakes_are_retried_alone() {
        assert!(blames_request(&Status::not_found("allocs[3].id")));
        assert!(blames_request(&Status::invalid_argument("allocs[0]")));
        assert!(blames_request(&Status::permission_denied(
            "secret_id does not match node n1"
        )));
        assert!(!blames_request(&Status::unavailable("leader moved")));
        assert!(!blames_request(&Status::deadline_exceeded("slow")));
    }
}
