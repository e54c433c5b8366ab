//! One variant's summary from what its run gathered: [`assemble`] is the
//! one place a [`VariantSummary`] is made, in one struct literal from its
//! sections (`capacity::drive` only gathers the [`VariantInputs`]), so
//! every field of `summary.json` is set here once and nowhere else, and a
//! test can fill a whole summary from values. The
//! run's samples, journal and traced paths are only read: what the report
//! draws of them is the report's own (`report::VariantData`).
//! Pure: no I/O, no processes, no clock.

use std::time::Duration;

use stampede_proto::Binary;

use super::elections::{self, Election, Struck};
use super::fleet::{self, Fleet, FleetInput};
use super::measures::{figures_of, Measured};
use super::per_allocation;
use super::VariantSummary;
use super::{sampled, window_figures, Binaries, BuildInfo, Builds, Confidence, Sampled};
use crate::critical_path::{self, JobPath};
use crate::faults::{self, Audit, FaultReport, Injected};
use crate::invariants::{AuditCost, Invariant};
use crate::sampler::Series;
use crate::scenario::{Scenario, Variant};
use crate::stream::{JobTimes, Journal, StreamReport};
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
    /// The acknowledged-jobs audit and the invariant audit, when run, and
    /// what the latter cost.
    pub audit: Option<Audit>,
    pub invariants: Vec<Invariant>,
    pub invariants_audit: Option<AuditCost>,
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

/// The variant's run summed up: the stream and samples ([`sampled`]),
/// then the figures that need the whole run: its own confidence (from its
/// windows), validity, faults, the critical path, the audits, elections
/// and the fleet, and the builds that ran.
pub fn assemble(i: VariantInputs) -> VariantSummary {
    let stream_s = i.scenario.duration.as_secs_f64();
    let servers: Vec<&Series> = (i.series.iter())
        .filter(|s| s.is(Binary::Cluster))
        .collect();
    let nodesims: Vec<&Series> = (i.series.iter())
        .filter(|s| s.is(Binary::Nodesim))
        .collect();
    let mut problems = i.problems;
    if i.local {
        problems.extend(lost(i.series));
    }
    let Sampled {
        traffic,
        processes,
        state,
    } = sampled(&i.stream, i.series);
    let mut faults = (i.faulted.as_ref()).map_or_else(Vec::new, |f| {
        faults::measure(
            &f.injected,
            i.journal,
            &i.journal.jobs,
            stream_s,
            f.throughput_window,
        )
    });
    let critical_path = critical_path::figures_with_faults(
        i.paths,
        i.untraced,
        &processes.cpu_cores,
        i.stream.submitted as f64 / stream_s,
        &faults::windows(&faults, i.journal.jobs.start_us),
        &i.scenario.job_mix,
    );
    let struck = (i.faulted.as_ref()).map_or_else(Vec::new, |f| timeline(&f.injected));
    let elected = elections_and_fleet(
        (&servers, &nodesims),
        (&i.stream, &i.journal.jobs),
        &mut faults,
        (i.scenario.nodes, i.ready_s, i.term_at_start),
        &struck,
    );
    let mut validity = validity_of(
        &i.stream,
        i.series,
        i.scenario,
        i.variant,
        (i.local, i.cores),
    );
    validity.valid &= elected.unexplained.is_empty();
    validity.reasons.extend(elected.unexplained);
    let measured = Measured {
        stream: &i.stream,
        traffic: &traffic,
        processes: &processes,
    };
    let confidence = Confidence::of_one(
        validity,
        figures_of(measured),
        &window_figures(i.series, &i.journal.jobs, stream_s),
    );
    let (per_allocation, snapshots) = per_allocation::per_allocation(
        &servers,
        &nodesims,
        &traffic.raft_bytes_by_type,
        i.stream.allocations_placed,
    );
    VariantSummary {
        name: i.variant.name.clone(),
        build: Builds::of(i.series, i.loadgen),
        confidence,
        tls: i.tls,
        server_args: i.variant.server_args.clone(),
        nodesim_args: i.variant.nodesim_args.clone(),
        binaries: i.binaries,
        traffic,
        stream: i.stream,
        critical_path,
        processes,
        per_allocation,
        snapshots,
        state,
        seconds: i.seconds,
        started_unix: i.started_unix,
        ended_unix: i.ended_unix,
        problems,
        faults,
        audit: i.audit,
        invariants: i.invariants,
        invariants_audit: i.invariants_audit,
        elections: elected.elections,
        elections_detail: elected.detail,
        fleet: elected.fleet,
    }
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
    stream: &StreamReport,
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
        scheduled: stream.scheduled,
        late: stream.late,
        dropped: stream.dropped,
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

/// The run's elections, each explained, its fleet's figures, and the
/// elections no fault on the leader explains (each one a reason the run is
/// invalid).
struct Elected {
    elections: Option<u64>,
    detail: Vec<Election>,
    fleet: Fleet,
    unexplained: Vec<String>,
}

/// The run's elections, each explained, and its fleet's figures, from the
/// servers' and nodesim's samples: the fleet's `nodes`, when they were
/// ready and the term at the start; `struck`: the faults' timeline, one
/// entry per fault of `faults`. A fault on the leader is booked the
/// elections that deposed the server it struck.
fn elections_and_fleet(
    (servers, nodesims): (&[&Series], &[&Series]),
    (stream, jobs): (&StreamReport, &JobTimes),
    faults: &mut [FaultReport],
    (nodes, ready_s, term_at_start): (u64, Option<f64>, Option<u64>),
    struck: &[Struck],
) -> Elected {
    let first_submit_s = jobs.placed.iter().map(|p| p.0).reduce(f64::min);
    let elections = fleet::elections(servers, term_at_start);
    let explained = elections::explain(servers, term_at_start, struck);
    if elections.is_some() {
        for (i, f) in faults.iter_mut().enumerate() {
            if f.action.hits_leader() {
                f.elections = Some(elections::booked(&explained, i));
            }
        }
    }
    let unexplained = elections::reasons(&explained, struck);
    let ran = stream.time_to_running_ms.count > 0;
    let fleet = fleet::fleet(&FleetInput {
        nodes,
        ready_s,
        first_submit_s,
        servers,
        nodesims,
        faults,
        elections,
        slowest_running_ms: ran.then_some(stream.time_to_running_ms.max),
    });
    Elected {
        elections,
        detail: explained.into_iter().map(|e| e.election).collect(),
        fleet,
        unexplained,
    }
}

#[cfg(test)]
mod tests;
