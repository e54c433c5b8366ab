//! loadgen: drives load at a running stampede cluster and measures it.

pub mod capacity;
pub mod compare;
pub mod faults;
pub mod inventory;
pub mod metrics;
pub mod place;
pub mod progress;
pub mod prometheus_run;
pub mod report;
pub mod sampler;
pub mod scenario;
pub mod search;
pub mod stats;
pub mod stream;
pub mod summary;
pub mod validity;
pub mod writes;
