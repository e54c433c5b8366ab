//! The write path: a client's write and the entry it becomes, the proposer
//! through which every write reaches the log (on the leader, batched; from a
//! follower, forwarded on one stream), and the tickets a follower waits on.

pub mod batcher;
pub mod client_write;
pub mod forwarder;
pub mod proposer;
pub mod tickets;
