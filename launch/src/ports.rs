//! Ports for servers that are killed and started again on the same address.
//!
//! A port the kernel hands out for `bind(0)` comes from the ephemeral range,
//! the same range it draws from for the local end of every outgoing
//! connection. While a killed server is down, a client connecting to another
//! server may be given its port as a local port and hold it: the server then
//! cannot bind it again and never comes back. Ports are therefore taken
//! below the ephemeral range, where the kernel never picks a local port.

use std::net::{SocketAddr, TcpListener};

/// The lowest port taken: above the registered services people commonly run.
const LOWEST: u16 = 16384;

/// `n` distinct free 127.0.0.1 ports below the ephemeral range, starting at
/// a point that differs between processes (so that tests running side by
/// side rarely try the same ones); `bind(0)` where the range leaves no room.
pub fn free_ports(n: usize) -> std::io::Result<Vec<SocketAddr>> {
    let (low, _) = ephemeral_range().unwrap_or((32768, 60999));
    let span = low.saturating_sub(LOWEST) as usize;
    if span < n * 16 {
        return kernel_ports(n);
    }
    let mut held = Vec::with_capacity(n);
    let start = scatter() % span;
    for i in 0..span {
        if held.len() == n {
            break;
        }
        let port = LOWEST + ((start + i) % span) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    if held.len() < n {
        return kernel_ports(n);
    }
    held.iter().map(|l| l.local_addr()).collect()
}

/// Ports as the kernel picks them, from the ephemeral range.
fn kernel_ports(n: usize) -> std::io::Result<Vec<SocketAddr>> {
    let held = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    held.iter().map(|l| l.local_addr()).collect()
}

/// The kernel's range for the local ends of connections (Linux), if readable.
fn ephemeral_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// A starting offset that differs between processes and calls: the random
/// keys the standard library draws for each `RandomState`.
fn scatter() -> usize {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let ports = free_ports(6).unwrap();
        let mut seen: Vec<u16> = ports.iter().map(|a| a.port()).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 6, "{ports:?}");
        let low = ephemeral_range().map_or(32768, |r| r.0);
        for a in &ports {
            assert!(
                a.port() >= LOWEST && a.port() < low,
                "{a} in the ephemeral range"
            );
            // Free: it can be bound now that the chooser let it go.
            TcpListener::bind(a).unwrap();
        }
    }
}
