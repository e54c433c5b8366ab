//! A client of the whole cluster: it holds a channel to every server it is
//! given and, while the cluster elects a leader or a server is down, tries the
//! next one with a short backoff until its retry budget runs out. Any server
//! takes any call (followers forward writes), so no leader tracking is needed.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::liveness;
use crate::security::Security;

use crate::deployment_service_client::DeploymentServiceClient;
use crate::eval_service_client::EvalServiceClient;
use crate::job_service_client::JobServiceClient;
use crate::node_service_client::NodeServiceClient;
use crate::{Job, JobRegisterReply, JobRegisterRequest, Node, NodeGetRequest, NodeRegisterRequest};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no server addresses given")]
    NoServers,
    #[error("{0:?} is not a server address (HOST:PORT)")]
    BadAddress(String),
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("--token: not a valid header value (printable ASCII only)")]
    BadToken,
    #[error("{}", .0.message())]
    Status(Box<Status>),
}

impl ClientError {
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Status(s) => Some(s.code()),
            _ => None,
        }
    }
}

/// How long calls keep retrying by default: longer than an election.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(15);

/// How long one attempt may take before the call is tried on the next
/// server: a server that was paused or cut off from the others accepts the
/// connection and never answers. Blocking queries that wait longer set
/// their own with [`ClusterClient::with_attempt_timeout`].
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often every connection to a server is pinged (HTTP/2 PING), busy or
/// idle, and how long a ping may go unanswered before the connection counts
/// as dead and every call on it fails `Unavailable`. A server that was
/// paused, or whose host froze, keeps its sockets open and answers nothing:
/// without the ping a call on it waits out its whole attempt timeout, and
/// a parked query (a node's watch for allocations) its whole wait, long
/// after the others elected a new leader. A node finds its paused server
/// 1-1.5 s after the pause, a little after raft's new leader (about 1 s).
/// Pinging every 0.25 s with 0.5 s to answer found it within 0.75 s and
/// brought a pause's recovery from 4 s to 2 s, but a server registering
/// 250,000 nodes (`fleet-250k`) did not answer in time: connections were
/// dropped one after another, nodes' calls failed by the hundred thousand,
/// and the servers held two elections. A pause is found sooner by the
/// liveness echo ([`ClusterClient::with_liveness`]); the ping still finds
/// a process that runs but whose runtime answers nothing.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_millis(500);
/// See [`KEEPALIVE_INTERVAL`].
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a new connection may take, the TLS handshake included. A
/// paused server's kernel still accepts connections on its listening
/// socket, so only a bound on the handshake finds it; with tonic's own
/// connector the timeout covers the TCP connect alone, and a call that a
/// node sent on a new connection to a paused server waited until the
/// server resumed. 1 s, ample for a handshake on a live server (a few
/// milliseconds); a debug build's handshake, cryptography unoptimised, has
/// taken over 1 s on a loaded machine, so there it is 3 s. Each second
/// counts: calls queued on a channel that cannot connect fail one per
/// connect attempt (see [`QUARANTINE`]).
pub const CONNECT_TIMEOUT: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(3)
} else {
    Duration::from_secs(1)
};

/// The TCP connector every channel dials with: given to tonic as a custom
/// connector, which tonic wraps (TLS and all) in the connect timeout.
fn tcp_connector() -> hyper_util::client::legacy::connect::HttpConnector {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http
}

