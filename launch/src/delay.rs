//! A TCP proxy that delays every byte by a fixed time in each direction:
//! link latency in user space, for machines whose kernel has no `netem`
//! qdisc (`tc qdisc add ... netem delay` fails with "Specified qdisc kind is
//! unknown"). `scripts/multihost.sh` puts one in front of each server, one
//! port for clients and one for peers (`cluster serve --peer-via`).
//!
//! Each direction of a connection is a reader and a writer: the reader
//! stamps every chunk it reads with the time it may leave, the writer sleeps
//! until then and writes it, so the link adds the delay without lowering the
//! throughput (chunks in flight overlap, as packets on a long wire do). A
//! bounded queue between them keeps TCP's backpressure. What it cannot
//! model: the TCP handshake is not delayed, nor is loss (TCP would hide it
//! as retransmission delay anyway), and tokio's timer has millisecond
//! resolution, so a delay is rounded up to the next millisecond tick.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Most bytes one read takes.
const CHUNK: usize = 64 * 1024;
/// Chunks in flight per direction before the reader waits for the writer.
const IN_FLIGHT: usize = 256;

/// One delayed link: connections accepted at `listen` are forwarded to
/// `target`, each byte `delay` later, both ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayLink {
    pub listen: String,
    pub target: String,
    pub delay: Duration,
}

impl std::str::FromStr for DelayLink {
    type Err = String;

    /// Parses `LISTEN=TARGET@DELAY`, e.g. `10.77.0.11:4747=127.0.0.1:4647@1ms`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{s:?} is not LISTEN=TARGET@DELAY ({why})");
        let (listen, rest) = s.split_once('=').ok_or_else(|| bad("no '='"))?;
        let (target, delay) = rest.rsplit_once('@').ok_or_else(|| bad("no '@'"))?;
        for (what, addr) in [("LISTEN", listen), ("TARGET", target)] {
            let port = addr.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
            if !matches!(port, Some(Ok(_))) || addr.starts_with(':') {
                return Err(bad(&format!("{what} {addr:?} is not HOST:PORT")));
            }
        }
        let delay = parse_delay(delay).map_err(|e| bad(&e))?;
        Ok(DelayLink {
            listen: listen.to_string(),
            target: target.to_string(),
            delay,
        })
    }
}

/// `1ms`, `500us`, `0.5ms`, `0`: at most 10 s.
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("delay {s:?} is not a number and a unit (ms, us, s)"))?;
    let seconds = match unit {
        "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "" if value == 0.0 => 0.0,
        _ => return Err(format!("delay {s:?}: the unit must be s, ms or us")),
    };
    if !(0.0..=10.0).contains(&seconds) {
        return Err(format!("delay {s:?} is above 10s"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Serves one link until the listener fails; the connections are spawned
/// on the current runtime.
pub async fn serve(listener: TcpListener, target: String, delay: Duration) -> std::io::Result<()> {
    loop {
        let (inbound, _) = listener.accept().await?;
        let _ = inbound.set_nodelay(true);
        let target = target.clone();
        tokio::spawn(async move {
            // A target that is down refuses the dial: the caller sees its
            // connection close, as it would have dialling the target.
            let Ok(outbound) = TcpStream::connect(&target).await else {
                return;
            };
            let _ = outbound.set_nodelay(true);
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            tokio::join!(
                pipe(in_read, out_write, delay),
                pipe(out_read, in_write, delay)
            );
        });
    }
}

/// One direction: every chunk leaves `delay` after it arrived.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        // The sender is done (or gone): pass the end on, after the delay.
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_links_and_says_what_is_wrong() {
        let l: DelayLink = "10.77.0.11:4747=127.0.0.1:4647@1ms".parse().unwrap();
        assert_eq!(l.listen, "10.77.0.11:4747");
        assert_eq!(l.target, "127.0.0.1:4647");
        assert_eq!(l.delay, Duration::from_millis(1));
        assert_eq!(parse_delay("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_delay("0.5ms").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_delay("0").unwrap(), Duration::ZERO);
        let err = |s: &str| s.parse::<DelayLink>().unwrap_err();
        assert!(err("a:1").contains("no '='"));
        assert!(err("a:1=b:2").contains("no '@'"));
        assert!(err("a=b:2@1ms").contains("LISTEN \"a\""));
        assert!(err("a:1=b:2@1 fortnight").contains("unit"));
        assert!(err("a:1=b:2@11s").contains("above 10s"));
        assert!(err("a:1=b:2@1").contains("unit"));
    }

    #[tokio::test]
    async fn delays_each_direction() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        let delay = Duration::from_millis(40);
        tokio::spawn(serve(proxy, echo_addr.to_string(), delay));
        let mut c = TcpStream::connect(proxy_addr).await.unwrap();
        let t0 = std::time::Instant::now();
        c.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).await.unwrap();
        let rtt = t0.elapsed();
        assert_eq!(&buf, b"ping");
        assert!(
            rtt >= 2 * delay,
            "round trip {rtt:?} is under twice {delay:?}"
        );
        assert!(rtt < Duration::from_secs(2), "round trip {rtt:?}");
    }
}
