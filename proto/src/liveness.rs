//! Whether a server's process runs, asked over UDP on the port of its gRPC
//! listener (UDP and TCP ports are apart), answered by a thread of its own.
//!
//! A server that was paused (SIGSTOP) or whose host froze keeps its sockets
//! open and answers nothing: its callers found it only when an HTTP/2 ping
//! went unanswered, 1-1.5 s after the pause, after raft had elected a new
//! leader (about 1 s). The pings cannot be faster: they are answered on the
//! server's busy runtime, and at 0.25 s with 0.5 s to answer a server
//! registering 250,000 nodes missed them and its connections were dropped
//! one after another (`client::KEEPALIVE_INTERVAL`). The echo here is
//! answered by a plain thread that does nothing else, so it is late only
//! when the process does not run at all; a caller that hears nothing for
//! [`SILENT_AFTER`] while another server answers passes the server over
//! and fails its calls on it (`ClusterClient::with_liveness`). Every
//! server late together is the caller's machine or network held up: on a
//! saturated host, loopback packets wait behind the load for all alike.
//!
//! The wire: a probe is exactly [`PROBE_LEN`] bytes, [`MAGIC`] then when it
//! was sent (the caller's clock) and the server's place in the caller's list, and the
//! echo is the same bytes back: an echo is never larger than what asked for
//! it, so the port cannot amplify a forged sender's traffic, and the server
//! answers at most [`ECHO_MAX_PER_SECOND`]. Anything else is dropped.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a probe starts with.
pub const MAGIC: [u8; 4] = *b"stlv";
/// A probe's length, and its echo's.
pub const PROBE_LEN: usize = 16;
/// How often a caller probes each server.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);
/// How long a probe may go unanswered before its server counts as silent:
/// four probes, far above a live thread's answer (well under a millisecond
/// on loopback, tens of milliseconds on a saturated machine), and under
/// raft's election (about 1 s), so that callers have moved before the new
/// leader is there.
pub const SILENT_AFTER: Duration = Duration::from_millis(400);
/// The most echoes a server sends in a second; probes past it are dropped.
/// A caller sends ten a second per server, so this is a thousand callers.
pub const ECHO_MAX_PER_SECOND: u32 = 10_000;

/// Answers probes on `socket` until `stop` turns true (looked at least every
/// 200 ms). Runs on a thread of its own.
pub fn serve_echo(socket: UdpSocket, stop: Arc<AtomicBool>) {
    if let Err(e) = socket.set_read_timeout(Some(Duration::from_millis(200))) {
        tracing::warn!("liveness echo: {e}; not answering probes");
        return;
    }
    let mut buf = [0u8; 64];
    let mut window = Instant::now();
    let mut sent = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        if n != PROBE_LEN || buf[..4] != MAGIC {
            continue;
        }
        if window.elapsed() >= Duration::from_secs(1) {
            window = Instant::now();
            sent = 0;
        }
        if sent >= ECHO_MAX_PER_SECOND {
            continue;
        }
        sent += 1;
        let _ = socket.send_to(&buf[..PROBE_LEN], from);
    }
}

/// Binds the echo on `addr`'s UDP port and answers there on a thread of its
/// own until `stop` turns true; the thread's handle, or why there is none
/// (the port taken): the server then runs without it, and its callers,
/// never having heard it, never count it silent.
pub fn start_echo(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let socket = UdpSocket::bind(addr)?;
    std::thread::Builder::new()
        .name("liveness-echo".into())
        .spawn(move || serve_echo(socket, stop))
}

/// A probe of server `server`, stamped with when it was sent (nanoseconds
/// from the watcher's epoch): its echo says which probe it answers.
fn probe(sent_ns: u64, server: u32) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[..4].copy_from_slice(&MAGIC);
    p[4..12].copy_from_slice(&sent_ns.to_le_bytes());
    p[12..].copy_from_slice(&server.to_le_bytes());
    p
}

/// Which server an echo is from and its probe's stamp, if it is one of
/// ours.
fn echoed(bytes: &[u8], servers: usize) -> Option<(usize, u64)> {
    if bytes.len() != PROBE_LEN || bytes[..4] != MAGIC {
        return None;
    }
    let sent_ns = u64::from_le_bytes(bytes[4..12].try_into().ok()?);
    let server = u32::from_le_bytes(bytes[12..].try_into().ok()?) as usize;
    (server < servers).then_some((server, sent_ns))
}

/// What the watch tells its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Server `i` of the list answered for the first time: from now on it
    /// can be called silent.
    Heard(usize),
    /// Server `i` of the list, heard before, has not answered for
    /// [`SILENT_AFTER`] while another server answered later probes.
    Silent(usize),
    /// Server `i` answers again, after being silent this long.
    Back(usize, Duration),
    /// A probe round went out; nothing changed.
    Tick,
}

