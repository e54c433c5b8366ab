//! Raft RPC to the other servers, over tonic: one long-lived channel per peer,
//! shared by replication and by writes forwarded to the leader.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed,
    StreamingError, Unreachable,
};
use openraft::network::snapshot_transport::{Chunked, SnapshotTransport};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend};
use serde::{de::DeserializeOwned, Serialize};
use stampede_proto::raft_service_client::RaftServiceClient;
use stampede_proto::RaftPayload;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::Streaming;

use crate::raft::metrics::Metrics;
use crate::raft::{NodeId, TypeConfig, APPEND_BUDGET_BYTES};

/// How long to wait for a TCP connection to a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The slowest a peer is assumed to take a message's bytes in (the link
/// and the follower's write): an AppendEntries' timeout grows by its size
/// at this rate, so a large one is not given up on (and sent again, and
/// again) within the heartbeat-sized timeout that suits an empty one.
pub const PEER_BYTES_PER_SECOND_FLOOR: u64 = 2 * 1024 * 1024;

/// The longest an AppendEntries is given, in heartbeat intervals: under the
/// 16 that openraft waits at most (our patch of its replication,
/// vendor/openraft/PATCHES.md), so that this timeout, which names the
/// message's size, is the one that fires.
const APPEND_TIMEOUT_CAP: u32 = 15;

/// HTTP/2 flow-control window of raft connections, per stream and per
/// connection: a large AppendEntries (a plan piece of up to 512 KiB, an
/// entry batch of up to 4 MiB) goes in one flight instead of waiting for
/// the receiver's window updates, each a scheduling delay on a busy machine.
pub const RAFT_H2_WINDOW: u32 = 8 * 1024 * 1024;

/// The timeout of an AppendEntries of `bytes`: openraft's `base` (the
/// heartbeat interval) and the time its bytes take at
/// [`PEER_BYTES_PER_SECOND_FLOOR`], at most [`APPEND_TIMEOUT_CAP`] bases.
fn sized_ttl(base: Duration, bytes: usize) -> Duration {
    let sized = base + Duration::from_secs_f64(bytes as f64 / PEER_BYTES_PER_SECOND_FLOOR as f64);
    sized.min(base * APPEND_TIMEOUT_CAP)
}

/// How many of `entries` fit in `budget` bytes; at least one, so that any
/// single entry, however large, is sent.
fn fitting<T: Serialize>(entries: &[T], budget: u64) -> usize {
    // One entry always goes: no need to walk it for its size.
    if entries.len() <= 1 {
        return entries.len();
    }
    let mut used = 0;
    for (i, e) in entries.iter().enumerate() {
        used += bincode::serialized_size(e).unwrap_or(u64::MAX / 2);
        if used > budget {
            return i.max(1);
        }
    }
    entries.len()
}

/// The first byte a raft connection sends, before HTTP/2's preface (which
/// starts with `P`; a TLS hello starts with 0x16): the server's accept loop
/// reads it and serves that connection on raft's own threads, so
/// AppendEntries and votes never wait for the control plane's.
pub const RAFT_CONNECTION_MARKER: u8 = 0;

/// Channels to peers, created on first use and kept for the server's life.
/// A channel's connection tasks run on the runtime that first asks for it, so
/// raft's network (on the raft runtime) and forwarded writes (on the control
/// plane's) each hold their own `PeerChannels`.
#[derive(Clone, Default)]
pub struct PeerChannels {
    channels: Arc<Mutex<HashMap<NodeId, Channel>>>,
    /// Addresses to dial instead of the membership's (`--peer-via`).
    via: Arc<HashMap<NodeId, String>>,
    /// Whether connections open with [`RAFT_CONNECTION_MARKER`].
    raft: bool,
    /// This server's certificate, presented to peers; `None` with `--insecure`.
    tls: Option<ClientTlsConfig>,
}

impl PeerChannels {
    /// Channels for forwarded writes and leader-only calls.
    pub fn new(via: HashMap<NodeId, String>, tls: Option<ClientTlsConfig>) -> Self {
        Self {
            channels: Default::default(),
            via: Arc::new(via),
            raft: false,
            tls,
        }
    }

    /// Channels for raft's own RPCs, served on the peers' raft threads.
    pub fn for_raft(via: HashMap<NodeId, String>, tls: Option<ClientTlsConfig>) -> Self {
        Self {
            raft: true,
            ..Self::new(via, tls)
        }
    }

    /// The channel to server `id`, whose membership address is `addr`.
    pub fn get(&self, id: NodeId, addr: &str) -> Channel {
        let addr = self.via.get(&id).map_or(addr, String::as_str).to_string();
        let mut map = stampede_proto::lock(&self.channels);
        map.entry(id)
            .or_insert_with(|| {
                let scheme = if self.tls.is_some() { "https" } else { "http" };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
                    .expect("peer addresses are validated socket addresses");
                if let Some(tls) = &self.tls {
                    endpoint = endpoint
                        .tls_config(tls.clone())
                        .expect("the TLS material was checked at start-up");
                }
                let endpoint = endpoint
                    .initial_stream_window_size(RAFT_H2_WINDOW)
                    .initial_connection_window_size(RAFT_H2_WINDOW)
                    .connect_timeout(CONNECT_TIMEOUT)
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(10));
                if self.raft {
                    endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
                        connect_marked(addr.clone())
                    }))
                } else {
                    endpoint.connect_lazy()
                }
            })
            .clone()
    }

    pub fn raft_client(&self, id: NodeId, addr: &str) -> RaftServiceClient<Channel> {
        stampede_proto::sized!(RaftServiceClient::new(self.get(id, addr)))
    }
}

