//! What no caller may exceed at the edge: connections per client IP and in
//! all, file descriptors kept in reserve for raft's storage, and the
//! timeouts and sizes each connection and request lives within. The
//! defaults and flags are in `server::config` (`cluster serve --help`);
//! docs/security.md lists them under "Limits".

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, IntGaugeVec, Registry};
use stampede_proto::metric_defs::{int_counter_vec, int_gauge_vec};

/// Every limit of the edge, as `cluster serve` was given them.
#[derive(Debug, Clone)]
pub struct EdgeLimits {
    /// Open connections from one client IP address, both ports together.
    pub max_conns_per_ip: usize,
    /// Open connections in all, both ports together.
    pub max_conns: usize,
    /// File descriptors kept free for raft's log, snapshots and peers: no
    /// connection is accepted while fewer are left under RLIMIT_NOFILE.
    pub fd_reserve: usize,
    /// How long a new connection may take over its TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a connection may take to send a request's headers, and how
    /// long one without a client certificate (under TLS) may stay idle.
    pub header_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// HTTP/2 pings this often; a peer that does not answer within
    /// `keepalive_timeout` is closed.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// Concurrent HTTP/2 streams (calls) on one connection.
    pub max_streams: u32,
    /// Largest message of the public and node services (jobs, nodes,
    /// evaluations, deployments).
    pub max_request_bytes: usize,
    /// Longest a unary call may run (above the longest blocking query).
    pub request_timeout: Duration,
}

/// Connections that may be taken from the descriptor reserve at once, on
/// the `--rpc` port, each from a peer's address and only to become another
/// server's: a server short of descriptors must still hear its leader (or
/// it campaigns in vain until they come back) and, as leader, its
/// followers' forwarded writes. One admitted there is closed unless its
/// certificate (or, without TLS, its first byte) shows it is a server's.
pub const PEER_CONNS_IN_RESERVE: usize = 16;

/// Which listener a connection came in on (a label of the gauges).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    Rpc,
    Http,
}

impl Port {
    fn label(self) -> &'static str {
        match self {
            Port::Rpc => "rpc",
            Port::Http => "http",
        }
    }
}

/// Why a connection was refused or closed by the edge.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ConnRefused {
    #[error("{ip} has {limit} connections open, the most one address may (--max-conns-per-ip)")]
    PerIp { ip: IpAddr, limit: usize },
    #[error("{limit} connections are open, the most this server takes (--max-conns)")]
    Total { limit: usize },
    #[error(
        "{open} of {limit} file descriptors are open; the last {reserve} are kept for raft's storage (--fd-reserve)"
    )]
    Descriptors {
        open: usize,
        limit: usize,
        reserve: usize,
    },
    #[error("a raft connection must present a server certificate")]
    RaftNotServer,
}

impl ConnRefused {
    /// The `reason` label of `stampede_connections_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            ConnRefused::PerIp { .. } => "per_ip",
            ConnRefused::Total { .. } => "total",
            ConnRefused::Descriptors { .. } => "descriptors",
            ConnRefused::RaftNotServer => "raft_not_server",
        }
    }
}

const REASONS: [&str; 4] = ["per_ip", "total", "descriptors", "raft_not_server"];

/// Open descriptors against the process's limit, counted at most every
/// [`FdBudget::RECOUNT`] (a count reads `/proc/self/fd`).
struct FdBudget {
    limit: usize,
    reserve: usize,
    counted: Mutex<(Instant, usize)>,
}

impl FdBudget {
    const RECOUNT: Duration = Duration::from_millis(100);

    fn new(reserve: usize) -> Self {
        Self {
            limit: nofile_limit().0 as usize,
            reserve,
            counted: Mutex::new((Instant::now() - Self::RECOUNT * 2, 0)),
        }
    }

    fn check(&self) -> Result<(), ConnRefused> {
        let open = {
            let mut c = stampede_proto::lock(&self.counted);
            if c.0.elapsed() >= Self::RECOUNT {
                *c = (Instant::now(), open_descriptors());
            } else {
                // Between counts, each admitted connection is one more.
                c.1 += 1;
            }
            c.1
        };
        if open + self.reserve >= self.limit {
            return Err(ConnRefused::Descriptors {
                open,
                limit: self.limit,
                reserve: self.reserve,
            });
        }
        Ok(())
    }
}

/// How many descriptors this process has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// RLIMIT_NOFILE: (soft, hard).
pub fn nofile_limit() -> (u64, u64) {
    #![allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return (1024, 1024);
    }
    (l.rlim_cur as u64, l.rlim_max as u64)
}

/// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the soft
/// limit now in force.
pub fn raise_nofile_limit() -> std::io::Result<u64> {
    let (soft, hard) = nofile_limit();
    if soft < hard {
        let l = libc::rlimit {
            rlim_cur: hard as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(nofile_limit().0)
}

/// The connection gauges and counters on the server's registry.
struct ConnMetrics {
    open: IntGaugeVec,
    refused: IntCounterVec,
}

/// Admits connections within the caps; each admitted one holds a [`Permit`]
/// until it closes. Shared by both listeners.
pub struct ConnLimiter {
    limits: EdgeLimits,
    by_ip: Mutex<HashMap<IpAddr, usize>>,
    open: AtomicUsize,
    /// Connections admitted into the descriptor reserve.
    in_reserve: AtomicUsize,
    /// The peers' addresses (their `--peers` names resolved): the only
    /// ones whose connections may enter the reserve.
    peer_ips: RwLock<HashSet<IpAddr>>,
    fds: FdBudget,
    metrics: ConnMetrics,
}

impl ConnLimiter {
    pub fn new(limits: EdgeLimits, registry: &Registry) -> Arc<Self> {
        let metrics = ConnMetrics {
            open: int_gauge_vec(
                registry,
                "stampede_connections_open",
                "Connections open, by listener (rpc or http).",
                "listener",
                &["rpc", "http"],
            ),
            refused: int_counter_vec(
                registry,
                "stampede_connections_refused_total",
                "Connections closed at accept, by reason: per_ip (--max-conns-per-ip), total (--max-conns), descriptors (--fd-reserve), raft_not_server (a raft connection without a server certificate).",
                "reason",
                &REASONS,
            ),
        };
        Arc::new(Self {
            fds: FdBudget::new(limits.fd_reserve),
            limits,
            by_ip: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            in_reserve: AtomicUsize::new(0),
            peer_ips: RwLock::default(),
            metrics,
        })
    }

    pub fn limits(&self) -> &EdgeLimits {
        &self.limits
    }

    /// The addresses the peers connect from, as last resolved.
    pub fn set_peer_ips(&self, ips: HashSet<IpAddr>) {
        *stampede_proto::write(&self.peer_ips) = ips;
    }

    /// A permit for a connection from `ip` on `port`, or why there is none
    /// (counted in `stampede_connections_refused_total`). On the `--rpc`
    /// port a connection may be let into the descriptor reserve, on
    /// condition (see [`Permit::in_reserve`] and [`PEER_CONNS_IN_RESERVE`]).
    pub fn admit(self: &Arc<Self>, ip: IpAddr, port: Port) -> Result<Permit, ConnRefused> {
        let reserve = port == Port::Rpc && stampede_proto::read(&self.peer_ips).contains(&ip);
        let admitted = self.try_admit(ip, reserve);
        match &admitted {
            Ok(_) => self.metrics.open.with_label_values(&[port.label()]).inc(),
            Err(e) => self.refused(e),
        }
        admitted.map(|in_reserve| Permit {
            limiter: self.clone(),
            ip,
            port,
            in_reserve,
        })
    }

    /// Counts a connection the edge closed after accepting it.
    pub fn refused(&self, why: &ConnRefused) {
        self.metrics
            .refused
            .with_label_values(&[why.reason()])
            .inc();
        tracing::debug!("connection refused: {why}");
    }

    /// Admits a connection from `ip` under the caps; `Ok(Some(why))` when
    /// only the descriptors were short and `reserve` let it into the reserve.
    fn try_admit(&self, ip: IpAddr, reserve: bool) -> Result<Option<ConnRefused>, ConnRefused> {
        let mut by_ip = stampede_proto::lock(&self.by_ip);
        let here = by_ip.get(&ip).copied().unwrap_or(0);
        if here >= self.limits.max_conns_per_ip {
            return Err(ConnRefused::PerIp {
                ip,
                limit: self.limits.max_conns_per_ip,
            });
        }
        if self.open.load(Ordering::Relaxed) >= self.limits.max_conns {
            return Err(ConnRefused::Total {
                limit: self.limits.max_conns,
            });
        }
        let in_reserve = match self.fds.check() {
            Ok(()) => None,
            Err(why)
                if reserve && self.in_reserve.load(Ordering::Relaxed) < PEER_CONNS_IN_RESERVE =>
            {
                self.in_reserve.fetch_add(1, Ordering::Relaxed);
                Some(why)
            }
            Err(why) => return Err(why),
        };
        by_ip.insert(ip, here + 1);
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(in_reserve)
    }

    fn release(&self, ip: IpAddr, port: Port, in_reserve: bool) {
        if in_reserve {
            self.in_reserve.fetch_sub(1, Ordering::Relaxed);
        }
        let mut by_ip = stampede_proto::lock(&self.by_ip);
        if let Some(n) = by_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                by_ip.remove(&ip);
            }
        }
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.metrics.open.with_label_values(&[port.label()]).dec();
    }
}

