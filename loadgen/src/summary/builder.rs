//! One variant's summary from what its run gathered: [`assemble`] is the
//! one place a [`VariantSummary`] is filled (`capacity::drive` only gathers
//! the [`VariantInputs`]), so every field of `summary.json` is set here
//! and nowhere else, and a test can fill a whole summary from values. The
//! run's samples, journal and traced paths are only read: what the report
//! draws of them is the report's own (`report::VariantData`).
//! Pure: no I/O, no processes, no clock.

use std::time::Duration;

use stampede_proto::Binary;

use super::elections::{self, Struck};
use super::fleet::{self, FleetInput};
use super::per_allocation;
use super::{summarize, window_figures, Binaries, BuildInfo, Builds, Ran, VariantSummary};
use crate::critical_path::{self, JobPath};
use crate::faults::{self, Audit, Injected};
use crate::invariants::Invariant;
use crate::sampler::Series;
use crate::scenario::{Scenario, Variant};
use crate::stream::{Journal, StreamReport};
use crate::validity::{self, Budget, Schedule};

/// Everything a variant's run gathered, as [`assemble`] sums it up.
pub struct VariantInputs<'a> {
    pub scenario: &'a Scenario,
    pub variant: &'a Variant,
    /// What the job stream measured, and its journal of every job.
    pub stream: StreamReport,
    pub journal: &'a Journal,
    /// Every process's samples over the run.
    pub series: &'a [Series],
    /// How long the stream ran, seconds, and its wall-clock start and end
    /// in Unix seconds.
    pub seconds: f64,
    pub started_unix: f64,
    pub ended_unix: f64,
    /// What went wrong (empty when the run completed).
    pub problems: Vec<String>,
    /// Whether the cluster ran with mutual TLS and ACL tokens.
    pub tls: bool,
    /// Where the variant's `cluster` and `nodesim` came from, when not
    /// from beside loadgen.
    pub binaries: Option<Binaries>,
    /// Whether loadgen started the cluster on this machine (then nodesim's
    /// and the machine's CPU count in the run's validity, and a process
    /// that stopped answering is a problem), and the cores this machine
    /// lets it use.
    pub local: bool,
    pub cores: f64,
    /// The traced jobs' critical paths, and how many jobs ran without one.
    pub paths: &'a [JobPath],
    pub untraced: u64,
    /// The scenario's faults as injected; `None` when none were.
    pub faulted: Option<Faulted>,
    /// The acknowledged-jobs audit and the invariant audit, when run.
    pub audit: Option<Audit>,
    pub invariants: Vec<Invariant>,
    /// Seconds from nodesim's start until every node was ready, and the
    /// cluster's raft term when it first had a leader.
    pub ready_s: Option<f64>,
    pub term_at_start: Option<u64>,
    /// loadgen's own build (the servers' and nodesim's are in `series`).
    pub loadgen: BuildInfo,
}

/// The faults injected into a local cluster during the stream.
pub struct Faulted {
    pub injected: Vec<Injected>,
    /// The window the throughput before and after each fault is taken over.
    pub throughput_window: Duration,
}

/// The variant's run summed up: the stream and samples ([`summarize`]),
/// then the figures that need the whole run: windows, validity, faults,
/// the critical path, the audits, elections and the fleet, and the builds
/// that ran.
pub fn assemble(i: VariantInputs) -> Ran {
    let stream_s = i.scenario.duration.as_secs_f64();
    let first_submit_s = i.stream.jobs.placed.iter().map(|p| p.0).reduce(f64::min);
    let mut problems = i.problems;
    if i.local {
        problems.extend(lost(i.series));
    }
    let by_window = window_figures(i.variant, i.series, &i.stream, stream_s);
    let mut s = summarize(i.variant, i.stream, i.series, i.seconds, problems);
    s.tls = i.tls;
    s.binaries = i.binaries;
    s.build = Builds::of(i.series, i.loadgen);
    s.validity = validity_of(&s, i.series, i.scenario, i.variant, (i.local, i.cores));
    if let Some(f) = &i.faulted {
        s.faults = faults::measure(
            &f.injected,
            i.journal,
            &s.stream.jobs,
            stream_s,
            f.throughput_window,
        );
    }
    let windows = faults::windows(&s.faults, s.stream.jobs.start_us);
    let jobs_per_s = s.stream.submitted as f64 / stream_s;
    s.critical_path = critical_path::figures_with_faults(
        i.paths,
        i.untraced,
        &s.cpu_cores,
        jobs_per_s,
        &windows,
        &i.scenario.job_mix,
    );
    s.started_unix = i.started_unix;
    s.ended_unix = i.ended_unix;
    s.audit = i.audit;
    s.invariants = i.invariants;
    let struck = i
        .faulted
        .as_ref()
        .map_or_else(Vec::new, |f| timeline(&f.injected));
    let times = (i.ready_s, i.term_at_start, first_submit_s);
    add_fleet(&mut s, i.series, i.scenario.nodes, times, &struck);
    add_per_allocation(&mut s, i.series);
    Ran {
        summary: s,
        windows: by_window,
    }
}

