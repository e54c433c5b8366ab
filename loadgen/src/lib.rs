//! loadgen: drives load at a running stampede cluster and measures it.
//!
//! # Layout
//!
//! A capacity run is a pipeline: a scenario becomes a job stream, every
//! process is sampled meanwhile, the samples and the stream's report become
//! a summary, and the summary is rendered. The modules, in that order (the
//! readers of the processes first, which the stream's record and the
//! faults use); each imports only from modules listed before it, which
//! `scripts/check-imports.sh` checks:
//!
//! - `scenario`: what a run is (fleet, arrival process, job mix, SLO,
//!   variants, sweep or search, fault steps), its checks, and the built-in
//!   scenarios ([`BUILT_IN`]).
//! - `metrics`: loadgen's own `/metrics` (submissions, latencies, SLO).
//! - `sampler`: every process's `/metrics`, read on an interval into series.
//! - `server_status`: every local server's `/v1/status` at once: whether
//!   the cluster has settled on one leader (faults, the audit's rest).
//! - `invariants`: the invariant audit that ends a run with faults or
//!   `--audit`: the stream's record of every write and of the allocation
//!   statuses seen, every server read at rest, and the checks (pure).
//! - `stream`: the open-loop job stream against the cluster, and what it
//!   measured: its report and its journal of every job.
//! - `critical_path`: where each job's time went, stage by stage, from
//!   the servers' traces and the stream's own times (pure, but for
//!   fetching the traces).
//! - `faults`: a scenario's faults injected into a local cluster during the
//!   stream, what each cost, and the audit of every acknowledged job.
//! - `search`: the max-rate search's bracket, probe by probe (pure).
//! - `stats`: distribution-free confidence intervals for a median and for
//!   the ratio of two samples (pure).
//! - `validity`: whether a run measured the cluster or the harness (a
//!   generator or the machine saturated, submissions late), from the
//!   samples (pure).
//! - `summary`: the results model: a variant's samples and stream report in,
//!   its figures out ([`VariantSummary`], the contract `summary.json`
//!   holds); the run's [`RunSummary`], its SLO checks and the comparison
//!   with a baseline. Pure: no I/O, no processes.
//! - [`report`]: renders a summary, and apart from it the samples and
//!   traces it draws (`report::VariantData`), as `report.html` and a
//!   terminal table; it never runs anything.
//! - `progress`: the terminal's progress bar during a stream.
//! - `prometheus_run`: a Prometheus scraping the run, for Grafana.
//! - `inventory`: the servers and nodesim shards of a deployed run.
//! - [`history`]: every run remembered (SQLite or PostgreSQL), and the
//!   commits where a measure changed (`loadgen history`); capacity and
//!   compare record their runs in it.
//! - [`capacity`]: `loadgen capacity`, the composition root: it starts (or
//!   is given) the processes and drives the pipeline above, variant by
//!   variant or probe by probe, and writes the run directory.
//!
//! - [`compare`]: `loadgen compare A B`, two run directories' figures
//!   measure by measure, with intervals and verdicts.
//!
//! [`writes`] and [`place`] are the other commands, each self-contained.
//!
//! The commands and the renderer are public modules; everything else is
//! private, its types re-exported here where a caller needs them.

/// This binary's build (its commit, and whether the checkout had changes),
/// stamped by the package's build script.
pub const BUILD: stampede_proto::build::Build = stampede_proto::this_build!();

pub mod capacity;
pub mod compare;
mod critical_path;
mod faults;
pub mod history;
mod invariants;
mod inventory;
mod metrics;
pub mod place;
mod progress;
mod prometheus_run;
pub mod report;
mod sampler;
mod scenario;
mod search;
mod server_status;
mod stats;
mod stream;
mod summary;
mod validity;
pub mod writes;

/// Prints `text` and a newline to stdout; a reader that went away (`loadgen
/// compare ... | head`) ends the output, not the process with a panic.
pub fn say(text: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

pub use critical_path::{
    figures as critical_path_figures, slowest as slowest_paths, CriticalPath, JobPath, TracedJob,
    STAGES,
};
pub use faults::{Audit, FaultReport};
pub use sampler::{Point, Series, Target};
pub use scenario::{FaultAction, Scenario, BUILT_IN};
pub use search::{Probe, SearchReport};
pub use stats::{Interval, Method};
pub use stream::{sketch_quantiles, LatencyQuantiles};
pub use summary::{RunSummary, VariantSummary, SCHEMA_VERSION};
pub use validity::Validity;
