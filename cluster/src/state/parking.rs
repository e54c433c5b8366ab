//! How many blocking queries callers may park on a server
//! (`--max-parked-per-connection`, `--max-parked-queries`): a parked query
//! holds a task and its watch registrations, and each write that can move
//! it wakes it and, once it moves, builds its answer, so a caller that
//! parks thousands makes such a write cost thousands of answers. Past a
//! bound the caller gets `ResourceExhausted` naming it. A
//! node's own allocation query is bounded by node instead: a fleet of a
//! quarter of a million nodes shares a few connections.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use stampede_proto::lock;

use super::Id;

/// Who a parked query counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Parker {
    /// A node's query on its own allocations: at most
    /// [`ParkLimits::PER_NODE`] parked per node.
    Node(Id),
    /// Any other caller's query, by its connection (`None`: a caller whose
    /// address the server does not know, counted together).
    Connection(Option<SocketAddr>),
}

/// The bounds, from the server's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkLimits {
    /// Parked queries one connection may hold (nodes' own excepted).
    pub per_connection: usize,
    /// Parked queries all connections together may hold (nodes' own excepted).
    pub total: usize,
}

impl ParkLimits {
    pub const PER_CONNECTION: usize = 1_024;
    pub const TOTAL: usize = 16_384;
    /// A node parks one query on its allocations; two allow a retry that
    /// overlaps the query it replaces.
    pub const PER_NODE: usize = 2;
}

impl Default for ParkLimits {
    fn default() -> Self {
        Self {
            per_connection: Self::PER_CONNECTION,
            total: Self::TOTAL,
        }
    }
}

/// Why a query may not park (or stay parked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParkRefused {
    /// Over a bound, named: `ResourceExhausted`.
    #[error("{0}")]
    Over(String),
    /// This server is out of touch with the cluster, and why: its state may
    /// be behind, so the caller should ask another (`Unavailable`).
    #[error("{0}; ask another server")]
    OutOfTouch(String),
}

#[derive(Debug, Default)]
struct Counts {
    /// Parked queries of connections, all together.
    total: usize,
    by: HashMap<Parker, usize>,
}

/// The parked queries of one server, counted against their bounds.
#[derive(Debug, Default)]
pub struct Parking {
    limits: ParkLimits,
    counts: Arc<Mutex<Counts>>,
}

/// One parked query's place; given back when dropped.
#[derive(Debug)]
pub struct Permit {
    counts: Arc<Mutex<Counts>>,
    parker: Parker,
}

impl Parking {
    pub fn new(limits: ParkLimits) -> Self {
        Self {
            limits,
            counts: Arc::default(),
        }
    }

    /// A place for one more parked query of `parker`, or why not.
    pub fn admit(&self, parker: &Parker) -> Result<Permit, ParkRefused> {
        let mut c = lock(&self.counts);
        let mine = c.by.get(parker).copied().unwrap_or(0);
        let refused = match parker {
            Parker::Node(id) if mine >= ParkLimits::PER_NODE => Some(format!(
                "parked queries: node {id} has {mine} allocation queries waiting; at most {} per node",
                ParkLimits::PER_NODE
            )),
            Parker::Node(_) => None,
            Parker::Connection(_) if mine >= self.limits.per_connection => Some(format!(
                "parked queries: this connection has {mine} waiting; at most {} per connection (--max-parked-per-connection)",
                self.limits.per_connection
            )),
            Parker::Connection(_) if c.total >= self.limits.total => Some(format!(
                "parked queries: {} waiting on this server; at most {} (--max-parked-queries)",
                c.total, self.limits.total
            )),
            Parker::Connection(_) => None,
        };
        if let Some(why) = refused {
            return Err(ParkRefused::Over(why));
        }
        *c.by.entry(parker.clone()).or_default() += 1;
        if matches!(parker, Parker::Connection(_)) {
            c.total += 1;
        }
        Ok(Permit {
            counts: self.counts.clone(),
            parker: parker.clone(),
        })
    }

    /// Parked queries of connections now (nodes' own excepted).
    pub fn parked(&self) -> usize {
        lock(&self.counts).total
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = lock(&self.counts);
        if matches!(self.parker, Parker::Connection(_)) {
            c.total -= 1;
        }
        if let Some(n) = c.by.get_mut(&self.parker) {
            *n -= 1;
            if *n == 0 {
                c.by.remove(&self.parker);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_refuses_naming_itself_and_a_permit_gives_its_place_back() {
        let p = Parking::new(ParkLimits {
            per_connection: 2,
            total: 3,
        });
        let a = Parker::Connection(Some("127.0.0.1:1".parse().unwrap()));
        let b = Parker::Connection(Some("127.0.0.1:2".parse().unwrap()));
        let (a1, _a2) = (p.admit(&a).unwrap(), p.admit(&a).unwrap());
        let err = p.admit(&a).unwrap_err().to_string();
        assert!(
            err.contains("at most 2 per connection (--max-parked-per-connection)"),
            "{err}"
        );
        let _b1 = p.admit(&b).unwrap();
        let err = p.admit(&b).unwrap_err().to_string();
        assert!(err.contains("at most 3 (--max-parked-queries)"), "{err}");
        drop(a1);
        assert_eq!(p.parked(), 2);
        assert!(p.admit(&b).is_ok(), "a place given back is taken again");

        // Nodes' own queries: by node, outside the connections' total.
        let n = Parker::Node("n1".into());
        let _held: Vec<Permit> = (0..ParkLimits::PER_NODE)
            .map(|_| p.admit(&n).unwrap())
            .collect();
        let err = p.admit(&n).unwrap_err().to_string();
        assert!(
            err.contains("node n1 has 2 allocation queries waiting"),
            "{err}"
        );
        assert!(p.admit(&Parker::Node("n2".into())).is_ok());
    }
}
