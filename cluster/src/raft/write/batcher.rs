//! Group commit on the leader: writes that arrive while earlier entries are
//! still being appended and replicated wait together and go to raft as one
//! entry (a `BatchEntry`), so one synced append and one replication round
//! carry many writes. openraft 0.9 appends each `client_write` on its own,
//! so this is ours.
//!
//! An idle server sends a write at once: nothing waits on a timer. Only
//! when [`MAX_IN_FLIGHT`] entries are already on their way does a write
//! queue, and the queue goes out as one entry as soon as one of them is
//! done, capped at [`MAX_COMMANDS`] commands and [`MAX_BYTES`] bytes.
//! With batching off every write is its own entry (Nomad's behaviour, which
//! the seed comparisons measure), still with the same bound on entries in
//! flight.

use std::future::Future;
use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use prost::Message;
use stampede_proto::{log_entry::Msg, BatchEntry, LogEntry};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::raft::{Command, NodeId, Raft};

/// Raft entries this server has on their way (appending, replicating,
/// applying) before new writes wait to be batched.
pub const MAX_IN_FLIGHT: usize = 2;
/// Most commands in one batched entry.
pub const MAX_COMMANDS: usize = 1024;
/// Most encoded bytes of commands in one batched entry; a larger command
/// goes alone.
pub const MAX_BYTES: usize = 4 * 1024 * 1024;

/// Why raft did not take a write; every caller of a failed entry gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// This server does not lead; the leader, if one is known.
    NotLeader(Option<(NodeId, String)>),
    /// Raft refused a membership change.
    Raft(String),
    /// Raft stopped (shutdown or a fatal error).
    ShuttingDown,
}

type Reply = oneshot::Sender<Result<u64, Failed>>;

struct Pending {
    entry: LogEntry,
    bytes: usize,
    reply: Reply,
}

/// The way into raft for every write on this server.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::UnboundedSender<Pending>,
    batching: bool,
}

impl Batcher {
    /// Starts the batcher's task on the current runtime; it ends when the
    /// last `Batcher` is dropped.
    pub fn start(raft: Raft, batching: bool) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, rx, batching));
        Self { tx, batching }
    }

    /// Whether concurrent writes share raft entries (`--raft-batching`).
    pub fn batching(&self) -> bool {
        self.batching
    }

    /// Queues `entry` now, so writes submitted one after another reach the
    /// log in that order, and returns a future for its outcome.
    pub fn submit(
        &self,
        entry: LogEntry,
    ) -> impl Future<Output = Result<u64, Failed>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        let bytes = entry.encoded_len();
        let queued = self.tx.send(Pending {
            entry,
            bytes,
            reply,
        });
        async move {
            queued.map_err(|_| Failed::ShuttingDown)?;
            rx.await.map_err(|_| Failed::ShuttingDown)?
        }
    }
}

async fn run(raft: Raft, mut rx: mpsc::UnboundedReceiver<Pending>, batching: bool) {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // A write that did not fit in the previous batch starts the next.
    let mut carried: Option<Pending> = None;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let mut group = vec![first];
        let mut bytes = group[0].bytes;
        while batching && group.len() < MAX_COMMANDS {
            let Ok(next) = rx.try_recv() else { break };
            if bytes + next.bytes > MAX_BYTES {
                carried = Some(next);
                break;
            }
            bytes += next.bytes;
            group.push(next);
        }
        // Handed to raft here, in the order the writes came: entries are
        // appended in that order, and only waiting for them is concurrent.
        let (entry, replies) = combine(group);
        let committed = raft.client_write_ff(Command::new(entry)).await;
        tokio::spawn(async move {
            let outcome = match committed {
                Err(_) => Err(Failed::ShuttingDown),
                Ok(rx) => match rx.await {
                    Ok(Ok(resp)) => Ok(resp.log_id.index),
                    Ok(Err(e)) => Err(failed(RaftError::APIError(e))),
                    Err(_) => Err(Failed::ShuttingDown),
                },
            };
            drop(slot);
            for reply in replies {
                let _ = reply.send(outcome.clone());
            }
        });
    }
}

/// One entry for a group of writes: the write itself when it is alone, a
/// `BatchEntry` of them otherwise. A write that is already a batch (the
/// plan applier's) is spliced in, so batches are never nested.
fn combine(group: Vec<Pending>) -> (LogEntry, Vec<Reply>) {
    if group.len() == 1 {
        let p = group.into_iter().next().expect("one write");
        return (p.entry, vec![p.reply]);
    }
    let mut entries = Vec::with_capacity(group.len());
    let mut replies = Vec::with_capacity(group.len());
    for p in group {
        match p.entry.msg {
            Some(Msg::Batch(b)) => entries.extend(b.entries),
            _ => entries.push(p.entry),
        }
        replies.push(p.reply);
    }
    let entry = LogEntry {
        msg: Some(Msg::Batch(BatchEntry { entries })),
    };
    (entry, replies)
}

fn failed(e: RaftError<NodeId, ClientWriteError<NodeId, openraft::BasicNode>>) -> Failed {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            Failed::NotLeader(match (f.leader_id, f.leader_node) {
                (Some(id), Some(node)) => Some((id, node.addr)),
                _ => None,
            })
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            Failed::Raft(e.to_string())
        }
        RaftError::Fatal(_) => Failed::ShuttingDown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::{EvalUpdateEntry, Evaluation};

    fn eval_entry(id: &str) -> LogEntry {
        LogEntry {
            msg: Some(Msg::EvalUpdate(EvalUpdateEntry {
                evals: vec![Evaluation {
                    id: id.into(),
                    ..Default::default()
                }],
            })),
        }
    }

    fn pending(entry: LogEntry) -> (Pending, oneshot::Receiver<Result<u64, Failed>>) {
        let (reply, rx) = oneshot::channel();
        let bytes = entry.encoded_len();
        (
            Pending {
                entry,
                bytes,
                reply,
            },
            rx,
        )
    }

    #[test]
    fn a_lone_write_is_its_own_entry() {
        let (p, _rx) = pending(eval_entry("a"));
        let (entry, replies) = combine(vec![p]);
        assert_eq!(entry, eval_entry("a"));
        assert_eq!(replies.len(), 1);
    }

    #[test]
    fn writes_are_gathered_in_order_and_batches_are_spliced_not_nested() {
        let inner = LogEntry {
            msg: Some(Msg::Batch(BatchEntry {
                entries: vec![eval_entry("b"), eval_entry("c")],
            })),
        };
        let group: Vec<Pending> = [eval_entry("a"), inner, eval_entry("d")]
            .into_iter()
            .map(|e| pending(e).0)
            .collect();
        let (entry, replies) = combine(group);
        assert_eq!(replies.len(), 3, "one reply per caller");
        let Some(Msg::Batch(b)) = entry.msg else {
            panic!("not a batch: {entry:?}");
        };
        let ids: Vec<String> = b
            .entries
            .iter()
            .map(|e| match &e.msg {
                Some(Msg::EvalUpdate(u)) => u.evals[0].id.clone(),
                other => panic!("nested or foreign entry {other:?}"),
            })
            .collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
    }
}