/// One admitted connection's place under the caps, given back on drop.
pub struct Permit {
    limiter: Arc<ConnLimiter>,
    ip: IpAddr,
    port: Port,
    /// Why it is in the descriptor reserve, if it is: it may stay only as
    /// another server's connection.
    in_reserve: Option<ConnRefused>,
}

impl Permit {
    /// Why this connection was let in only into the descriptor reserve
    /// (`None` for one admitted within the budget).
    pub fn in_reserve(&self) -> Option<&ConnRefused> {
        self.in_reserve.as_ref()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let in_reserve = self.in_reserve.is_some();
        self.limiter.release(self.ip, self.port, in_reserve);
    }
}

/// `body`, holding `guard` until the body is done with (dropped).
pub fn held_while<G: Send + Unpin + 'static>(
    body: tonic::body::BoxBody,
    guard: Option<G>,
) -> tonic::body::BoxBody {
    match guard {
        None => body,
        Some(guard) => tonic::body::boxed(Held {
            body,
            _guard: guard,
        }),
    }
}

struct Held<G> {
    body: tonic::body::BoxBody,
    _guard: G,
}

impl<G: Send + Unpin + 'static> hyper::body::Body for Held<G> {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_ip: usize, total: usize) -> EdgeLimits {
        EdgeLimits {
            max_conns_per_ip: per_ip,
            max_conns: total,
            fd_reserve: 0,
            handshake_timeout: Duration::from_secs(1),
            header_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            keepalive_interval: Duration::from_secs(1),
            keepalive_timeout: Duration::from_secs(1),
            max_streams: 1,
            max_request_bytes: 1,
            request_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn caps_connections_per_address_and_in_all_until_they_close() {
        let l = ConnLimiter::new(limits(2, 3), &Registry::new());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = l.admit(a, Port::Rpc).unwrap();
        let _second = l.admit(a, Port::Http).unwrap();
        assert_eq!(
            l.admit(a, Port::Rpc).err(),
            Some(ConnRefused::PerIp { ip: a, limit: 2 })
        );
        let _third = l.admit(b, Port::Rpc).unwrap();
        assert_eq!(
            l.admit(b, Port::Rpc).err(),
            Some(ConnRefused::Total { limit: 3 })
        );
        drop(first);
        assert!(l.admit(a, Port::Rpc).is_ok(), "a closed one makes room");
        assert_eq!(l.metrics.refused.with_label_values(&["per_ip"]).get(), 1);
        assert_eq!(l.metrics.refused.with_label_values(&["total"]).get(), 1);
    }

    #[test]
    fn keeps_descriptors_in_reserve() {
        let mut tight = limits(10, 10);
        tight.fd_reserve = nofile_limit().0 as usize;
        let l = ConnLimiter::new(tight, &Registry::new());
        let refused = l.admit("10.0.0.1".parse().unwrap(), Port::Http).err();
        assert!(
            matches!(refused, Some(ConnRefused::Descriptors { .. })),
            "{refused:?}"
        );
        assert!(refused.unwrap().to_string().contains("--fd-reserve"));
    }

    #[test]
    fn only_a_few_rpc_connections_enter_the_reserve_and_leave_it_on_drop() {
        let mut tight = limits(1_000, 1_000);
        tight.fd_reserve = nofile_limit().0 as usize;
        let l = ConnLimiter::new(tight, &Registry::new());
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(l.admit(ip, Port::Rpc).is_err(), "not from a peer's address");
        l.set_peer_ips(HashSet::from([ip]));
        let held: Vec<Permit> = (0..PEER_CONNS_IN_RESERVE)
            .map(|_| l.admit(ip, Port::Rpc).unwrap())
            .collect();
        assert!(held.iter().all(|p| p.in_reserve().is_some()));
        assert!(matches!(
            l.admit(ip, Port::Rpc).err(),
            Some(ConnRefused::Descriptors { .. })
        ));
        let mut held = held.into_iter();
        drop(held.next());
        assert_eq!(
            l.metrics.refused.with_label_values(&["descriptors"]).get(),
            2
        );
        assert!(
            l.admit(ip, Port::Rpc).unwrap().in_reserve().is_some(),
            "a closed one makes room in the reserve"
        );
        assert!(l.admit(ip, Port::Http).is_err(), "never on the HTTP port");
    }
}
