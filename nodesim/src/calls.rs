//! The fleet's calls to the cluster, on one `NodeService.CallStream` per
//! connection: every node's register, heartbeat, allocation query and
//! update is one message on its connection's stream, with a ticket, served
//! by the server exactly as the call of its own would be. A call of its own
//! costs both ends a new HTTP/2 stream; across 10,000 nodes that was most
//! of what a placement cost (BENCHMARKS.md, the write path).
//!
//! A stream that breaks fails the calls waiting on it with its status, as a
//! broken connection fails calls of their own, and the next call opens a
//! new one. A server without the stream (a build from before it) is sent
//! calls of their own on that connection from then on; the calls that
//! found out are answered `Unavailable`, and the nodes try again as after
//! any failed call.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::Either;
use futures::FutureExt;
use stampede_proto::call_stream::CallStream;
use stampede_proto::client::ClusterClient;
use stampede_proto::node_answer::Reply;
use stampede_proto::node_call::Request;
use stampede_proto::{
    AllocationsReply, AllocsGetRequest, NodeAnswer, NodeCall, NodeClientAllocsReply,
    NodeClientAllocsRequest, NodeRegisterRequest, NodeUpdateAllocRequest, NodeUpdateStatusReply,
    NodeUpdateStatusRequest, WriteReply,
};
use tonic::{Code, Status};

type NodeStream = CallStream<NodeCall, NodeAnswer>;

/// Calls on the client's channels, by channel number.
pub(crate) struct Calls {
    client: ClusterClient,
    /// Each channel's open stream, if one was opened.
    streams: Arc<Vec<Mutex<Option<Arc<NodeStream>>>>>,
    /// Channels whose server answered the stream with `Unimplemented`.
    unary: Vec<AtomicBool>,
    next_ticket: AtomicU64,
}

/// The reply a call's method answers with, out of a stream's answer.
trait FromReply: Sized {
    fn from_reply(reply: Reply) -> Option<Self>;
}

macro_rules! from_reply {
    ($($ty:ty => $variant:ident),* $(,)?) => {$(
        impl FromReply for $ty {
            fn from_reply(reply: Reply) -> Option<Self> {
                match reply {
                    Reply::$variant(r) => Some(r),
                    _ => None,
                }
            }
        }
    )*};
}

from_reply!(
    WriteReply => Written,
    NodeUpdateStatusReply => UpdateStatus,
    NodeClientAllocsReply => GetClientAllocs,
    AllocationsReply => GetAllocs,
);

impl Calls {
    pub(crate) fn new(client: ClusterClient) -> Self {
        let n = client.channel_count();
        let streams: Arc<Vec<Mutex<Option<Arc<NodeStream>>>>> =
            Arc::new((0..n).map(|_| Mutex::new(None)).collect());
        // A channel whose server went silent (paused): the calls parked on
        // its stream fail now and go elsewhere, not when the connection's
        // ping fails a second later.
        let silenced = Arc::downgrade(&streams);
        client.on_silent(move |channel| {
            let Some(streams) = silenced.upgrade() else {
                return;
            };
            let open = stampede_proto::lock(&streams[channel]).take();
            if let Some(stream) = open {
                stream.abandon(Status::unavailable(
                    "the node call stream's server stopped answering its liveness echo",
                ));
            }
        });
        Self {
            client,
            streams,
            unary: (0..n).map(|_| AtomicBool::new(false)).collect(),
            next_ticket: AtomicU64::new(1),
        }
    }

    /// Notes that `channel` gave no answer in time: new calls pass it over.
    pub(crate) fn note_lost(&self, channel: usize) {
        self.client.note_lost(channel);
    }

    /// Whether new calls pass `channel` over (its connection was lost
    /// lately, and its server has not answered a probe since).
    pub(crate) fn passed_over(&self, channel: usize) -> bool {
        self.client.passed_over(channel)
    }

    /// How many servers the calls go to.
    pub(crate) fn server_count(&self) -> usize {
        self.client.server_count()
    }

    /// The channel a node on `from` moves to after a failure: the next
    /// one whose connection has not been lost lately.
    pub(crate) fn next_healthy(&self, from: usize) -> usize {
        self.client.next_healthy(from)
    }

