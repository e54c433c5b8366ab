//! nodesim's tests against a real cluster: one test binary, a module
//! per concern.

mod common;

mod address;
mod deployments;
mod fleet;
mod threads;