/// Longest pause between attempts: short, so a caller notices a new leader
/// within a fraction of an election.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Adds the ACL token to every call, as `authorization: Bearer TOKEN`.
#[derive(Clone)]
pub struct Authorization(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Authorization {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// What the service clients of a [`ClusterClient`] run on: a channel to one
/// server, with the token added.
pub type Transport = InterceptedService<Channel, Authorization>;

#[derive(Clone)]
pub struct ClusterClient {
    /// The servers as given; channel `i` goes to server `i % servers.len()`.
    servers: std::sync::Arc<Vec<String>>,
    channels: std::sync::Arc<Vec<Channel>>,
    auth: Authorization,
    next: std::sync::Arc<AtomicUsize>,
    /// Which channels lost their connection lately.
    health: std::sync::Arc<Health>,
    /// The channel every call goes on (one attempt of `attempts`), if set.
    pin: Option<usize>,
    retry_for: Duration,
    attempt_timeout: Duration,
}

/// How long a channel whose call failed in a way worth another server (its
/// connection lost, no answer in an attempt's time, `Unavailable`) is
/// passed over by new calls while another is there, at the least: after
/// it, the channel is taken again only once a probe of its own has been
/// answered (see [`PROBE_EVERY`]).
/// A paused server's kernel still accepts connections, so every call sent
/// its way waits for a connect timeout; and tonic fails the calls queued on
/// a channel that cannot connect one per connect attempt, so a busy caller's
/// calls drained off a paused server one per connect timeout. Nomad's client moves
/// a server that failed an RPC to the back of its list in the same way.
pub const QUARANTINE: Duration = Duration::from_secs(3);

/// How often a passed-over channel is probed: a cheap local read
/// (`NodeService.Get` of no node), answered by any live server that is in
/// touch with the others. Without the probe the channel was taken again
/// when its quarantine ran out, whether or not its server answered: a
/// server paused for 10 s was tried every 3 s, and the calls that a busy
/// caller queued on it each time waited for its connect attempts to fail
/// one by one, up to the pause's end (loadgen's writes and reads, 4-5 s).
pub const PROBE_EVERY: Duration = Duration::from_millis(500);

/// What a caller hooks on a channel whose server went silent (see
/// [`ClusterClient::on_silent`]).
type SilentHook = Box<dyn Fn(usize) + Send + Sync>;

/// When each channel last lost its connection, and whether it waits for a
/// probe's answer.
struct Health {
    epoch: Instant,
    /// Milliseconds from `epoch` to the last failure, plus one (0: none).
    failed_ms: Vec<std::sync::atomic::AtomicU64>,
    /// Passed over until a probe is answered (a probe task runs for it).
    suspect: Vec<AtomicBool>,
    /// Woken when the channel's server stops answering its liveness echo:
    /// the attempts waiting on it give up at once.
    silenced: Vec<tokio::sync::Notify>,
    /// Called with the channel when its server stops answering the echo.
    on_silent: std::sync::Mutex<Vec<SilentHook>>,
    /// Servers whose liveness echo was heard: only those are watched.
    echo_heard: Vec<AtomicBool>,
}

impl Health {
    fn new(n: usize) -> Self {
        Self {
            epoch: Instant::now(),
            failed_ms: (0..n).map(|_| Default::default()).collect(),
            suspect: (0..n).map(|_| Default::default()).collect(),
            silenced: (0..n).map(|_| Default::default()).collect(),
            on_silent: Default::default(),
            echo_heard: (0..n).map(|_| Default::default()).collect(),
        }
    }

    fn failed(&self, i: usize) {
        let ms = self.epoch.elapsed().as_millis() as u64 + 1;
        self.failed_ms[i].store(ms, Ordering::Relaxed);
    }

    /// Within [`QUARANTINE`] of the channel's last failure.
    fn quarantined(&self, i: usize) -> bool {
        match self.failed_ms[i].load(Ordering::Relaxed) {
            0 => false,
            at => self.epoch.elapsed().as_millis() as u64 + 1 < at + QUARANTINE.as_millis() as u64,
        }
    }

    fn failed_lately(&self, i: usize) -> bool {
        self.quarantined(i) || self.suspect[i].load(Ordering::Relaxed)
    }
}

/// Probes channel `i` every [`PROBE_EVERY`] until, its quarantine over, a
/// probe is answered; then new calls take it again. Ends too when every
/// client that shared `health` is gone.
async fn probe(channel: Channel, auth: Authorization, health: std::sync::Arc<Health>, i: usize) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        if std::sync::Arc::strong_count(&health) == 1 {
            return;
        }
        if health.quarantined(i) {
            continue;
        }
        let mut nodes = NodeServiceClient::with_interceptor(channel.clone(), auth.clone());
        let ask = nodes.get(NodeGetRequest {
            node_id: "connection-probe".into(),
        });
        let answered = match tokio::time::timeout(CONNECT_TIMEOUT + PROBE_EVERY, ask).await {
            Ok(Ok(_)) => true,
            // Not found, or not allowed: the server answered.
            Ok(Err(s)) => !retryable(&s),
            Err(_) => false,
        };
        if answered && !health.quarantined(i) {
            tracing::debug!(channel = i, "probe answered: the channel is taken again");
            health.suspect[i].store(false, Ordering::Relaxed);
            return;
        }
    }
}

