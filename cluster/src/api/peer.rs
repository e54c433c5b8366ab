//! The raft service between servers: openraft's AppendEntries, Vote and
//! InstallSnapshot, carried as bincode in `RaftPayload`, and client writes
//! a follower forwards to the leader. Its own file, because only servers may
//! call it.
//!
//! Peers are not trusted blindly either: a message that does not decode,
//! or that no genuine member could send (see [`crate::raft::inbound`] and
//! [`crate::raft::SnapshotReceiver`]), is refused with `InvalidArgument`
//! naming the field before openraft sees it, and a forwarded write is
//! validated as if its client had called this server.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::{de::DeserializeOwned, Serialize};
use stampede_proto::raft_service_server::RaftService;
use stampede_proto::{
    forward_answer, ForwardAnswer, ForwardReply, ForwardRequest, RaftPayload, Refusal,
};
use tonic::{Request, Response, Status, Streaming};

use super::call_stream::{Answers, Ticketed};
use super::Reply;
use crate::raft::election::{self, PreVoteRequest};
use crate::raft::inbound::{self, Implausible, Receiver};
use crate::raft::metrics::Metrics;
use crate::raft::{ChunkRefused, Proposer, SnapshotReceiver};
use crate::raft::{NodeId, Raft, TypeConfig};

/// What the peer service may touch: raft itself, the snapshot being
/// received, and the proposer for forwarded writes.
#[derive(Clone)]
pub struct PeerApi {
    pub raft: Raft,
    pub proposer: Proposer,
    pub metrics: Arc<Metrics>,
    /// Shared by every copy of the service (raft's server and the main one).
    pub snapshots: Arc<SnapshotReceiver>,
    /// The configured members (`--peers`): a genuine message agrees.
    pub members: Arc<BTreeSet<NodeId>>,
    /// The election timing, and the election driver's latest look at
    /// raft, that pre-votes are answered from.
    pub timing: election::Timing,
    pub election: Arc<election::Latest>,
}

/// A payload that is not the raft message its call expects.
#[derive(Debug, thiserror::Error)]
#[error("data: not a raft message of this type: {0}")]
struct BadPayload(bincode::Error);

impl From<BadPayload> for Status {
    fn from(e: BadPayload) -> Self {
        Status::invalid_argument(e.to_string())
    }
}

impl From<Implausible> for Status {
    fn from(e: Implausible) -> Self {
        Status::invalid_argument(e.to_string())
    }
}

impl From<ChunkRefused> for Status {
    fn from(e: ChunkRefused) -> Self {
        match e {
            ChunkRefused::Stopped(_) | ChunkRefused::CheckFailed(_) => {
                Status::unavailable(e.to_string())
            }
            _ => Status::invalid_argument(e.to_string()),
        }
    }
}

/// Decodes a raft message. bincode reads a length before each list and
/// string, and reads no more than the payload holds, so a forged length
/// fails here rather than allocating.
fn decode<T: DeserializeOwned>(payload: &RaftPayload) -> Result<T, BadPayload> {
    bincode::deserialize(&payload.data).map_err(BadPayload)
}

/// Raft's answer that could not be encoded: our own types always encode, so
/// this would be a bug here, hence `Internal`.
#[derive(Debug, thiserror::Error)]
#[error("encoding a raft answer: {0}")]
struct EncodeFailed(bincode::Error);

impl From<EncodeFailed> for Status {
    fn from(e: EncodeFailed) -> Self {
        Status::internal(e.to_string())
    }
}

fn encode<T: Serialize>(value: &T) -> Result<RaftPayload, EncodeFailed> {
    let data = bincode::serialize(value).map_err(EncodeFailed)?;
    Ok(RaftPayload { data })
}

impl PeerApi {
    /// What this server checks a peer's message against: its members and
    /// its current term (read, not watched: no wake-up per entry).
    fn receiver(&self) -> (Arc<BTreeSet<NodeId>>, u64) {
        (
            self.members.clone(),
            self.raft.metrics().borrow().current_term,
        )
    }

    /// A leader's message arrived, of this server's term or a later one:
    /// the pre-vote counts it as word from the leader at once, before
    /// raft's core, which may be held up, gets to it.
    fn leader_word(&self, vote: &openraft::Vote<NodeId>, term: u64) {
        if vote.is_committed() && vote.leader_id().get_term() >= term {
            self.election.leader_word_arrived();
        }
    }

    /// One AppendEntries, whether it came as a call of its own or on a
    /// stream: checked, handed to raft, and raft's answer encoded.
    async fn append_one(&self, payload: RaftPayload) -> Result<RaftPayload, Status> {
        let rpc: AppendEntriesRequest<TypeConfig> = decode(&payload)?;
        let (members, term) = self.receiver();
        inbound::append_entries(
            &rpc,
            Receiver {
                members: &members,
                term,
            },
        )?;
        self.leader_word(&rpc.vote, term);
        let start = std::time::Instant::now();
        let answer = self.raft.append_entries(rpc).await;
        self.metrics
            .append_handle_seconds
            .observe(start.elapsed().as_secs_f64());
        Ok(encode(&answer)?)
    }
}