/// Probes every server of `addrs` (`HOST:PORT`, an `http(s)://` prefix
/// allowed) from a thread of its own and calls `on_event` with what changes,
/// and after each round; the thread ends when `on_event` answers false. A
/// server whose address does not resolve, or that never answers (no echo
/// there), is never called silent. Returns the thread's handle.
pub fn watch<F>(addrs: Vec<String>, on_event: F) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnMut(Event) -> bool + Send + 'static,
{
    std::thread::Builder::new()
        .name("liveness-watch".into())
        .spawn(move || watching(&addrs, on_event))
}

/// One watched server.
#[derive(Default)]
struct Watched {
    addr: Option<SocketAddr>,
    /// When the first probe it has not answered since its last echo went.
    owed_since: Option<Instant>,
    /// When the latest probe it answered went.
    answered: Option<Instant>,
    heard: bool,
    announced: bool,
    silent_since: Option<Instant>,
}

/// The servers watched, and the epoch their probes are stamped from.
struct Watch {
    epoch: Instant,
    servers: Vec<Watched>,
}

impl Watch {
    fn take_echo(&mut self, bytes: &[u8], from: SocketAddr) {
        let Some((i, sent_ns)) = echoed(bytes, self.servers.len()) else {
            return;
        };
        let w = &mut self.servers[i];
        if w.addr != Some(from) {
            return;
        }
        let sent = self.epoch + Duration::from_nanos(sent_ns);
        w.owed_since = None;
        w.heard = true;
        w.answered = w.answered.max(Some(sent));
    }

    /// Whether server `i` is silent now: heard before, it has owed an
    /// answer for [`SILENT_AFTER`], and another server heard before has
    /// answered a probe sent after the one it owes (or it is the only one
    /// heard). All servers late together is this machine or its network
    /// held up (every server on one saturated host, the loopback's packets
    /// queued behind the load), not one server stopped.
    fn silent(&self, i: usize) -> bool {
        let w = &self.servers[i];
        let Some(owed) = w
            .owed_since
            .filter(|t| w.heard && t.elapsed() >= SILENT_AFTER)
        else {
            return false;
        };
        let mut others = self
            .servers
            .iter()
            .enumerate()
            .filter(|(j, o)| *j != i && o.heard)
            .peekable();
        others.peek().is_none() || others.any(|(_, o)| o.answered.is_some_and(|a| a > owed))
    }

    /// What changed for server `i`, if anything.
    fn event(&mut self, i: usize) -> Option<Event> {
        let silent = self.silent(i);
        let w = &mut self.servers[i];
        if w.heard && !w.announced {
            w.announced = true;
            return Some(Event::Heard(i));
        }
        match w.silent_since {
            None if silent => {
                w.silent_since = Some(Instant::now());
                Some(Event::Silent(i))
            }
            Some(since) if w.owed_since.is_none() => {
                w.silent_since = None;
                Some(Event::Back(i, since.elapsed()))
            }
            _ => None,
        }
    }
}