impl ClusterClient {
    /// Channels connect lazily, so this works with servers still starting.
    /// Call it inside a tokio runtime: the lazy channels spawn their
    /// connection tasks on it (outside one, tonic panics with "no reactor running").
    /// `security` is what the cluster asks of its callers: a certificate
    /// and a token, or nothing for an `--insecure` cluster.
    pub fn new<S: AsRef<str>>(addrs: &[S], security: &Security) -> Result<Self, ClientError> {
        Self::with_connections(addrs, 1, security)
    }

    /// `per_server` HTTP/2 connections to every server, interleaved so that
    /// channel `i` and `i + 1` go to different servers: many callers (such as
    /// simulated nodes) share a handful of sockets and spread over the cluster.
    pub fn with_connections<S: AsRef<str>>(
        addrs: &[S],
        per_server: usize,
        security: &Security,
    ) -> Result<Self, ClientError> {
        if addrs.is_empty() {
            return Err(ClientError::NoServers);
        }
        let tls = security.tls.as_ref().map(|m| m.client_config());
        let channels = (0..per_server.max(1))
            .flat_map(|_| addrs.iter())
            .map(|a| {
                let a = a.as_ref().trim();
                let host = a.split_once("://").map_or(a, |(_, rest)| rest);
                let uri = format!("{}://{host}", security.scheme());
                let mut endpoint = Endpoint::from_shared(uri)
                    .map_err(|_| ClientError::BadAddress(a.to_string()))?;
                if let Some(tls) = &tls {
                    endpoint = endpoint
                        .tls_config(tls.clone())
                        .map_err(|e| ClientError::Tls(e.to_string()))?;
                }
                Ok(endpoint
                    .connect_timeout(CONNECT_TIMEOUT)
                    .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
                    .keep_alive_timeout(KEEPALIVE_TIMEOUT)
                    .keep_alive_while_idle(true)
                    .connect_with_connector_lazy(tcp_connector()))
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        let auth = match security.bearer() {
            Some(b) => Some(b.parse().map_err(|_| ClientError::BadToken)?),
            None => None,
        };
        let channels_len = channels.len();
        Ok(Self {
            servers: std::sync::Arc::new(addrs.iter().map(|a| a.as_ref().to_string()).collect()),
            channels: std::sync::Arc::new(channels),
            auth: Authorization(auth),
            next: Default::default(),
            health: std::sync::Arc::new(Health::new(channels_len)),
            pin: None,
            retry_for: DEFAULT_RETRY_FOR,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
        })
    }

    pub fn with_retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = retry_for;
        self
    }

    /// How long one attempt of [`retrying`](Self::retrying) may take; a
    /// blocking query gives its own wait plus a margin.
    pub fn with_attempt_timeout(mut self, attempt_timeout: Duration) -> Self {
        self.attempt_timeout = attempt_timeout;
        self
    }

    /// A node-service client on the next server in turn.
    pub fn nodes(&self) -> NodeServiceClient<Transport> {
        crate::sized!(NodeServiceClient::with_interceptor(
            self.next_channel(),
            self.auth.clone()
        ))
    }

    /// A job-service client on the next server in turn.
    pub fn jobs(&self) -> JobServiceClient<Transport> {
        crate::sized!(JobServiceClient::with_interceptor(
            self.next_channel(),
            self.auth.clone()
        ))
    }

    /// An eval-service client on the next server in turn.
    pub fn evals(&self) -> EvalServiceClient<Transport> {
        crate::sized!(EvalServiceClient::with_interceptor(
            self.next_channel(),
            self.auth.clone()
        ))
    }

    /// A deployment-service client on the next server in turn.
    pub fn deployments(&self) -> DeploymentServiceClient<Transport> {
        crate::sized!(DeploymentServiceClient::with_interceptor(
            self.next_channel(),
            self.auth.clone()
        ))
    }

    /// A node-service client on channel `i` (modulo the channel count); with
    /// one connection per server, channel `i` is server `i` of the list.
    pub fn nodes_on(&self, i: usize) -> NodeServiceClient<Transport> {
        crate::sized!(NodeServiceClient::with_interceptor(
            self.channels[i % self.channels.len()].clone(),
            self.auth.clone()
        ))
    }

    /// The same client with its own turn, starting at channel `first`
    /// (modulo the channel count): a caller's calls start at a server of its
    /// choosing, and retries go round from there.
    pub fn starting_at(&self, first: usize) -> Self {
        Self {
            next: std::sync::Arc::new(AtomicUsize::new(first % self.channels.len())),
            ..self.clone()
        }
    }

    /// How many servers this client was given.
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// How many channels (servers times connections) this client holds.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    fn next_channel(&self) -> Channel {
        let i = self.pin.unwrap_or_else(|| self.pick());
        self.channels[i].clone()
    }

