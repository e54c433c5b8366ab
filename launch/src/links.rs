//! Peer links: a TCP proxy for every ordered pair of servers, so that a test
//! or a capacity run can cut the network between servers without root.
//!
//! Server A reaches server B (raft RPCs, forwarded writes) through the link
//! A→B, a listener on a free 127.0.0.1 port that forwards to B's `--rpc`
//! address; A learns the link's address from `cluster serve --peer-via`.
//! Clients still dial the servers directly: a partition cuts servers off from
//! each other, not from their clients, as a network partition between
//! server racks would.
//!
//! A cut link behaves like a partitioned network, not like a refused
//! connection: nothing is reset or closed. The proxy stops reading from both
//! sides of every connection of the link, so bytes already sent sit in the
//! kernel's socket buffers and TCP backpressure holds the senders; bytes the
//! proxy had read when the cut came are held in its buffer. New connections
//! are accepted but not forwarded. A heal resumes every held connection where
//! it stopped and forwards the waiting ones.
//!
//! The proxy runs on a runtime of its own (one thread), so that a busy caller
//! (a load generator, say) does not slow the cluster's peer traffic, and so
//! that it works for synchronous callers too.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::server::NodeId;

/// How much one direction of a connection reads at a time: the most a cut
/// can catch in the proxy's own buffer.
const CHUNK: usize = 64 * 1024;

/// What a link has done: for tests and for a report to look at.
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Connections accepted from the dialling server.
    pub accepted: AtomicU64,
    /// Connections accepted while the link was cut and not yet forwarded.
    pub waiting: AtomicU64,
    /// Connections forwarded to the target.
    pub forwarded: AtomicU64,
    /// Bytes the proxy has read but not written because the link is cut.
    pub held_bytes: AtomicU64,
    /// Directions of the link's connections waiting for bytes to read (two
    /// per idle connection while healed; none once a cut has caught them).
    pub reading: AtomicU64,
    /// Bytes delivered, both directions together.
    pub bytes: AtomicU64,
}

/// One direction of the peer network: server `from` dialling server `to`.
#[derive(Debug)]
pub struct Link {
    pub from: NodeId,
    pub to: NodeId,
    /// Where `from` dials `to`: the proxy's listener.
    pub addr: SocketAddr,
    /// `to`'s `--rpc` address.
    pub target: SocketAddr,
    cut: watch::Sender<bool>,
    stats: Arc<LinkStats>,
}

impl Link {
    /// Stops the traffic of the link in both directions (see the module doc).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Resumes the traffic of the link.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }
}

/// A proxy for every ordered pair of a set of servers.
pub struct PeerLinks {
    links: BTreeMap<(NodeId, NodeId), Link>,
    /// Servers partitioned from the others: a link is cut while either end is.
    isolated: std::sync::Mutex<std::collections::BTreeSet<NodeId>>,
    /// Owns the proxy's tasks: shutting it down ends every connection.
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for PeerLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLinks")
            .field("links", &self.links)
            .finish()
    }
}

impl PeerLinks {
    /// A link for every ordered pair of `servers` (id to `--rpc` address),
    /// each listening on a free 127.0.0.1 port, all healed.
    pub fn start(servers: &BTreeMap<NodeId, SocketAddr>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("peer-links")
            .enable_all()
            .build()?;
        let mut links = BTreeMap::new();
        for &from in servers.keys() {
            for (&to, &target) in servers {
                if from == to {
                    continue;
                }
                let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
                listener.set_nonblocking(true)?;
                let addr = listener.local_addr()?;
                let (cut, cut_rx) = watch::channel(false);
                let stats = Arc::new(LinkStats::default());
                let listener = {
                    let _guard = runtime.enter();
                    TcpListener::from_std(listener)?
                };
                runtime.spawn(accept_loop(listener, target, cut_rx, stats.clone()));
                links.insert(
                    (from, to),
                    Link {
                        from,
                        to,
                        addr,
                        target,
                        cut,
                        stats,
                    },
                );
            }
        }
        Ok(Self {
            links,
            isolated: Default::default(),
            runtime: Some(runtime),
        })
    }

    /// The link `from`→`to`, if both are servers of this set.
    pub fn link(&self, from: NodeId, to: NodeId) -> Option<&Link> {
        self.links.get(&(from, to))
    }

    pub fn links(&self) -> impl Iterator<Item = &Link> {
        self.links.values()
    }

    /// `cluster serve --peer-via` for server `from`: `ID=HOST:PORT,...`, the
    /// link to every other server.
    pub fn via_arg(&self, from: NodeId) -> String {
        let parts: Vec<String> = self
            .links
            .values()
            .filter(|l| l.from == from)
            .map(|l| format!("{}={}", l.to, l.addr))
            .collect();
        parts.join(",")
    }

    /// Cuts every link to and from `id`: it is partitioned from the others.
    pub fn isolate(&self, id: NodeId) {
        self.set_isolated(id, true);
    }