fn watching<F: FnMut(Event) -> bool>(addrs: &[String], mut on_event: F) {
    let mut watch = Watch {
        epoch: Instant::now(),
        servers: addrs
            .iter()
            .map(|a| {
                let a = a.trim();
                let host = a.split_once("://").map_or(a, |(_, rest)| rest);
                Watched {
                    addr: host.to_socket_addrs().ok().and_then(|mut i| i.next()),
                    ..Default::default()
                }
            })
            .collect(),
    };
    let bind: SocketAddr = match watch.servers.iter().find_map(|w| w.addr) {
        Some(SocketAddr::V6(_)) => "[::]:0".parse().expect("an address"),
        _ => "0.0.0.0:0".parse().expect("an address"),
    };
    let socket = match UdpSocket::bind(bind) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("liveness probes: {e}; servers are not watched");
            return;
        }
    };
    let mut next_round = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        let now = Instant::now();
        if now >= next_round {
            // Echoes already here count before anything is called silent:
            // a watcher that was itself held up finds them waiting.
            let _ = socket.set_nonblocking(true);
            while let Ok((len, from)) = socket.recv_from(&mut buf) {
                watch.take_echo(&buf[..len], from);
            }
            let _ = socket.set_nonblocking(false);
            for i in 0..watch.servers.len() {
                if let Some(event) = watch.event(i) {
                    if !on_event(event) {
                        return;
                    }
                }
            }
            let sent_ns = now.duration_since(watch.epoch).as_nanos() as u64;
            for (i, w) in watch.servers.iter_mut().enumerate() {
                let Some(to) = w.addr else { continue };
                if socket.send_to(&probe(sent_ns, i as u32), to).is_ok() {
                    w.owed_since.get_or_insert(now);
                }
            }
            if !on_event(Event::Tick) {
                return;
            }
            next_round = (next_round + PROBE_EVERY).max(now + PROBE_EVERY / 2);
        }
        let wait = next_round.saturating_duration_since(Instant::now());
        let _ = socket.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        if let Ok((len, from)) = socket.recv_from(&mut buf) {
            watch.take_echo(&buf[..len], from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn only_a_probe_of_the_exact_shape_is_taken_as_an_echo() {
        let p = probe(7, 2);
        assert_eq!(echoed(&p, 3), Some((2, 7)));
        assert_eq!(echoed(&p, 2), None, "a server past the list");
        assert_eq!(echoed(&p[..15], 3), None);
        let mut wrong = p;
        wrong[0] = b'x';
        assert_eq!(echoed(&wrong, 3), None);
    }

    /// An echo on a free port: its address, and what stops it.
    fn echo() -> (String, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
        let stop = Arc::new(AtomicBool::new(false));
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap().to_string();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || serve_echo(socket, stop))
        };
        (addr, stop, thread)
    }

    /// Watches `addrs` for `for_how_long`; the events other than ticks, and
    /// when each came.
    fn watched(
        addrs: Vec<String>,
        for_how_long: Duration,
    ) -> (
        mpsc::Receiver<(Event, Duration)>,
        std::thread::JoinHandle<()>,
    ) {
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        let watcher = watch(addrs, move |e| {
            if e != Event::Tick {
                let _ = tx.send((e, started.elapsed()));
            }
            started.elapsed() < for_how_long
        })
        .unwrap();
        (rx, watcher)
    }

    /// A server whose echo stops (its thread stopped, as a paused process's
    /// would) while another answers is called silent within about
    /// `SILENT_AFTER`, once; a server never heard (no echo on its port)
    /// never is.
    #[test]
    fn a_server_that_stops_answering_is_called_silent_and_one_never_heard_is_not() {
        let (a, stop_a, thread_a) = echo();
        let (b, stop_b, thread_b) = echo();
        // A UDP port with nothing answering on it.
        let mute = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mute = mute.local_addr().unwrap().to_string();
        let (events, watcher) = watched(vec![a, b, mute], Duration::from_secs(4));
        let heard: Vec<Event> = (0..2).map(|_| events.recv().unwrap().0).collect();
        assert!(heard.contains(&Event::Heard(0)) && heard.contains(&Event::Heard(1)));
        stop_a.store(true, Ordering::Relaxed);
        thread_a.join().unwrap();
        let (event, _) = events.recv_timeout(Duration::from_secs(3)).unwrap();
        assert_eq!(event, Event::Silent(0));
        watcher.join().unwrap();
        assert!(
            events.try_recv().is_err(),
            "silent once; the answering one and the mute port never"
        );
        stop_b.store(true, Ordering::Relaxed);
        thread_b.join().unwrap();
    }

    /// Every server late together is the caller's machine or network held
    /// up, not a server stopped: none is called silent.
    #[test]
    fn servers_that_stop_answering_together_are_not_called_silent() {
        let (a, stop_a, thread_a) = echo();
        let (b, stop_b, thread_b) = echo();
        let (events, watcher) = watched(vec![a, b], Duration::from_secs(2));
        for _ in 0..2 {
            assert!(matches!(events.recv().unwrap().0, Event::Heard(_)));
        }
        stop_a.store(true, Ordering::Relaxed);
        stop_b.store(true, Ordering::Relaxed);
        thread_a.join().unwrap();
        thread_b.join().unwrap();
        watcher.join().unwrap();
        let after: Vec<Event> = events.try_iter().map(|e| e.0).collect();
        assert!(after.is_empty(), "{after:?}");
    }

    #[test]
    fn the_echo_answers_a_probe_with_the_same_bytes_and_drops_the_rest() {
        let stop = Arc::new(AtomicBool::new(false));
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let echo = {
            let stop = stop.clone();
            std::thread::spawn(move || serve_echo(socket, stop))
        };
        let caller = UdpSocket::bind("127.0.0.1:0").unwrap();
        caller
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        // Not a probe: a longer datagram, then the wrong magic.
        caller.send_to(&[0u8; 1000], addr).unwrap();
        let mut wrong = probe(1, 0);
        wrong[1] = 0;
        caller.send_to(&wrong, addr).unwrap();
        let p = probe(9, 0);
        caller.send_to(&p, addr).unwrap();
        let mut buf = [0u8; 2048];
        let (n, _) = caller.recv_from(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            &p,
            "only the probe is answered, with its own bytes"
        );
        stop.store(true, Ordering::Relaxed);
        echo.join().unwrap();
    }
}