    /// The next channel in turn that has not failed lately; if all have,
    /// the next whose server at least answered (it refused `Unavailable`,
    /// as every server does while the others elect a leader) rather than
    /// one that lost its connection or did not answer; else the next in turn.
    fn pick(&self) -> usize {
        let n = self.channels.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        self.first_usable((0..n).map(|k| (start + k) % n))
            .unwrap_or(start % n)
    }

    /// The channel after `from` that has not failed lately, chosen as
    /// [`pick`](Self::pick) chooses (the one after `from` if none is
    /// usable): where a caller that keeps its own channel, such as a
    /// simulated node, moves after a failure.
    pub fn next_healthy(&self, from: usize) -> usize {
        let n = self.channels.len();
        self.first_usable((1..=n).map(|k| (from + k) % n))
            .unwrap_or((from + 1) % n)
    }

    /// Of `order`, the first channel that has not failed lately, else the
    /// first whose server is not suspected of being unreachable.
    fn first_usable(&self, order: impl Iterator<Item = usize> + Clone) -> Option<usize> {
        let h = &self.health;
        order.clone().find(|&i| !h.failed_lately(i)).or_else(|| {
            order
                .into_iter()
                .find(|&i| !h.suspect[i].load(Ordering::Relaxed))
        })
    }

    /// Whether new calls pass channel `i` (modulo the channel count) over
    /// now: it failed lately, or its server has not answered a probe since.
    pub fn passed_over(&self, i: usize) -> bool {
        self.health.failed_lately(i % self.channels.len())
    }

    /// Notes that channel `i` failed a call (its connection lost, no answer
    /// in time): new calls pass it over for [`QUARANTINE`], and after it
    /// until a probe of the channel is answered.
    pub fn note_lost(&self, i: usize) {
        self.mark_failed(i % self.channels.len());
    }

    fn mark_failed(&self, i: usize) {
        self.health.failed(i);
        // Outside a runtime nothing can probe: the quarantine alone holds.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        suspect(&self.health, &self.channels, &self.auth, i, &runtime);
    }

