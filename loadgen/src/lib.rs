//! loadgen: drives load at a running stampede cluster and measures it.

pub mod capacity;
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
pub mod stream;
pub mod summary;
pub mod writes;

pub use faults::FaultReport;
pub use sampler::{Point, Series, Target};
pub use scenario::{FaultAction, Scenario};
pub use search::{Probe, SearchReport};
pub use stream::{sketch_quantiles, LatencyQuantiles};
pub use summary::{RunSummary, VariantSummary, SCHEMA_VERSION};
