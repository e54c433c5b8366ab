//! A snapshot from the leader, received chunk by chunk into a buffer of our
//! own and checked before openraft gets it.
//!
//! Why not openraft 0.9's chunked receiver (`Raft::install_snapshot`): it
//! seeks to whatever offset a chunk names and writes there, so one chunk at
//! offset 2^62 makes it allocate 2^62 bytes and abort the process; and it
//! hands the finished data to the state machine, where data that does not
//! decode can only be reported as a storage error, which stops raft for
//! good (`Shutdown`) while the process stays up. So chunks are taken here
//! only in order and within [`MAX_CHUNK_BYTES`] and [`MAX_SNAPSHOT_BYTES`],
//! the finished data is decoded into a state once, as the check, off raft's
//! threads, and only a snapshot that decodes reaches openraft, through
//! `Raft::install_full_snapshot` (which openraft provides for snapshots an
//! application transfers itself), carrying that state: the install does
//! not decode it again.

use std::cmp::Ordering;

use openraft::error::{Fatal, InstallSnapshotError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, InstallSnapshotResponse};
use openraft::Snapshot;
use tokio::sync::Mutex;

use crate::model::validate::quote;
use crate::raft::storage::snapshot_store::SnapshotData;
use crate::raft::{NodeId, Raft, TypeConfig};
use crate::state::State;

/// Largest chunk a peer may send. openraft's senders cut snapshots into
/// chunks of `snapshot_max_chunk_size` (3 MiB by default).
pub const MAX_CHUNK_BYTES: usize = 64 * 1024 * 1024;

/// Largest snapshot a peer may send: the encoded state of about ten million
/// allocations, and well within the memory of a server that holds it.
pub const MAX_SNAPSHOT_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// Chunks smaller than this are added to the one before instead of kept
/// as they came.
const GATHER_BYTES: usize = 1024 * 1024;

/// A chunk refused, before anything was allocated for it.
#[derive(Debug, thiserror::Error)]
pub enum ChunkRefused {
    #[error("offset: is {got}; snapshot {id} continues at byte {expected}")]
    OutOfOrder { id: String, got: u64, expected: u64 },
    #[error("data: is {0} bytes; at most {MAX_CHUNK_BYTES} allowed in one chunk")]
    ChunkTooLarge(usize),
    #[error("offset: the snapshot would run to byte {0}; at most {MAX_SNAPSHOT_BYTES} allowed")]
    TooLarge(u64),
    #[error("data: the finished snapshot does not decode as a StateSnapshot: {0}")]
    Undecodable(prost::DecodeError),
    /// Raft has stopped on this server; not the sender's mistake.
    #[error("raft has stopped on this server: {0}")]
    Stopped(Fatal<NodeId>),
    /// The check of the finished snapshot did not run to its end; not the
    /// sender's mistake.
    #[error("the snapshot's check did not finish: {0}")]
    CheckFailed(tokio::task::JoinError),
}

