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
//! [`SILENT_AFTER`] passes the server over and fails its calls on it
//! (`ClusterClient::with_liveness`).
//!
//! The wire: a probe is exactly [`PROBE_LEN`] bytes, [`MAGIC`] then a
//! sequence number and the server's place in the caller's list, and the
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

/// A probe of server `server` with sequence number `seq`.
fn probe(seq: u64, server: u32) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[..4].copy_from_slice(&MAGIC);
    p[4..12].copy_from_slice(&seq.to_le_bytes());
    p[12..].copy_from_slice(&server.to_le_bytes());
    p
}

/// Which server an echo is from, if it is one of ours.
fn echoed(bytes: &[u8], servers: usize) -> Option<usize> {
    if bytes.len() != PROBE_LEN || bytes[..4] != MAGIC {
        return None;
    }
    let server = u32::from_le_bytes(bytes[12..].try_into().ok()?) as usize;
    (server < servers).then_some(server)
}

/// What the watch tells its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Server `i` of the list answered for the first time: from now on it
    /// can be called silent.
    Heard(usize),
    /// Server `i` of the list, heard before, has not answered for
    /// [`SILENT_AFTER`].
    Silent(usize),
    /// Server `i` answers again after being silent.
    Back(usize),
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

fn watching<F: FnMut(Event) -> bool>(addrs: &[String], mut on_event: F) {
    let resolved: Vec<Option<SocketAddr>> = addrs
        .iter()
        .map(|a| {
            let a = a.trim();
            let host = a.split_once("://").map_or(a, |(_, rest)| rest);
            host.to_socket_addrs().ok().and_then(|mut i| i.next())
        })
        .collect();
    let bind: SocketAddr = match resolved.iter().flatten().next() {
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
    let n = addrs.len();
    // Since when each server owes an answer (the first probe after its
    // last echo), whether it was ever heard, and whether it is silent now.
    let mut owed_since: Vec<Option<Instant>> = vec![None; n];
    let mut heard = vec![false; n];
    let mut announced = vec![false; n];
    let mut silent = vec![false; n];
    let mut seq = 0u64;
    let mut next_round = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        let now = Instant::now();
        if now >= next_round {
            // Echoes already here count before anything is called silent:
            // a watcher that was itself held up finds them waiting.
            let _ = socket.set_nonblocking(true);
            while let Ok((len, from)) = socket.recv_from(&mut buf) {
                take_echo(&buf[..len], from, &resolved, &mut owed_since, &mut heard);
            }
            let _ = socket.set_nonblocking(false);
            for i in 0..n {
                let late = owed_since[i].is_some_and(|t| t.elapsed() >= SILENT_AFTER);
                let event = if heard[i] && !announced[i] {
                    announced[i] = true;
                    Some(Event::Heard(i))
                } else if heard[i] && late && !silent[i] {
                    silent[i] = true;
                    Some(Event::Silent(i))
                } else if silent[i] && owed_since[i].is_none() {
                    silent[i] = false;
                    Some(Event::Back(i))
                } else {
                    None
                };
                if let Some(event) = event {
                    if !on_event(event) {
                        return;
                    }
                }
            }
            for (i, to) in resolved.iter().enumerate() {
                let Some(to) = to else { continue };
                seq += 1;
                if socket.send_to(&probe(seq, i as u32), to).is_ok() {
                    owed_since[i].get_or_insert(now);
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
            take_echo(&buf[..len], from, &resolved, &mut owed_since, &mut heard);
        }
    }
}

/// An echo from server `i` clears what it owed.
fn take_echo(
    bytes: &[u8],
    from: SocketAddr,
    resolved: &[Option<SocketAddr>],
    owed_since: &mut [Option<Instant>],
    heard: &mut [bool],
) {
    if let Some(i) = echoed(bytes, resolved.len()) {
        if resolved[i] == Some(from) {
            owed_since[i] = None;
            heard[i] = true;
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
        assert_eq!(echoed(&p, 3), Some(2));
        assert_eq!(echoed(&p, 2), None, "a server past the list");
        assert_eq!(echoed(&p[..15], 3), None);
        let mut wrong = p;
        wrong[0] = b'x';
        assert_eq!(echoed(&wrong, 3), None);
    }

    /// A server whose echo stops (its thread stopped, as a paused process's
    /// would) is called silent within about `SILENT_AFTER`, once; a server
    /// never heard (no echo on its port) never is.
    #[test]
    fn a_server_that_stops_answering_is_called_silent_and_one_never_heard_is_not() {
        let stop = Arc::new(AtomicBool::new(false));
        let echo_socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let echo_addr = echo_socket.local_addr().unwrap();
        let echo = {
            let stop = stop.clone();
            std::thread::spawn(move || serve_echo(echo_socket, stop))
        };
        // A UDP port with nothing answering on it.
        let mute = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addrs = vec![
            echo_addr.to_string(),
            mute.local_addr().unwrap().to_string(),
        ];
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        let watcher = watch(addrs, move |e| {
            if !matches!(e, Event::Tick | Event::Heard(_)) {
                let _ = tx.send((e, started.elapsed()));
            }
            started.elapsed() < Duration::from_secs(5)
        })
        .unwrap();
        // Heard for a while: nothing is called silent.
        std::thread::sleep(Duration::from_millis(600));
        assert!(rx.try_recv().is_err(), "no event while the echo answers");
        stop.store(true, Ordering::Relaxed);
        echo.join().unwrap();
        let stopped = started.elapsed();
        let (event, at) = rx.recv_timeout(Duration::from_secs(3)).unwrap();
        assert_eq!(event, Event::Silent(0));
        assert!(at >= stopped, "not before the echo stopped");
        watcher.join().unwrap();
        assert!(rx.try_recv().is_err(), "silent once; the mute port never");
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