    /// Watches every server's liveness echo ([`crate::liveness`]) from a
    /// thread of its own, for as long as any clone of this client lives: a
    /// server that stops answering it (paused, its host frozen) is found
    /// within [`liveness::SILENT_AFTER`], not at the next unanswered HTTP/2
    /// ping (1-1.5 s). Its channels are then passed over as after a lost
    /// connection, the attempts waiting on them fail `Unavailable` and are
    /// tried on another server, and the [`on_silent`](Self::on_silent)
    /// hooks run. Call it once, inside a tokio runtime (outside one it does
    /// nothing): the probes of the channels it passes over run there.
    pub fn with_liveness(self) -> Self {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self;
        };
        let health = std::sync::Arc::downgrade(&self.health);
        let (channels, auth, servers) = (
            self.channels.clone(),
            self.auth.clone(),
            self.servers.clone(),
        );
        let watching = liveness::watch(self.servers.to_vec(), move |event| {
            let Some(health) = health.upgrade() else {
                return false;
            };
            if let liveness::Event::Heard(s) = event {
                health.echo_heard[s].store(true, Ordering::Relaxed);
            }
            if let liveness::Event::Back(s, silent_for) = event {
                tracing::warn!(
                    server = %servers[s],
                    "liveness echo heard again after {} ms of silence",
                    silent_for.as_millis()
                );
            }
            if let liveness::Event::Silent(s) = event {
                tracing::warn!(
                    server = %servers[s],
                    "no liveness echo for {:?} while the others answer: its calls fail and it is passed over",
                    liveness::SILENT_AFTER
                );
                for i in (s..channels.len()).step_by(servers.len()) {
                    health.failed(i);
                    suspect(&health, &channels, &auth, i, &runtime);
                    // The hooks before the calls parked there are woken: a
                    // caller sees their effects once its call has failed.
                    for hook in crate::lock(&health.on_silent).iter() {
                        hook(i);
                    }
                    health.silenced[i].notify_waiters();
                }
            }
            true
        });
        if let Err(e) = watching {
            tracing::warn!("cannot start the liveness watch: {e}; servers are not watched");
        }
        self
    }

    /// Whether the liveness watch has heard server `s`'s echo (the `s`-th
    /// address given), and so watches it: a server without the echo (an
    /// older build, its UDP port taken or filtered) is never called silent.
    pub fn watches(&self, s: usize) -> bool {
        self.health
            .echo_heard
            .get(s)
            .is_some_and(|h| h.load(Ordering::Relaxed))
    }

    /// Calls `hook` with the channel whenever a channel's server stops
    /// answering the liveness echo ([`with_liveness`](Self::with_liveness)):
    /// for a caller that waits on the channel outside this client's calls,
    /// such as a stream of calls.
    pub fn on_silent(&self, hook: impl Fn(usize) + Send + Sync + 'static) {
        crate::lock(&self.health.on_silent).push(Box::new(hook));
    }

    /// This client with every call on channel `i`.
    fn pinned(&self, i: usize) -> Self {
        Self {
            pin: Some(i),
            ..self.clone()
        }
    }

    /// Runs `call` on one server after another until it succeeds, fails with
    /// an answer that retrying cannot change, or the retry budget (from the
    /// first failure) is spent.
    /// An attempt that takes longer than the attempt timeout is abandoned and
    /// tried on the next server.
    pub async fn retrying<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: FnMut(ClusterClient) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.attempts(call, false).await
    }

    /// As [`ClusterClient::retrying`], for a write that is not idempotent
    /// (a deregistration, a purge). An attempt whose answer was lost (a
    /// timeout, a server gone) may still have taken effect, so a later
    /// attempt's refusal may be that write's own effect: a purge retried
    /// after its first attempt purged the job finds no job. Such a refusal
    /// is answered `Unavailable` (the outcome is unknown), never as the
    /// definite error it would otherwise be. A malformed request
    /// (`InvalidArgument`) is refused whatever the state, and stays so.
    pub async fn writing<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: FnMut(ClusterClient) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.attempts(call, true).await
    }

    async fn attempts<T, F, Fut>(&self, mut call: F, write: bool) -> Result<T, ClientError>
    where
        F: FnMut(ClusterClient) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        // The budget runs from the first failure, not from the first attempt:
        // a blocking query that waited its full time and then lost its server
        // still gets the whole budget to find another.
        let mut deadline = None;
        let mut pause = Duration::from_millis(20);
        // Why an earlier attempt of a write may have taken effect.
        let mut in_doubt: Option<String> = None;
        loop {
            // One channel per attempt, so that a lost connection is noted
            // against the server it was to.
            let i = self.pin.unwrap_or_else(|| self.pick());
            // Made before the attempt starts, so a silence during it counts.
            let silenced = self.health.silenced[i].notified();
            let attempt = tokio::time::timeout(self.attempt_timeout, call(self.pinned(i)));
            let status = tokio::select! {
                answer = attempt => match answer {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(s)) => s,
                    Err(_) => Status::deadline_exceeded(format!(
                        "no answer within {:?}",
                        self.attempt_timeout
                    )),
                },
                () = silenced => silent_status(&self.servers[i % self.servers.len()]),
            };
            // Any failure worth another server moves this one to the back
            // for a while, as a Nomad client does after a failed RPC: a
            // server that cannot answer now (no leader yet, cut off) or
            // that lost its connection is not tried again at once.
            if retryable(&status) {
                tracing::debug!(
                    channel = i,
                    "call failed: {:?} {}",
                    status.code(),
                    status.message()
                );
            }
            if answered_unavailable(&status) {
                self.health.failed(i);
            } else if retryable(&status) {
                self.mark_failed(i);
            }
            if write && retryable(&status) {
                in_doubt.get_or_insert_with(|| status.message().to_string());
            } else if let Some(earlier) = in_doubt.as_deref() {
                if status.code() != Code::InvalidArgument {
                    return Err(ClientError::Status(Box::new(Status::unavailable(format!(
                        "the write may have taken effect: an earlier attempt got no answer \
                             ({earlier}), and a retry was refused ({}); read the state before \
                             writing again",
                        status.message()
                    )))));
                }
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + self.retry_for);
            if !retryable(&status) || Instant::now() >= deadline {
                return Err(ClientError::Status(Box::new(status)));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
    }

    /// Registers (or updates) a job: its evaluation, raft index and job
    /// modify index.
    pub async fn register_job(&self, job: Job) -> Result<JobRegisterReply, ClientError> {
        self.writing(|c| {
            let job = job.clone();
            async move {
                let reply = c
                    .jobs()
                    .register(JobRegisterRequest { job: Some(job) })
                    .await?;
                Ok(reply.into_inner())
            }
        })
        .await
    }

    /// Registers (or updates) a node with its secret (see
    /// [`crate::node_secret`]); returns the raft index it was applied at.
    pub async fn register_node(&self, node: Node, secret_id: &str) -> Result<u64, ClientError> {
        self.retrying(|c| {
            let req = NodeRegisterRequest {
                node: Some(node.clone()),
                secret_id: secret_id.to_string(),
            };
            async move {
                let reply = c.nodes().register(req).await?;
                Ok(reply.into_inner().index)
            }
        })
        .await
    }
}