/// Tells raft that the leader of `vote` was heard from, as an AppendEntries
/// with nothing in it would: no log position, nothing committed, so nothing
/// is appended, truncated or committed, and the election timer starts over.
async fn heard_from(raft: &Raft, vote: openraft::Vote<NodeId>) -> Result<(), ChunkRefused> {
    let nothing = AppendEntriesRequest {
        vote,
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    match raft.append_entries(nothing).await {
        Ok(_) => Ok(()),
        Err(RaftError::Fatal(fatal)) => Err(ChunkRefused::Stopped(fatal)),
        Err(RaftError::APIError(never)) => match never {},
    }
}

/// What a chunk gets back: our vote (openraft's answer), or a refusal.
pub type Answer = Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>;

/// The snapshot being received, if any. One per server, shared by the
/// servers' copies of the peer service.
#[derive(Default)]
pub struct SnapshotReceiver {
    receiving: Mutex<Option<Receiving>>,
}

struct Receiving {
    snapshot_id: String,
    /// The chunks so far, as they came: joined into one buffer off raft's
    /// threads once the last has come, not grown (and copied, hundreds of
    /// MB at a time) here as each comes.
    chunks: Vec<Vec<u8>>,
    /// Their bytes.
    len: u64,
}

impl SnapshotReceiver {
    /// Takes one chunk; on the last one, checks the whole snapshot and
    /// installs it. Chunks of one snapshot must come in order, each
    /// starting where the one before ended; a chunk at offset 0 starts
    /// over, with this snapshot or another.
    pub async fn receive(
        &self,
        raft: &Raft,
        mut req: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<Answer, ChunkRefused> {
        if req.data.len() > MAX_CHUNK_BYTES {
            return Err(ChunkRefused::ChunkTooLarge(req.data.len()));
        }
        let end = req.offset.saturating_add(req.data.len() as u64);
        if end > MAX_SNAPSHOT_BYTES {
            return Err(ChunkRefused::TooLarge(end));
        }
        // Then as openraft does: a sender behind our vote gets our vote,
        // and sends nothing more.
        let my_vote = raft
            .with_raft_state(|s| *s.vote_ref())
            .await
            .map_err(ChunkRefused::Stopped)?;
        let behind = InstallSnapshotResponse { vote: my_vote };
        if !matches!(
            req.vote.partial_cmp(&my_vote),
            Some(Ordering::Greater | Ordering::Equal)
        ) {
            return Ok(Ok(behind));
        }
        // Each chunk is word from the leader, as openraft's own receiver
        // takes it: a follower receiving a snapshot for longer than its
        // election timeout (hundreds of MiB on a busy machine) would
        // otherwise campaign against the leader that is sending it.
        // Only a leader's vote (committed), and not one naming this server:
        // only this server sends its own, and raft would take it as leading
        // (or panic, leading already).
        let me = raft.metrics().borrow().id;
        if req.vote.is_committed() && req.vote.leader_id().voted_for() != Some(me) {
            heard_from(raft, req.vote).await?;
        }
        let mut receiving = self.receiving.lock().await;
        let expected = match receiving.as_ref() {
            Some(r) if r.snapshot_id == req.meta.snapshot_id => r.len,
            _ => 0,
        };
        if req.offset == 0 {
            *receiving = Some(Receiving {
                snapshot_id: req.meta.snapshot_id.clone(),
                chunks: Vec::new(),
                len: 0,
            });
        } else if req.offset != expected {
            return Err(ChunkRefused::OutOfOrder {
                id: quote(&req.meta.snapshot_id),
                got: req.offset,
                expected,
            });
        }
        let r = receiving
            .as_mut()
            .expect("set above for offset 0, or continued");
        r.len += req.data.len() as u64;
        match r.chunks.last_mut() {
            // Small chunks are gathered, so a peer that sends its bytes
            // one at a time makes no list of billions of buffers.
            Some(last) if last.len() < GATHER_BYTES => last.extend_from_slice(&req.data),
            _ => r.chunks.push(std::mem::take(&mut req.data)),
        }
        if !req.done {
            return Ok(Ok(behind));
        }
        let chunks = receiving.take().expect("receiving").chunks;
        drop(receiving);
        // Decoding hundreds of MiB takes seconds: off the runtime's threads.
        let index = req.meta.last_log_id.map_or(0, |l| l.index);
        let checked = tokio::task::spawn_blocking(move || {
            let data = chunks.concat();
            drop(chunks);
            State::decode_snapshot(&data, index).map(|state| SnapshotData::checked(data, state))
        })
        .await
        .map_err(ChunkRefused::CheckFailed)?
        .map_err(ChunkRefused::Undecodable)?;
        let snapshot = Snapshot {
            meta: req.meta,
            snapshot: Box::new(checked),
        };
        Ok(match raft.install_full_snapshot(req.vote, snapshot).await {
            Ok(resp) => Ok(resp.into()),
            Err(fatal) => Err(RaftError::Fatal(fatal)),
        })
    }
}
