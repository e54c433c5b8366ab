//! The write path: a client's write and the entry it becomes, the proposer
//! through which every write reaches the log (on the leader, batched; from a
//! follower, forwarded on one stream), and the tickets a follower waits on.
//!
//! - `proposer`: writes through whichever server leads, with a deadline,
//!   following the leadership when it moves (`LocalProposer` writes only
//!   here).
//! - `batcher`: group commit, writes that arrive while entries are in
//!   flight share one `batch` entry.
//! - `forwarder`: a follower's forwarded writes on one stream per leader,
//!   each answer matched to its writer by ticket; `tickets`: the forwarded
//!   writes a follower waits to apply.
//! - `client_write`: a client's write as sent, which a follower forwards,
//!   and the entry the leader makes of it.

pub mod batcher;
pub mod client_write;
pub mod forwarder;
pub mod proposer;
pub mod tickets;
