//! The forwarded writes a follower is waiting for.
//!
//! A follower that sends a client's write on to the leader names it with a
//! random ticket. The leader puts the ticket in the write's entry, and the
//! write is done on the follower as soon as the follower applies that
//! entry: the client can read it there, and nothing waits for the leader's
//! answer, which comes one network leg after the leader's own apply. etcd's
//! followers wait for their own apply in the same way. The leader's answer
//! still decides a write the leader refuses, since that write never reaches
//! the log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::raft::write::client_write::Written;

/// Tickets issued and not yet applied or given up, by number.
#[derive(Default)]
pub struct Tickets {
    waiting: Mutex<HashMap<u64, oneshot::Sender<Written>>>,
}

impl Tickets {
    /// A new ticket, never 0 (which an entry carries when it has none) and
    /// not one that is waiting. Random, so one server's tickets do not
    /// match another's.
    pub fn issue(self: &Arc<Self>) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let mut waiting = self.lock();
        let id = loop {
            let id = rand::random::<u64>();
            if id != 0 && !waiting.contains_key(&id) {
                break id;
            }
        };
        waiting.insert(id, tx);
        Ticket {
            id,
            rx,
            tickets: self.clone(),
        }
    }

    /// The entry carrying ticket `id` was applied here: its waiter (if it
    /// is still waiting on this server) is done with `written`.
    pub fn applied(&self, id: u64, written: Written) {
        if let Some(tx) = self.lock().remove(&id) {
            let _ = tx.send(written);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Written>>> {
        // A panic while holding the map leaves it consistent (one insert or
        // remove), so a poisoned lock is still usable.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One forwarded write's ticket; withdrawn when dropped.
pub struct Ticket {
    id: u64,
    rx: oneshot::Receiver<Written>,
    tickets: Arc<Tickets>,
}

impl Ticket {
    /// The number the leader puts in the entry.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Waits until this server applies the entry with this ticket.
    pub async fn applied(&mut self) -> Written {
        match (&mut self.rx).await {
            Ok(written) => written,
            // The sender lives in the map until it is used or this ticket
            // is dropped, so it is never dropped while this waits.
            Err(_) => std::future::pending().await,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.tickets.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(index: u64) -> Written {
        Written {
            index,
            eval_id: "e".into(),
        }
    }

    #[tokio::test]
    async fn a_ticket_is_done_when_its_entry_is_applied() {
        let tickets = Arc::new(Tickets::default());
        let mut a = tickets.issue();
        let b = tickets.issue();
        assert_ne!(a.id(), 0);
        assert_ne!(a.id(), b.id());
        tickets.applied(a.id(), written(7));
        assert_eq!(a.applied().await, written(7));
        // Another server's ticket, or one applied twice, wakes no one.
        tickets.applied(a.id(), written(8));
        tickets.applied(12345, written(9));
        assert_eq!(tickets.lock().len(), 1, "b still waits");
    }

    #[test]
    fn a_dropped_ticket_is_withdrawn() {
        let tickets = Arc::new(Tickets::default());
        let a = tickets.issue();
        let id = a.id();
        drop(a);
        assert!(tickets.lock().is_empty());
        // Its entry applied later finds no one.
        tickets.applied(id, written(1));
    }
}