/// The answers on an AppendEntries stream, in the order of its requests.
type AppendAnswers = Pin<Box<dyn Stream<Item = Result<RaftPayload, Status>> + Send>>;

#[tonic::async_trait]
impl RaftService for PeerApi {
    async fn append_entries(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        Ok(Response::new(self.append_one(req.into_inner()).await?))
    }

    type AppendEntriesStreamStream = AppendAnswers;

    /// Answers each request before reading the next, on the task that
    /// sends the answers: no task of its own, no channel between. The first
    /// refused message (or a broken stream) is the last answer.
    async fn append_entries_stream(
        &self,
        req: Request<Streaming<RaftPayload>>,
    ) -> Reply<AppendAnswers> {
        let requests = req.into_inner();
        let answers = futures::stream::unfold(Some((requests, self.clone())), |state| async move {
            let (mut requests, api) = state?;
            let payload = match requests.message().await {
                Ok(Some(payload)) => payload,
                Ok(None) => return None,
                Err(status) => return Some((Err(status), None)),
            };
            match api.append_one(payload).await {
                Ok(answer) => Some((Ok(answer), Some((requests, api)))),
                Err(status) => Some((Err(status), None)),
            }
        });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn vote(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc: VoteRequest<NodeId> = decode(req.get_ref())?;
        let (members, term) = self.receiver();
        inbound::vote_request(
            &rpc,
            Receiver {
                members: &members,
                term,
            },
        )?;
        Ok(Response::new(encode(&self.raft.vote(rpc).await)?))
    }

    /// Changes nothing here: only says whether this server would vote.
    async fn pre_vote(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc: PreVoteRequest = decode(req.get_ref())?;
        let (members, term) = self.receiver();
        inbound::pre_vote(
            rpc.candidate,
            rpc.term,
            rpc.last_log_id.as_ref(),
            Receiver {
                members: &members,
                term,
            },
        )?;
        let answer = election::answer(
            &self.raft,
            &self.election,
            &self.timing,
            &self.metrics,
            &rpc,
        )
        .await
        .ok_or_else(|| Status::unavailable("raft has not started"))?;
        Ok(Response::new(encode(&answer)?))
    }

    async fn install_snapshot(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc: InstallSnapshotRequest<TypeConfig> = decode(req.get_ref())?;
        let (members, term) = self.receiver();
        inbound::install_snapshot(
            &rpc,
            Receiver {
                members: &members,
                term,
            },
        )?;
        self.leader_word(&rpc.vote, term);
        let answer = self.snapshots.receive(&self.raft, rpc).await?;
        Ok(Response::new(encode(&answer)?))
    }

    /// A client's write a follower sent on, as the client sent it: validated
    /// and proposed here only. A server that is not the leader any more
    /// answers `Unavailable` and the sender tries again.
    async fn forward(&self, req: Request<ForwardRequest>) -> Reply<ForwardReply> {
        Ok(Response::new(self.forward_one(req.into_inner()).await?))
    }

    type ForwardStreamStream = ForwardAnswers;

    /// Each write is proposed as soon as it is read, so the writes of one
    /// stream are gathered into shared entries as concurrent calls would be.
    async fn forward_stream(
        &self,
        req: Request<Streaming<ForwardRequest>>,
    ) -> Reply<ForwardAnswers> {
        // One shared handle for the stream's calls: a call clones a count,
        // not every handle the service holds.
        let api = std::sync::Arc::new(self.clone());
        Ok(Response::new(Answers::new(
            req.into_inner(),
            FORWARD_STREAM_WRITES,
            move |ask| {
                let api = api.clone();
                async move { api.forward_one(ask).await }
            },
        )))
    }
}

impl PeerApi {
    /// One forwarded write, whether it came as a call of its own or on a
    /// stream.
    async fn forward_one(&self, req: ForwardRequest) -> Result<ForwardReply, Status> {
        let write = req
            .write
            .ok_or_else(|| Status::invalid_argument("write: is required"))?;
        let written = self.proposer.write_forwarded(write, req.ticket).await?;
        Ok(ForwardReply {
            index: written.index,
            eval_id: written.eval_id,
        })
    }
}

/// Most writes of one forward stream in progress at once; past it, the
/// stream is not read (and HTTP/2 flow control holds the sender back).
const FORWARD_STREAM_WRITES: usize = 4096;

/// The answers on a forward stream.
pub type ForwardAnswers = Answers<ForwardRequest>;

impl Ticketed for ForwardRequest {
    /// The whole request: the leader deduplicates a forwarded write by
    /// its ticket.
    type Ask = ForwardRequest;
    type Reply = ForwardReply;
    type Answer = ForwardAnswer;
    const STREAM: &'static str = "a forward stream";

    fn split(self) -> (u64, ForwardRequest) {
        (self.ticket, self)
    }

    fn answer(ticket: u64, outcome: Result<ForwardReply, Status>) -> ForwardAnswer {
        let outcome = match outcome {
            Ok(written) => forward_answer::Outcome::Written(written),
            Err(status) => forward_answer::Outcome::Refused(Refusal::from(&status)),
        };
        ForwardAnswer {
            ticket,
            outcome: Some(outcome),
        }
    }
}