    /// Heals every link to and from `id`, except those to another server
    /// that is itself isolated.
    pub fn rejoin(&self, id: NodeId) {
        self.set_isolated(id, false);
    }

    /// Whether `id` is partitioned from the others ([`PeerLinks::isolate`]).
    pub fn is_isolated(&self, id: NodeId) -> bool {
        lock(&self.isolated).contains(&id)
    }

    fn set_isolated(&self, id: NodeId, isolated: bool) {
        let mut set = lock(&self.isolated);
        if isolated {
            set.insert(id);
        } else {
            set.remove(&id);
        }
        for l in self.links.values().filter(|l| l.from == id || l.to == id) {
            if set.contains(&l.from) || set.contains(&l.to) {
                l.cut();
            } else {
                l.heal();
            }
        }
    }
}

/// Takes a lock, even one a panicking thread left poisoned: the set it
/// guards is valid after any single insert or remove.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for PeerLinks {
    fn drop(&mut self) {
        // Dropping a runtime inside another one's task panics; this does not.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Accepts the dialling server's connections and forwards each while the
/// link is healed. The connections are this task's: when it ends (the links
/// shut down), they end with it.
async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    cut: watch::Receiver<bool>,
    stats: Arc<LinkStats>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((inbound, _)) = accepted else { continue };
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                let _ = inbound.set_nodelay(true);
                conns.spawn(forward(inbound, target, cut.clone(), stats.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// One connection: waits while the link is cut, dials the target, then
/// copies both ways until either side closes.
async fn forward(
    inbound: TcpStream,
    target: SocketAddr,
    mut cut: watch::Receiver<bool>,
    stats: Arc<LinkStats>,
) {
    if *cut.borrow() {
        stats.waiting.fetch_add(1, Ordering::Relaxed);
        let healed = cut.wait_for(|c| !*c).await.is_ok();
        stats.waiting.fetch_sub(1, Ordering::Relaxed);
        if !healed {
            return;
        }
    }
    // A target that is down refuses the dial: the dialling server sees its
    // connection close, as it would if it had dialled the target directly.
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    stats.forwarded.fetch_add(1, Ordering::Relaxed);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    tokio::join!(
        pump(in_read, out_write, cut.clone(), &stats),
        pump(out_read, in_write, cut, &stats),
    );
}

/// Copies one direction. While the link is cut it reads nothing, and holds
/// what it had read when the cut came; the kernel's buffers and TCP
/// backpressure hold the rest.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
    stats: &LinkStats,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        if cut.wait_for(|c| !*c).await.is_err() {
            return;
        }
        stats.reading.fetch_add(1, Ordering::Relaxed);
        let read = from.read(&mut buf).await;
        stats.reading.fetch_sub(1, Ordering::Relaxed);
        let n = match read {
            Ok(0) | Err(_) => {
                // The sender is done (or gone): pass the end on.
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if *cut.borrow() {
            stats.held_bytes.fetch_add(n as u64, Ordering::Relaxed);
            let healed = cut.wait_for(|c| !*c).await.is_ok();
            stats.held_bytes.fetch_sub(n as u64, Ordering::Relaxed);
            if !healed {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::time::{Duration, Instant};

    /// Waits (up to 10 s) until `cond` holds.
    fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Reads exactly `n` bytes (blocking, with a deadline for failing).
    fn read_n(s: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0; n];
        s.read_exact(&mut buf).unwrap();
        buf
    }

    /// Nothing is waiting to be read on `s` right now.
    fn nothing_to_read(s: &std::net::TcpStream) -> bool {
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 16];
        let r = (&*s).read(&mut buf);
        s.set_nonblocking(false).unwrap();
        matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock)
    }

    /// Two "servers" (plain listeners) with links between them.
    fn two() -> (PeerLinks, std::net::TcpListener, std::net::TcpListener) {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let servers = BTreeMap::from([(1, a.local_addr().unwrap()), (2, b.local_addr().unwrap())]);
        (PeerLinks::start(&servers).unwrap(), a, b)
    }

    #[test]
    fn a_link_forwards_to_its_target_and_names_itself_in_peer_via() {
        let (links, _a, b) = two();
        let l = links.link(1, 2).unwrap();
        assert_eq!(l.target, b.local_addr().unwrap());
        assert_eq!(links.via_arg(1), format!("2={}", l.addr));
        assert!(links.link(1, 1).is_none());

        let mut client = std::net::TcpStream::connect(l.addr).unwrap();
        let (mut server, _) = b.accept().unwrap();
        client.write_all(b"ping").unwrap();
        assert_eq!(read_n(&mut server, 4), b"ping");
        server.write_all(b"pong").unwrap();
        assert_eq!(read_n(&mut client, 4), b"pong");
    }

    #[test]
    fn a_cut_link_holds_bytes_both_ways_and_a_heal_delivers_them() {
        let (links, _a, b) = two();
        let l = links.link(1, 2).unwrap();
        let mut client = std::net::TcpStream::connect(l.addr).unwrap();
        let (mut server, _) = b.accept().unwrap();
        client.write_all(b"1").unwrap();
        assert_eq!(read_n(&mut server, 1), b"1");
        until("the proxy waits for bytes both ways", || {
            l.stats().reading.load(Ordering::Relaxed) == 2
        });

        links.isolate(2);
        assert!(l.is_cut() && links.is_isolated(2) && !links.is_isolated(1));
        client.write_all(b"request").unwrap();
        server.write_all(b"reply").unwrap();
        // The proxy had a read pending in each direction: it takes what
        // came and holds it. Neither side receives anything.
        until("the proxy holds both sides' bytes", || {
            l.stats().held_bytes.load(Ordering::Relaxed) == 12
        });
        assert_eq!(l.stats().reading.load(Ordering::Relaxed), 0);
        assert!(
            nothing_to_read(&server),
            "a cut link delivered to the target"
        );
        assert!(
            nothing_to_read(&client),
            "a cut link delivered to the dialler"
        );
        // More bytes stay with the kernel: the proxy reads nothing more.
        client.write_all(b"more").unwrap();
        server.write_all(b"again").unwrap();
        assert_eq!(l.stats().held_bytes.load(Ordering::Relaxed), 12);
        assert!(nothing_to_read(&server) && nothing_to_read(&client));

        links.rejoin(2);
        assert!(!links.is_isolated(2));
        assert_eq!(read_n(&mut server, 11), b"requestmore");
        assert_eq!(read_n(&mut client, 10), b"replyagain");
        assert_eq!(l.stats().held_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_link_stays_cut_while_either_end_is_isolated() {
        let servers = (1..=3)
            .map(|id| (id, "127.0.0.1:9".parse().unwrap()))
            .collect();
        let links = PeerLinks::start(&servers).unwrap();
        let cut = |a, b| links.link(a, b).unwrap().is_cut();
        links.isolate(1);
        links.isolate(2);
        assert!(cut(1, 2) && cut(2, 1) && cut(1, 3) && cut(3, 2));
        links.rejoin(1);
        assert!(cut(1, 2) && cut(2, 1) && cut(2, 3), "2 is still cut off");
        assert!(!cut(1, 3) && !cut(3, 1));
        links.rejoin(2);
        assert!(links.links().all(|l| !l.is_cut()));
        assert_eq!(links.links().count(), 6);
    }

    #[test]
    fn a_cut_holds_a_sender_with_backpressure_not_a_reset() {
        let (links, _a, b) = two();
        let l = links.link(1, 2).unwrap();
        let client = std::net::TcpStream::connect(l.addr).unwrap();
        let (mut server, _) = b.accept().unwrap();
        l.cut();
        // Write until the socket buffers are full: the writer is held, not refused.
        client.set_nonblocking(true).unwrap();
        let mut sent = 0usize;
        let chunk = vec![7u8; 64 * 1024];
        loop {
            match (&client).write(&chunk) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("a cut link broke the connection: {e}"),
            }
            assert!(sent < 256 << 20, "nothing held the sender back");
        }
        assert!(nothing_to_read(&server));
        l.heal();
        let got = read_n(&mut server, sent);
        assert!(got.iter().all(|b| *b == 7));
    }

    #[test]
    fn a_connection_made_during_a_cut_waits_for_the_heal() {
        let (links, a, _b) = two();
        let l = links.link(2, 1).unwrap();
        links.isolate(1);
        let mut client = std::net::TcpStream::connect(l.addr).unwrap();
        client.write_all(b"hello").unwrap();
        until("the proxy accepted the connection and holds it", || {
            l.stats().waiting.load(Ordering::Relaxed) == 1
        });
        a.set_nonblocking(true).unwrap();
        assert!(
            matches!(a.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock),
            "a cut link dialled its target"
        );
        assert_eq!(l.stats().forwarded.load(Ordering::Relaxed), 0);
        assert!(
            links.link(1, 2).unwrap().is_cut(),
            "both directions are cut"
        );

        links.rejoin(1);
        a.set_nonblocking(false).unwrap();
        let (mut server, _) = a.accept().unwrap();
        assert_eq!(read_n(&mut server, 5), b"hello");
        assert_eq!(l.stats().waiting.load(Ordering::Relaxed), 0);
        assert_eq!(l.stats().forwarded.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_closed_side_closes_the_other_and_a_dead_target_closes_the_dialler() {
        let (links, a, b) = two();
        let l = links.link(1, 2).unwrap();
        let mut client = std::net::TcpStream::connect(l.addr).unwrap();
        let (server, _) = b.accept().unwrap();
        drop(server);
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(client.read(&mut buf).unwrap(), 0, "the end was passed on");

        // Server 1 is gone: a dial through its link ends at once.
        let to_a = links.link(2, 1).unwrap().addr;
        drop(a);
        let mut client = std::net::TcpStream::connect(to_a).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert!(matches!(client.read(&mut buf), Ok(0) | Err(_)));
    }
}
