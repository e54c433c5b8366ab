//! loadgen: drives load at a running stampede cluster and measures it.

pub mod place;
pub mod writes;