/// Connects to a peer and sends the raft marker first.
async fn connect_marked(
    addr: String,
) -> std::io::Result<hyper_util::rt::TokioIo<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    let connect = tokio::net::TcpStream::connect(&addr);
    let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connecting to {addr} took over {CONNECT_TIMEOUT:?}"),
            )
        })??;
    stream.set_nodelay(true)?;
    stream.write_all(&[RAFT_CONNECTION_MARKER]).await?;
    Ok(hyper_util::rt::TokioIo::new(stream))
}

pub struct NetworkFactory {
    pub channels: PeerChannels,
    pub metrics: Arc<Metrics>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerConnection {
        PeerConnection {
            target,
            client: self.channels.raft_client(target, &node.addr),
            metrics: self.metrics.clone(),
            appends: None,
            unary_appends: false,
        }
    }
}

pub struct PeerConnection {
    target: NodeId,
    client: RaftServiceClient<Channel>,
    metrics: Arc<Metrics>,
    /// The open AppendEntries stream to this peer. Each call takes it and
    /// puts it back only once its answer came, so a call abandoned midway
    /// (timed out, or dropped by openraft) closes the stream instead of
    /// leaving its late answer for the next call to read.
    appends: Option<AppendStream>,
    /// The peer does not serve the stream (a build from before it): one
    /// call per AppendEntries, as before.
    unary_appends: bool,
}

/// One long-lived `AppendEntriesStream` call: requests go in, answers come
/// back in the same order, one at a time.
struct AppendStream {
    requests: mpsc::Sender<RaftPayload>,
    /// Never locked (`get_mut` on the owned value): the mutex only makes
    /// the connection `Sync`, as openraft requires, which tonic's decoder
    /// is not.
    answers: Mutex<Streaming<RaftPayload>>,
}

/// Observes how long an AppendEntries took when dropped, so that calls
/// openraft abandons at its timeout count too.
struct AppendTimer(std::time::Instant, Arc<Metrics>);

impl Drop for AppendTimer {
    fn drop(&mut self) {
        self.1
            .append_rpc_seconds
            .observe(self.0.elapsed().as_secs_f64());
    }
}

