//! The faults a capacity run or a test injects into a [`LocalCluster`]
//! (kill -9, SIGSTOP/SIGCONT, cut peer links) and how its servers are
//! stopped.

use std::process::Child;

use super::{LocalCluster, NodeId};
use crate::error::LaunchError;
use crate::links::PeerLinks;
use crate::process::terminate;

impl LocalCluster {
    /// `kill -9`: the server gets no chance to flush anything.
    pub fn kill(&mut self, id: NodeId) -> Result<(), LaunchError> {
        let s = self.server_mut(id)?;
        s.paused = false;
        if let Some(mut child) = s.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        Ok(())
    }

    /// `kill -9`, then the server started again on its own data dir.
    pub fn restart(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.kill(id)?;
        self.spawn(id)
    }

    /// SIGSTOP: the process stays, frozen; its sockets stay open and its
    /// peers' messages queue up, as with a long GC pause or a hung VM.
    pub fn pause(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.signal(id, libc::SIGSTOP)?;
        self.server_mut(id)?.paused = true;
        Ok(())
    }

    /// SIGCONT: a paused server runs on.
    pub fn resume(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.signal(id, libc::SIGCONT)?;
        self.server_mut(id)?.paused = false;
        Ok(())
    }

    /// Whether server `id` is paused (SIGSTOP without SIGCONT yet).
    pub fn is_paused(&self, id: NodeId) -> bool {
        self.server(id).is_ok_and(|s| s.paused)
    }

    fn signal(&mut self, id: NodeId, sig: libc::c_int) -> Result<(), LaunchError> {
        if !self.is_running(id) {
            return Err(LaunchError::NotRunning(id));
        }
        let pid = self
            .server(id)?
            .child
            .as_ref()
            .ok_or(LaunchError::NotRunning(id))?
            .id();
        // SAFETY: kill(2) with a pid we spawned and have not reaped (it is running).
        unsafe { libc::kill(pid as i32, sig) };
        Ok(())
    }

    /// Cuts every peer link to and from server `id`: the others cannot
    /// reach it and it cannot reach them (raft and forwarded writes both
    /// ways), while clients still can. Needs [`LocalCluster::start_with_links`].
    pub fn partition(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.server(id)?;
        self.links.as_ref().ok_or(LaunchError::NoLinks)?.isolate(id);
        Ok(())
    }

    /// Heals every peer link to and from server `id`.
    pub fn heal(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.server(id)?;
        self.links.as_ref().ok_or(LaunchError::NoLinks)?.rejoin(id);
        Ok(())
    }

    /// Whether any peer link of server `id` is cut.
    pub fn is_partitioned(&self, id: NodeId) -> bool {
        self.links.as_ref().is_some_and(|l| l.is_isolated(id))
    }

    /// The fault proxy on the peer links, when started with it.
    pub fn links(&self) -> Option<&PeerLinks> {
        self.links.as_ref()
    }

    /// SIGTERM, then SIGKILL if the server has not stopped within the grace period.
    pub fn stop(&mut self, id: NodeId) -> Result<(), LaunchError> {
        let s = self.server_mut(id)?;
        s.paused = false;
        if let Some(child) = s.child.take() {
            terminate(child);
        }
        Ok(())
    }

    /// Stops every server, all at once.
    pub fn stop_all(&mut self) {
        let children: Vec<Child> = self
            .servers
            .iter_mut()
            .filter_map(|s| s.child.take())
            .collect();
        for child in &children {
            // SAFETY: kill(2) with a pid we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            // A paused server takes the SIGTERM once it runs again.
            unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        }
        for s in &mut self.servers {
            s.paused = false;
        }
        for child in children {
            terminate(child);
        }
    }
}
