//! This machine's side of a local cluster: stopping a child process
//! gracefully, and how many threads each of several servers on it gets
//! (free ports are [`crate::ports`]).

use std::process::Child;
use std::time::{Duration, Instant};

/// How often a wait re-reads a server's status (or a child's exit).
pub(crate) const POLL: Duration = Duration::from_millis(25);
/// How long a server gets to stop on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Stops a child process gracefully: SIGTERM, then SIGKILL if it is still
/// running after a grace period; reaps it either way. A stopped (paused)
/// process is continued, so that it can take the SIGTERM.
pub fn terminate(mut child: Child) {
    // SAFETY: kill(2) with a pid we spawned and have not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
        libc::kill(child.id() as i32, libc::SIGCONT);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// API threads (`cluster serve --threads`) for each of `servers` servers
/// sharing this machine: their share of its cores, at least one. Each
/// taking every core put more threads than cores on the machine, and their
/// wake-ups and handovers cost CPU for no work (BENCHMARKS.md, the write
/// path, thirteenth round).
pub fn colocated_threads(servers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / servers.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colocated_servers_share_the_cores_and_each_keeps_one() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(colocated_threads(1), cores);
        assert_eq!(colocated_threads(0), cores);
        assert_eq!(colocated_threads(cores * 2 + 1), 1);
        for servers in 1..=8 {
            let each = colocated_threads(servers);
            assert!(each >= 1);
            assert!(
                each * servers <= cores.max(servers),
                "{servers} servers: {each} each"
            );
        }
    }
}