#[derive(Clone, Copy)]
enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &mut self,
        method: Method,
        req: &Req,
        ttl: Duration,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload = RaftPayload {
            data: bincode::serialize(req).map_err(|e| RPCError::Network(NetworkError::new(&*e)))?,
        };
        let ttl = match method {
            Method::AppendEntries => sized_ttl(ttl, payload.data.len()),
            _ => ttl,
        };
        let reply = match tokio::time::timeout(ttl, self.exchange(method, payload)).await {
            Err(_) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {ttl:?}"),
                );
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
            Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
                return Err(RPCError::Unreachable(Unreachable::new(&status)));
            }
            Ok(Err(status)) => return Err(RPCError::Network(NetworkError::new(&status))),
            Ok(Ok(reply)) => reply,
        };
        let result: Result<Resp, RaftError<NodeId, E>> = bincode::deserialize(&reply.data)
            .map_err(|e| RPCError::Network(NetworkError::new(&*e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// Sends one raft message and returns the peer's answer.
    async fn exchange(
        &mut self,
        method: Method,
        payload: RaftPayload,
    ) -> Result<RaftPayload, tonic::Status> {
        if matches!(method, Method::AppendEntries) && !self.unary_appends {
            return self.append_streamed(payload).await;
        }
        let mut client = self.client.clone();
        let reply = match method {
            Method::AppendEntries => client.append_entries(payload).await,
            Method::Vote => client.vote(payload).await,
            Method::InstallSnapshot => client.install_snapshot(payload).await,
        };
        reply.map(tonic::Response::into_inner)
    }

    /// One AppendEntries on the open stream, opening it first if need be.
    async fn append_streamed(
        &mut self,
        payload: RaftPayload,
    ) -> Result<RaftPayload, tonic::Status> {
        let closed = || tonic::Status::unavailable("the AppendEntries stream to the peer closed");
        let mut stream = match self.appends.take() {
            Some(stream) => {
                stream.requests.send(payload).await.map_err(|_| closed())?;
                stream
            }
            None => {
                // The first request goes with the call that opens the
                // stream, not a round trip after it. A copy is kept for a
                // peer without the stream, which refuses it unread.
                let (requests, pending) = mpsc::channel(1);
                requests.try_send(payload.clone()).map_err(|_| closed())?;
                let opened = self
                    .client
                    .clone()
                    .append_entries_stream(ReceiverStream::new(pending))
                    .await;
                match opened {
                    Ok(answers) => AppendStream {
                        requests,
                        answers: Mutex::new(answers.into_inner()),
                    },
                    Err(status) if status.code() == tonic::Code::Unimplemented => {
                        tracing::info!(
                            peer = self.target,
                            "the peer has no AppendEntries stream; one call per message"
                        );
                        self.unary_appends = true;
                        let reply = self.client.clone().append_entries(payload).await?;
                        return Ok(reply.into_inner());
                    }
                    Err(status) => return Err(status),
                }
            }
        };
        let answers = stream
            .answers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let answer = answers.message().await?.ok_or_else(closed)?;
        self.appends = Some(stream);
        Ok(answer)
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        let _timer = AppendTimer(std::time::Instant::now(), self.metrics.clone());
        let keep = fitting(&rpc.entries, APPEND_BUDGET_BYTES);
        if keep == rpc.entries.len() {
            return self
                .call(Method::AppendEntries, &rpc, option.hard_ttl())
                .await;
        }
        rpc.entries.truncate(keep);
        let last = rpc.entries.last().map(|e| e.log_id);
        let reply = self
            .call(Method::AppendEntries, &rpc, option.hard_ttl())
            .await?;
        Ok(match reply {
            AppendEntriesResponse::Success => AppendEntriesResponse::PartialSuccess(last),
            other => other,
        })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(Method::InstallSnapshot, &rpc, option.hard_ttl())
            .await
    }

    /// openraft's own chunked send, timed from the first chunk to the
    /// follower's answer that it installed the snapshot, and its index
    /// held in the log meanwhile: both size the catch-up window
    /// (`raft::catch_up`).
    async fn full_snapshot(
        &mut self,
        vote: openraft::Vote<NodeId>,
        snapshot: openraft::Snapshot<TypeConfig>,
        cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let index = snapshot.meta.last_log_id.map_or(0, |l| l.index);
        let send = self.metrics.snapshot_sending(index);
        let answer = Chunked::send_snapshot(self, vote, snapshot, cancel, option).await?;
        // A follower with a newer vote refused it.
        if answer.vote == vote {
            send.installed();
        }
        Ok(answer)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(Method::Vote, &rpc, option.hard_ttl()).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::raft::wire::stand_in::StandIn;

    /// A connection to a fresh stand-in peer on 127.0.0.1 that serves the
    /// stream or not, and the count of its one-message calls.
    async fn connect(streams: bool) -> (PeerConnection, Arc<AtomicUsize>) {
        let (peer, addr) = StandIn::serve(streams).await;
        let mut factory = NetworkFactory {
            channels: PeerChannels::new(HashMap::new(), None),
            metrics: Arc::new(Metrics::default()),
        };
        (
            factory.new_client(2, &BasicNode::new(addr)).await,
            peer.append_calls,
        )
    }

    fn msg(data: &[u8]) -> RaftPayload {
        RaftPayload {
            data: data.to_vec(),
        }
    }

    #[test]
    fn a_larger_append_is_given_longer_up_to_a_cap() {
        let base = Duration::from_millis(200);
        assert_eq!(sized_ttl(base, 0), base);
        let half_mib = 512 * 1024;
        assert_eq!(sized_ttl(base, half_mib), Duration::from_millis(450));
        assert_eq!(sized_ttl(base, 64 << 20), base * APPEND_TIMEOUT_CAP);
    }

    #[tokio::test]
    async fn an_abandoned_append_never_answers_the_next_one() {
        let (mut conn, unary_calls) = connect(true).await;
        let first = conn.exchange(Method::AppendEntries, msg(b"one")).await;
        assert_eq!(first.unwrap().data, b"one");
        assert!(conn.appends.is_some(), "the stream stays open");
        let slow = conn.exchange(Method::AppendEntries, msg(b"slow"));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), slow)
                .await
                .is_err(),
            "the slow answer is not awaited"
        );
        assert!(
            conn.appends.is_none(),
            "the abandoned call closed the stream"
        );
        for data in [&b"two"[..], b"three"] {
            let answer = conn.exchange(Method::AppendEntries, msg(data)).await;
            assert_eq!(answer.unwrap().data, data, "each call gets its own answer");
        }
        assert_eq!(unary_calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_peer_without_the_stream_gets_one_call_per_append() {
        let (mut conn, unary_calls) = connect(false).await;
        for data in [&b"one"[..], b"two"] {
            let answer = conn.exchange(Method::AppendEntries, msg(data)).await;
            assert_eq!(answer.unwrap().data, data);
        }
        assert_eq!(unary_calls.load(Ordering::SeqCst), 2);
        assert!(conn.unary_appends && conn.appends.is_none());
    }

    #[test]
    fn a_batch_is_cut_at_the_byte_budget_but_never_empty() {
        let entries = vec![vec![0u8; 100]; 10];
        // bincode writes a u64 length before each vector's bytes.
        assert_eq!(fitting(&entries, 10_000), 10);
        assert_eq!(fitting(&entries, 330), 3);
        assert_eq!(
            fitting(&entries, 10),
            1,
            "one entry goes even when it alone is too big"
        );
        assert_eq!(fitting::<Vec<u8>>(&[], 10), 0);
    }
}