/// Puts channel `i` under suspicion, passed over until a probe of it is
/// answered, and starts that probe on `runtime` unless one runs.
fn suspect(
    health: &std::sync::Arc<Health>,
    channels: &std::sync::Arc<Vec<Channel>>,
    auth: &Authorization,
    i: usize,
    runtime: &tokio::runtime::Handle,
) {
    if !health.suspect[i].swap(true, Ordering::Relaxed) {
        runtime.spawn(probe(channels[i].clone(), auth.clone(), health.clone(), i));
    }
}

/// The status of a call given up because its server went silent: this
/// side's, not the server's answer (it carries a source), so the call goes
/// to another server and, for a write, is in doubt.
fn silent_status(server: &str) -> Status {
    let mut s = Status::unavailable(format!(
        "server {server} stopped answering its liveness echo ({:?}): paused or frozen",
        liveness::SILENT_AFTER
    ));
    s.set_source(std::sync::Arc::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no liveness echo",
    )));
    s
}

/// The server itself refused the call `Unavailable` (no leader yet, out of
/// touch): it is up and answering, so it is passed over for the quarantine
/// only, not held out until a probe; a connection lost or an attempt
/// unanswered is the transport's status (or loadgen's timeout) instead.
fn answered_unavailable(s: &Status) -> bool {
    s.code() == Code::Unavailable && std::error::Error::source(s).is_none()
}

