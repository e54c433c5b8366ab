//! loadgen: drives load at a running stampede cluster and measures it.

pub mod capacity;
pub mod place;
pub mod report;
pub mod sampler;
pub mod scenario;
pub mod stream;
pub mod writes;
