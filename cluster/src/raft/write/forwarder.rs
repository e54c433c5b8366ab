//! A follower's forwarded writes, on one long-lived `ForwardStream` per
//! leader: each write goes as one HTTP/2 data frame with its ticket, and
//! the leader's answer comes back with the same ticket, in whatever order
//! the writes finish. A call per write costs both servers a new HTTP/2
//! stream (headers, trailers, a task on the leader), and on a write's
//! critical path that is the leg from the follower to the leader.
//!
//! A stream that breaks fails the writes waiting on it as unreachable, so
//! the proposer tries them again, and the next write opens a new stream. A
//! leader that does not serve the stream (a build from before it) is sent
//! one call per write from then on.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use stampede_proto::call_stream::CallStream;
use stampede_proto::{forward_answer, ForwardAnswer, ForwardReply, ForwardRequest};
use tonic::{Code, Status};

use crate::raft::wire::network::PeerChannels;
use crate::raft::NodeId;

type Answer = Result<ForwardReply, Status>;

type ForwardStream = CallStream<ForwardRequest, ForwardAnswer>;

/// Sends forwarded writes to the leader. Cheap to clone.
#[derive(Clone)]
pub struct Forwarder {
    channels: PeerChannels,
    streams: Arc<Mutex<HashMap<NodeId, Arc<ForwardStream>>>>,
    /// Leaders that answered the stream with `Unimplemented`.
    unary: Arc<Mutex<HashSet<NodeId>>>,
}

impl Forwarder {
    pub fn new(channels: PeerChannels) -> Self {
        Self {
            channels,
            streams: Default::default(),
            unary: Default::default(),
        }
    }

    /// Sends `request` (whose ticket must not be 0) to server `id` at
    /// `addr` and waits for the leader's answer. Errors are the leader's
    /// refusal, or what the transport made of a broken stream.
    pub async fn send(&self, id: NodeId, addr: &str, request: ForwardRequest) -> Answer {
        debug_assert_ne!(request.ticket, 0, "a write on the stream needs a ticket");
        if stampede_proto::lock(&self.unary).contains(&id) {
            return self.call(id, addr, request).await;
        }
        let stream = self.stream(id, addr);
        match stream.call(request.ticket, request).await {
            Err(status) if status.code() == Code::Unimplemented => {
                // The proposer tries again, with a call this time.
                stampede_proto::lock(&self.unary).insert(id);
                tracing::info!(
                    leader = id,
                    "the leader has no forward stream; one call per write"
                );
                Err(Status::unavailable(
                    "the leader has no forward stream; the write goes again as a call",
                ))
            }
            Err(status) => Err(status),
            Ok(answer) => match answer.outcome {
                Some(forward_answer::Outcome::Written(reply)) => Ok(reply),
                Some(forward_answer::Outcome::Refused(r)) => Err(r.into()),
                None => Err(Status::internal(
                    "the leader answered a forwarded write with neither an outcome nor a refusal",
                )),
            },
        }
    }

    /// One write as a call of its own.
    async fn call(&self, id: NodeId, addr: &str, request: ForwardRequest) -> Answer {
        let mut client = self.channels.raft_client(id, addr);
        Ok(client.forward(request).await?.into_inner())
    }

    /// The open stream to server `id`, opened now if there is none or the
    /// last one ended.
    fn stream(&self, id: NodeId, addr: &str) -> Arc<ForwardStream> {
        let mut streams = stampede_proto::lock(&self.streams);
        if let Some(open) = streams.get(&id).filter(|s| s.is_open()) {
            return open.clone();
        }
        let mut client = self.channels.raft_client(id, addr);
        let open = CallStream::open("the forward stream to the leader", |requests| async move {
            client.forward_stream(requests).await
        });
        streams.insert(id, open.clone());
        open
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::raft::wire::stand_in::StandIn;

    /// A forwarder, and the address and one-write call count of a fresh
    /// stand-in leader (see [`crate::raft::wire::stand_in`] for its answers).
    async fn forwarder(streams: bool) -> (Forwarder, String, Arc<AtomicUsize>) {
        let (peer, addr) = StandIn::serve(streams).await;
        let channels = PeerChannels::new(HashMap::new(), None);
        (Forwarder::new(channels), addr, peer.forward_calls)
    }

    fn request(ticket: u64) -> ForwardRequest {
        ForwardRequest {
            write: None,
            ticket,
        }
    }

    #[tokio::test]
    async fn answers_reach_their_own_writers_in_any_order() {
        let (f, addr, calls) = forwarder(true).await;
        let (slow, fast, refused) = tokio::join!(
            f.send(9, &addr, request(1)),
            f.send(9, &addr, request(5)),
            f.send(9, &addr, request(2)),
        );
        assert_eq!(slow.unwrap().index, 1);
        assert_eq!(fast.unwrap().index, 5);
        let refused = refused.unwrap_err();
        assert_eq!(refused.code(), Code::NotFound);
        assert_eq!(refused.message(), "job_id: no such job");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "all on the stream");
    }

    #[tokio::test]
    async fn a_broken_stream_fails_its_writers_retryably_and_the_next_write_reopens_it() {
        let (f, addr, _) = forwarder(true).await;
        // join! polls in order: the slow write is on the stream before the
        // one that ends it is sent.
        let (slow, ended) =
            tokio::join!(f.send(9, &addr, request(1)), f.send(9, &addr, request(3)));
        for status in [slow.unwrap_err(), ended.unwrap_err()] {
            assert!(stampede_proto::client::retryable(&status), "{status:?}");
        }
        assert_eq!(f.send(9, &addr, request(6)).await.unwrap().index, 6);
    }

    #[tokio::test]
    async fn a_leader_without_the_stream_gets_one_call_per_write() {
        let (f, addr, calls) = forwarder(false).await;
        let first = f.send(9, &addr, request(4)).await.unwrap_err();
        assert!(stampede_proto::client::retryable(&first), "{first:?}");
        for ticket in [4, 5] {
            assert_eq!(
                f.send(9, &addr, request(ticket)).await.unwrap().index,
                ticket
            );
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