/// What an allocation cost the servers, nodesim, the raft log and its
/// snapshots, from the samples and the allocations the stream saw running.
fn add_per_allocation(summary: &mut VariantSummary, series: &[Series]) {
    let servers: Vec<&Series> = (series.iter()).filter(|s| s.is(Binary::Cluster)).collect();
    let nodesims: Vec<&Series> = (series.iter()).filter(|s| s.is(Binary::Nodesim)).collect();
    let (figures, snapshots) = per_allocation::per_allocation(
        &servers,
        &nodesims,
        &summary.raft_bytes_by_type,
        summary.stream.allocations_placed,
    );
    summary.per_allocation = figures;
    summary.snapshots = snapshots;
}

/// The processes that stopped answering the sampler, and when.
fn lost(series: &[Series]) -> Vec<String> {
    (series.iter())
        .filter_map(|s| {
            let t = s.lost_at?;
            Some(format!(
                "{} stopped answering {t:.0}s into the run",
                s.target.name
            ))
        })
        .collect()
}

/// Whether the run measured the cluster and not the harness.
/// `local`: whether loadgen started the cluster on this machine, and the
/// cores it lets loadgen use.
fn validity_of(
    s: &VariantSummary,
    series: &[Series],
    scenario: &Scenario,
    v: &Variant,
    (local, cores): (bool, f64),
) -> validity::Validity {
    let nodesim_args: Vec<String> = (scenario.nodesim_args.iter())
        .chain(&v.nodesim_args)
        .cloned()
        .collect();
    let budget = Budget::of(cores, series, &nodesim_args, local);
    let schedule = Schedule {
        scheduled: s.stream.scheduled,
        late: s.stream.late,
        dropped: s.stream.dropped,
    };
    validity::judge(schedule, series, &budget)
}

/// What each injected fault did to the servers, by the names their
/// samples go by (`server-{id}`, as a local cluster's targets are named).
fn timeline(injected: &[Injected]) -> Vec<Struck> {
    (injected.iter())
        .map(|f| Struck {
            action: f.step.action,
            servers: f.servers.iter().map(|id| format!("server-{id}")).collect(),
            from_s: f.at_s,
            to_s: f.undone_s.max(f.at_s),
        })
        .collect()
}

/// The run's elections, each explained, and its fleet's figures, from the
/// samples. `times`: when the fleet was ready, the term at the start, and
/// when the first job was submitted; `struck`: the faults' timeline, one
/// entry per fault of `summary.faults`. A fault on the leader is booked the
/// elections that deposed the server it struck; an election no such fault
/// caused makes the run invalid.
fn add_fleet(
    summary: &mut VariantSummary,
    series: &[Series],
    nodes: u64,
    (ready_s, term_at_start, first_submit_s): (Option<f64>, Option<u64>, Option<f64>),
    struck: &[Struck],
) {
    let servers: Vec<&Series> = series.iter().filter(|s| s.is(Binary::Cluster)).collect();
    let nodesims: Vec<&Series> = series.iter().filter(|s| s.is(Binary::Nodesim)).collect();
    let elections = fleet::elections(&servers, term_at_start);
    let explained = elections::explain(&servers, term_at_start, struck);
    if elections.is_some() {
        for (i, f) in summary.faults.iter_mut().enumerate() {
            if f.action.hits_leader() {
                f.elections = Some(elections::booked(&explained, i));
            }
        }
    }
    let unexplained = elections::reasons(&explained, struck);
    summary.validity.valid &= unexplained.is_empty();
    summary.validity.reasons.extend(unexplained);
    summary.elections_detail = explained.into_iter().map(|e| e.election).collect();
    let ran = summary.stream.time_to_running_ms.count > 0;
    let f = fleet::fleet(&FleetInput {
        nodes,
        ready_s,
        first_submit_s,
        servers: &servers,
        nodesims: &nodesims,
        faults: &summary.faults,
        elections,
        slowest_running_ms: ran.then_some(summary.stream.time_to_running_ms.max),
    });
    summary.elections = elections;
    summary.fleet = f;
}

#[cfg(test)]
mod tests;