    pub(crate) fn register(
        &self,
        channel: usize,
        req: NodeRegisterRequest,
    ) -> impl Future<Output = Result<WriteReply, Status>> + '_ {
        self.call(channel, Request::Register(req))
    }

    pub(crate) fn update_status(
        &self,
        channel: usize,
        req: NodeUpdateStatusRequest,
    ) -> impl Future<Output = Result<NodeUpdateStatusReply, Status>> + '_ {
        self.call(channel, Request::UpdateStatus(req))
    }

    pub(crate) fn get_client_allocs(
        &self,
        channel: usize,
        req: NodeClientAllocsRequest,
    ) -> impl Future<Output = Result<NodeClientAllocsReply, Status>> + '_ {
        self.call(channel, Request::GetClientAllocs(req))
    }

    pub(crate) fn get_allocs(
        &self,
        channel: usize,
        req: AllocsGetRequest,
    ) -> impl Future<Output = Result<AllocationsReply, Status>> + '_ {
        self.call(channel, Request::GetAllocs(req))
    }

    pub(crate) fn update_alloc(
        &self,
        channel: usize,
        req: NodeUpdateAllocRequest,
    ) -> impl Future<Output = Result<WriteReply, Status>> + '_ {
        self.call(channel, Request::UpdateAlloc(req))
    }

    /// One call on `channel`, answered with the reply of type `T`. On the
    /// stream the request goes out now, and the future only waits: a parked
    /// query's future holds no copy of its request (nor, as an async block
    /// would, a second copy of the wait).
    fn call<T: FromReply>(
        &self,
        channel: usize,
        request: Request,
    ) -> impl Future<Output = Result<T, Status>> + '_ {
        let channel = channel % self.streams.len();
        let reply = if self.unary[channel].load(Ordering::Relaxed) {
            // Boxed: tonic's call future is kilobytes, and inline it would
            // size every call, the parked queries on the stream too.
            Either::Left(Box::pin(self.call_alone(channel, request)))
        } else {
            Either::Right(self.call_on_stream(channel, request))
        };
        reply.map(|reply| {
            T::from_reply(reply?).ok_or_else(|| {
                Status::internal("the server answered a call with another method's reply")
            })
        })
    }

    fn call_on_stream(
        &self,
        channel: usize,
        request: Request,
    ) -> impl Future<Output = Result<Reply, Status>> + '_ {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let call = NodeCall {
            ticket,
            request: Some(request),
        };
        let answer = self.stream(channel).call(ticket, call);
        answer.map(move |answer| match answer {
            Ok(NodeAnswer {
                reply: Some(Reply::Refused(refusal)),
                ..
            }) => Err(refusal.into()),
            Ok(NodeAnswer {
                reply: Some(reply), ..
            }) => Ok(reply),
            Ok(NodeAnswer { reply: None, .. }) => {
                Err(Status::internal("the server answered a call with no reply"))
            }
            Err(status) if status.code() == Code::Unimplemented => {
                self.unary[channel].store(true, Ordering::Relaxed);
                tracing::info!(
                    channel,
                    "the server has no call stream; one call per request"
                );
                Err(Status::unavailable(
                    "the server has no call stream; the call goes again on its own",
                ))
            }
            Err(status) => {
                // Not the server's answer: the stream broke or never
                // opened (the connection was lost, or the server stopped
                // answering). New calls pass this channel over a while.
                self.client.note_lost(channel);
                Err(status)
            }
        })
    }

    /// The call of its own, for a server without the stream.
    async fn call_alone(&self, channel: usize, request: Request) -> Result<Reply, Status> {
        let mut c = self.client.nodes_on(channel);
        Ok(match request {
            Request::Register(r) => Reply::Written(c.register(r).await?.into_inner()),
            Request::UpdateStatus(r) => Reply::UpdateStatus(c.update_status(r).await?.into_inner()),
            Request::GetClientAllocs(r) => {
                Reply::GetClientAllocs(c.get_client_allocs(r).await?.into_inner())
            }
            Request::GetAllocs(r) => Reply::GetAllocs(c.get_allocs(r).await?.into_inner()),
            Request::UpdateAlloc(r) => Reply::Written(c.update_alloc(r).await?.into_inner()),
        })
    }

    /// `channel`'s open stream, opened now if there is none or the last one
    /// ended.
    fn stream(&self, channel: usize) -> Arc<NodeStream> {
        let mut slot = stampede_proto::lock(&self.streams[channel]);
        if let Some(open) = slot.as_ref().filter(|s| s.is_open()) {
            return open.clone();
        }
        let mut client = self.client.nodes_on(channel);
        let open = CallStream::open("the node call stream", |requests| async move {
            client.call_stream(requests).await
        });
        *slot = Some(open.clone());
        open
    }
}
