//! Whether this server is in touch with the rest of the cluster: a leader
//! that a quorum has acknowledged within its lease, or a follower that knows
//! a leader. A server out of touch has been cut off from the others or was
//! paused, and its state may be behind the cluster's without its knowing.
//! So what would read that state as current (a caller's parked query, a
//! leader-only call, a write on a leader that lost its quorum) is answered
//! `Unavailable` at once, and the caller tries another server, instead of
//! waiting on a server the others have already replaced (etcd's
//! CheckQuorum, Nomad's leader lease).
//!
//! `raft::contact` keeps it from raft's metrics; everything else only reads it.

use tokio::sync::watch;

/// Where this server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    InTouch,
    /// Out of touch, and why.
    Lost(Loss),
}

/// Why a server is out of touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// A sentence for the caller's status.
    pub why: String,
    /// Found on waking: the server did not run for longer than the lease
    /// (paused, or starved), and hears of the cluster within a heartbeat.
    /// Otherwise it is cut off, and nothing comes of waiting on it.
    pub woken: bool,
}

impl From<&str> for Loss {
    fn from(why: &str) -> Self {
        Self {
            why: why.to_string(),
            woken: false,
        }
    }
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// The read end: cheap to clone.
#[derive(Debug, Clone)]
pub struct Contact(watch::Receiver<Touch>);

impl Contact {
    /// A contact and the sender that keeps it, in touch until told otherwise.
    pub fn channel() -> (watch::Sender<Touch>, Contact) {
        let (tx, rx) = watch::channel(Touch::InTouch);
        (tx, Contact(rx))
    }

    /// A contact that is always in touch: a single server, or a test.
    pub fn always() -> Contact {
        Self::channel().1
    }

    /// Why this server is out of touch, or `None` while it is in touch.
    pub fn lost(&self) -> Option<String> {
        match &*self.0.borrow() {
            Touch::InTouch => None,
            Touch::Lost(loss) => Some(loss.why.clone()),
        }
    }

    /// Whether this server is out of touch and was not woken into it: cut
    /// off, with nothing to wait for.
    pub fn cut_off(&self) -> bool {
        matches!(&*self.0.borrow(), Touch::Lost(loss) if !loss.woken)
    }

    /// Resolves with the reason once this server is out of touch (at once
    /// if it is now); never, if the sender is gone while in touch.
    pub async fn until_lost(&self) -> String {
        let mut rx = self.0.clone();
        let why = match rx.wait_for(|t| matches!(t, Touch::Lost(_))).await {
            Ok(t) => match &*t {
                Touch::Lost(loss) => Some(loss.why.clone()),
                Touch::InTouch => None,
            },
            Err(_) => None,
        };
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }

    /// Resolves once this server is in touch (at once if it is now).
    pub async fn until_in_touch(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|t| *t == Touch::InTouch).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// A receiver of every change, for a task that acts on each loss.
    pub fn changes(&self) -> watch::Receiver<Touch> {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_loss_is_seen_at_once_and_by_a_waiter() {
        let (tx, contact) = Contact::channel();
        assert_eq!(contact.lost(), None);
        let waiter = tokio::spawn({
            let c = contact.clone();
            async move { c.until_lost().await }
        });
        tx.send_replace(Touch::Lost("cut off".into()));
        assert_eq!(contact.lost().as_deref(), Some("cut off"));
        assert_eq!(waiter.await.unwrap(), "cut off");
        tx.send_replace(Touch::InTouch);
        assert_eq!(contact.lost(), None);
    }
}