/// Answers that another server, or the same one a moment later, may not
/// give: the codes of a server that cannot answer now, and any status that
/// this side's transport made rather than a server's answer (a reset
/// connection, an HTTP/2 session torn down when a partition heals, which
/// tonic reports as `Internal`). Those carry the transport's error as their
/// source; a status decoded from a server's answer never does.
pub fn retryable(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded
    ) || std::error::Error::source(s).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_made_by_the_transport_is_retried_and_a_servers_answer_is_not() {
        // What tonic makes of a torn-down HTTP/2 session: Internal, with the
        // transport's error as its source.
        let mut torn = Status::internal("h2 protocol error: connection reset");
        torn.set_source(std::sync::Arc::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset",
        )));
        assert!(retryable(&torn));
        // A server's own answers.
        assert!(!retryable(&Status::internal("a bug on the server")));
        assert!(!retryable(&Status::invalid_argument("job.id: is required")));
        assert!(retryable(&Status::unavailable(
            "no raft leader is elected yet"
        )));
    }

    #[tokio::test]
    async fn a_server_whose_connection_was_lost_is_passed_over_until_all_were() {
        let addrs = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"];
        let client = ClusterClient::new(&addrs, &Security::insecure()).unwrap();
        let picks = |n: usize| (0..n).map(|_| client.pick()).collect::<Vec<_>>();
        assert_eq!(picks(3), [0, 1, 2]);
        client.note_lost(1);
        assert_eq!(picks(4), [0, 2, 2, 0], "server 1 passed over");
        assert_eq!(client.next_healthy(0), 2);
        assert_eq!(client.next_healthy(2), 0);
        client.note_lost(0);
        client.note_lost(2);
        assert_eq!(picks(3).len(), 3, "all lost: in turn, as before");
        assert_eq!(client.next_healthy(0), 1);

        // An attempt that failed in a way worth another server is noted
        // against its server.
        let client = ClusterClient::new(&addrs, &Security::insecure())
            .unwrap()
            .with_retry_for(Duration::from_millis(100));
        let tried = std::sync::Mutex::new(Vec::new());
        let answer = client
            .retrying(|c| {
                let i = c.pin.expect("each attempt is on one channel");
                tried.lock().unwrap().push(i);
                async move {
                    match i {
                        0 => {
                            let mut s = Status::unavailable("connection refused");
                            s.set_source(std::sync::Arc::new(std::io::Error::other("refused")));
                            Err(s)
                        }
                        1 => Err(Status::unavailable("no raft leader is elected yet")),
                        _ => Ok(i),
                    }
                }
            })
            .await;
        assert_eq!(answer.unwrap(), 2);
        assert_eq!(*tried.lock().unwrap(), [0, 1, 2]);
        assert!(client.health.failed_lately(0), "the connection lost");
        assert!(
            client.health.failed_lately(1),
            "a server that cannot answer now"
        );
        assert!(!client.health.failed_lately(2));
    }

    #[tokio::test]
    async fn a_passed_over_server_is_taken_again_only_once_it_answers_a_probe() {
        // A paused server: its kernel accepts connections, nothing answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client =
            ClusterClient::new(&[addr.as_str(), "127.0.0.1:1"], &Security::insecure()).unwrap();
        client.note_lost(0);
        // Its quarantine ran out long ago, and it has not answered a probe.
        tokio::time::sleep(QUARANTINE + CONNECT_TIMEOUT + 4 * PROBE_EVERY).await;
        assert!(client.health.failed_lately(0), "taken again unanswered");
        assert_eq!(client.pick(), 1);
        assert_eq!(client.next_healthy(1), 1);
        // It resumes; any gRPC answer will do.
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_routes(tonic::service::Routes::default())
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let deadline = Instant::now() + 3 * (CONNECT_TIMEOUT + PROBE_EVERY);
        while client.health.failed_lately(0) {
            assert!(
                Instant::now() < deadline,
                "never taken again after it answered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(client.next_healthy(1), 0);
    }

    #[tokio::test]
    async fn when_every_server_failed_one_that_answered_is_taken_before_one_unreachable() {
        let addrs = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"];
        let client = ClusterClient::new(&addrs, &Security::insecure())
            .unwrap()
            .with_retry_for(Duration::from_millis(100));
        // Server 0's connection is lost (nothing listens there, so its
        // probe is never answered); servers 1 and 2 answer that no leader
        // is elected yet, as every live server does during an election.
        let _ = client
            .retrying(|c| async move {
                match c.pin.unwrap() {
                    0 => {
                        let mut s = Status::unavailable("connection refused");
                        s.set_source(std::sync::Arc::new(std::io::Error::other("refused")));
                        Err::<(), _>(s)
                    }
                    _ => Err(Status::unavailable("no raft leader is elected yet")),
                }
            })
            .await;
        assert!((0..3).all(|i| client.health.failed_lately(i)));
        assert!(client.health.suspect[0].load(Ordering::Relaxed));
        assert!(!client.health.suspect[1].load(Ordering::Relaxed));
        assert!(!client.health.suspect[2].load(Ordering::Relaxed));
        let picks: Vec<usize> = (0..6).map(|_| client.pick()).collect();
        assert!(
            !picks.contains(&0),
            "the unreachable server taken: {picks:?}"
        );
        assert_eq!(client.next_healthy(0), 1);
        assert_eq!(client.next_healthy(1), 2);
        assert_eq!(client.next_healthy(2), 1);
    }

    #[tokio::test]
    async fn a_long_attempt_that_fails_still_gets_the_whole_retry_budget() {
        // A blocking query waits longer than the retry budget, then its
        // server goes away: the call must still try the next server.
        let client = ClusterClient::new(&["127.0.0.1:1"], &Security::insecure())
            .unwrap()
            .with_retry_for(Duration::from_millis(50));
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let answer = client
            .retrying(|_| {
                let n = attempts.fetch_add(1, Ordering::Relaxed);
                async move {
                    if n == 0 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Err(Status::unavailable("the server went away mid-query"))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(answer.unwrap(), 1);
    }

    /// Runs `answers` as one attempt each (an attempt of `None` outlasts
    /// the attempt timeout) through `writing` or `retrying`.
    async fn scripted(write: bool, answers: Vec<Option<Status>>) -> Result<u32, ClientError> {
        let client = ClusterClient::new(&["127.0.0.1:1"], &Security::insecure())
            .unwrap()
            .with_attempt_timeout(Duration::from_millis(50));
        let answers = std::sync::Mutex::new(answers.into_iter());
        let call = |_| {
            let next = answers.lock().unwrap().next().expect("no more attempts");
            async move {
                match next {
                    Some(status) => Err(status),
                    None => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        Ok(0)
                    }
                }
            }
        };
        match write {
            true => client.writing(call).await,
            false => client.retrying(call).await,
        }
    }

    #[tokio::test]
    async fn a_writes_refusal_after_an_attempt_that_may_have_taken_effect_is_not_definite() {
        let gone = || Some(Status::not_found("job_id: no job \"web\" is registered"));
        for first in [
            Some(Status::unavailable(
                "the leader died while it held the write",
            )),
            None,
        ] {
            let err = scripted(true, vec![first.clone(), gone()])
                .await
                .unwrap_err();
            assert_eq!(err.code(), Some(Code::Unavailable), "{err}");
            assert!(err.to_string().contains("may have taken effect"), "{err}");
            assert!(err.to_string().contains("no job"), "{err}");
            // A read is retried as before: its NotFound is an answer.
            let err = scripted(false, vec![first, gone()]).await.unwrap_err();
            assert_eq!(err.code(), Some(Code::NotFound), "{err}");
        }
        // The first attempt's refusal is definite: nothing was in doubt.
        let err = scripted(true, vec![gone()]).await.unwrap_err();
        assert_eq!(err.code(), Some(Code::NotFound), "{err}");
        // A malformed request is refused whatever happened before.
        let bad = Some(Status::invalid_argument("job.id: is required"));
        let err = scripted(true, vec![None, bad]).await.unwrap_err();
        assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    }
}
