//! loadgen's end-to-end tests: its binary against real clusters, fleets,
//! Prometheus, PostgreSQL and browsers; one test binary, a module per
//! concern. The mutation suite (`planted_bugs.rs`) is a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod address;
mod audit;
mod capacity;
mod compare;
mod dashboards;
mod etcd;
mod faults;
mod fleet;
mod history;
mod multihost;
mod repeat;
mod report;
mod soak;
