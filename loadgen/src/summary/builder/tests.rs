//! A whole summary built from a realistic run's inputs (three servers,
//! nodesim and loadgen sampled every second as they serve `/metrics`, a
//! minute of jobs traced stage by stage, a leader killed, the audits), and
//! what `summary.json` owes its readers: every compared measure in it,
//! under the field names earlier runs wrote, a round trip that loses
//! nothing, and the schema.

use std::time::Duration;

use super::*;
use crate::critical_path::{JobPath, N_STAGES};
use crate::faults::Injected;
use crate::invariants::Invariant;
use crate::sampler::{parse, Point, Series, Target};
use crate::scenario::{FaultAction, Scenario};
use crate::search::{Probe, SearchReport};
use crate::stream::{sketch_quantiles, Ack, JobTimes, Journal, Percentiles, RanJob, StreamReport};
use crate::summary::measures::{figures, MEASURES};
use crate::summary::{parse_summary, PrometheusInfo, Round, RunSummary, Sequential};

/// Seconds of stream.
const STREAM_S: u64 = 60;
/// The stream's start on the wall clock, Unix microseconds.
const START_US: u64 = 1_760_000_000_000_000;
const MIB: f64 = 1048576.0;

fn build_line(commit: &str, dirty: bool) -> String {
    format!("stampede_build_info{{commit=\"{commit}\",dirty=\"{dirty}\",version=\"0.1.0\"}} 1\n")
}

/// What server `id` serves on `/metrics` `t` seconds in: server 2 leads
/// in term 2 until it is killed at 15 s; server 3 starts term 3 and leads
/// from 16 s.
fn server_metrics(id: u64, t: f64) -> String {
    let term = if t < 16.0 { 2 } else { 3 };
    let counts = [
        ("job_register", 2.0),
        ("plan_apply", 2.0),
        ("alloc_client_update", 5.0),
    ];
    let mut m = format!("stampede_raft_term {term}\n");
    for (ty, per_s) in counts {
        m += &format!(
            "stampede_raft_entries_total{{type=\"{ty}\"}} {}\n",
            per_s * t
        );
        let bytes = per_s * t * 900.0;
        m += &format!("stampede_raft_entry_bytes_total{{type=\"{ty}\"}} {bytes}\n");
    }
    let queries = 12.0 * t / 3.0;
    m +=
        &format!("stampede_blocking_queries_started_total{{source=\"client_allocs\"}} {queries}\n");
    m += "stampede_blocking_queries_inflight{source=\"client_allocs\"} 34\n";
    m += &format!("stampede_state_objects{{table=\"allocs\"}} {}\n", 4.0 * t);
    m += "stampede_state_objects{table=\"nodes\"} 100\n";
    m += &format!(
        "stampede_gc_collected_total{{kind=\"evals\"}} {}\n",
        (t / 10.0).floor()
    );
    m += "stampede_nodes{status=\"down\"} 0\n";
    // Every server builds a snapshot between 29 and 30 s: 0.4 s, 1.5 MB.
    let built = if t >= 30.0 { 1.0 } else { 0.0 };
    m += &format!("stampede_raft_snapshot_build_seconds_count {built}\n");
    m += &format!("stampede_raft_snapshot_build_seconds_sum {}\n", 0.4 * built);
    m += &format!("stampede_raft_snapshot_bytes {}\n", 1.5e6 * built);
    let leads = (id == 2 && t < 15.0) || (id == 3 && t >= 16.0);
    m += &format!("stampede_raft_is_leader {}\n", u8::from(leads));
    let started = if id == 3 && t >= 16.0 { 3 } else { 0 };
    m += &format!("stampede_raft_election_started_term {started}\n");
    m += &format!("stampede_process_cpu_seconds_total {}\n", 0.3 * t);
    let rss = (90.0 + id as f64 * 10.0 + t / 10.0) * MIB;
    m += &format!("stampede_process_resident_memory_bytes {rss}\n");
    m + &build_line("5e1f00d5e1f00d5e1f00d5e1f00d5e1f00d5e1f0", true)
}

fn nodesim_metrics(t: f64) -> String {
    let mut m = String::from("stampede_nodesim_nodes{state=\"ready\"} 100\n");
    m += &format!(
        "stampede_nodesim_update_rpcs_total{{priority=\"high\"}} {}\n",
        3.0 * t
    );
    m += &format!("stampede_nodesim_heartbeat_seconds_count {}\n", 10.0 * t);
    m += "stampede_nodesim_heartbeat_ttl_seconds 10\n";
    m += &format!("process_cpu_seconds_total {}\n", 0.1 * t);
    m += &format!("process_resident_memory_bytes {}\n", 60.0 * MIB);
    m + &build_line("0123456789abcdef0123456789abcdef01234567", false)
}

fn loadgen_metrics(t: f64) -> String {
    format!(
        "process_cpu_seconds_total {}\nprocess_resident_memory_bytes {}\n",
        0.05 * t,
        30.0 * MIB
    )
}

/// A process sampled every second of the stream, as the sampler keeps it.
fn sampled(name: &str, text: impl Fn(f64) -> String) -> Series {
    Series {
        target: Target {
            name: name.into(),
            url: String::new(),
            binary: None,
        },
        points: (0..=STREAM_S)
            .map(|t| Point {
                t: t as f64,
                values: parse(&text(t as f64)),
            })
            .collect(),
        lost_at: None,
        last_text: None,
    }
}

/// A job every half second: placed in 80 to 110 ms, running 500 to 700 ms
/// after it was scheduled, two allocations each; the ones scheduled
/// around the kill at 15 s take two seconds longer.
fn jobs() -> Vec<(f64, f64, f64)> {
    (0..2 * STREAM_S)
        .map(|i| {
            let at = i as f64 / 2.0;
            let slow = if (15.0..16.0).contains(&at) {
                2000.0
            } else {
                0.0
            };
            (
                at,
                80.0 + (i % 7) as f64 * 5.0 + slow,
                500.0 + (i % 11) as f64 * 20.0 + slow,
            )
        })
        .collect()
}

fn stream() -> StreamReport {
    let jobs = jobs();
    let placed: Vec<f64> = jobs.iter().map(|j| j.1).collect();
    let ran: Vec<f64> = jobs.iter().map(|j| j.2).collect();
    let at = |ms: &[f64], q: f64| {
        let mut v = ms.to_vec();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    let q = sketch_quantiles();
    let n = jobs.len() as u64;
    StreamReport {
        scheduled: n,
        submitted: n,
        placed: n,
        running: n,
        placement_ms: Percentiles::of(&placed),
        time_to_running_ms: Percentiles::of(&ran),
        allocations_placed: 2 * n,
        placements_per_second: (2 * n) as f64 / STREAM_S as f64,
        // The first job scheduled at 0 s, the last to run at 59.5 s + 680 ms.
        makespan_s: Some(60.18),
        running_windows: (0..STREAM_S / 10)
            .map(|w| crate::stream::Window {
                from_s: w as f64 * 10.0,
                to_s: w as f64 * 10.0 + 10.0,
                jobs: 20,
                time_to_running_p99_ms: Some(700.0),
            })
            .collect(),
        latency_quantiles: crate::stream::LatencyQuantiles {
            placement_ms: q.iter().map(|q| at(&placed, *q)).collect(),
            time_to_running_ms: q.iter().map(|q| at(&ran, *q)).collect(),
            q,
        },
        ..Default::default()
    }
}

/// The stream's jobs, one by one.
fn job_times() -> JobTimes {
    let jobs = jobs();
    JobTimes {
        placed: jobs.iter().map(|j| (j.0, j.1)).collect(),
        ran: jobs.iter().map(|j| (j.0, j.2, 2)).collect(),
        ran_jobs: jobs
            .iter()
            .enumerate()
            .map(|(i, j)| ran_job(i, j))
            .collect(),
        start_us: START_US,
        rollouts: Vec::new(),
        superseded: Vec::new(),
    }
}

fn ran_job(i: usize, (at, _, running_ms): &(f64, f64, f64)) -> RanJob {
    let scheduled_us = START_US + (at * 1e6) as u64;
    RanJob {
        job_id: format!("faults-only-{i}"),
        scheduled_us,
        running_us: scheduled_us + (running_ms * 1000.0) as u64,
    }
}

/// Each job's path: its time to running split over the stages, the
/// scheduler's wait (the fourth stage) the largest.
fn paths() -> Vec<JobPath> {
    let weights: [u64; N_STAGES] = [1, 1, 1, 6, 1, 1, 1, 2, 1, 2, 1];
    let total: u64 = weights.iter().sum();
    (jobs().iter().enumerate())
        .map(|(i, j)| {
            let r = ran_job(i, j);
            let span = r.running_us - r.scheduled_us;
            let mut boundaries = [r.scheduled_us; N_STAGES + 1];
            let mut at = r.scheduled_us;
            for (k, w) in weights.iter().enumerate() {
                at += span * w / total;
                boundaries[k + 1] = at;
            }
            boundaries[N_STAGES] = r.running_us;
            JobPath {
                job_id: r.job_id,
                boundaries,
                clamps: 0,
                clamped_us: 0,
                bounded: 0,
                bounded_us: 0,
            }
        })
        .collect()
}

fn journal() -> Journal {
    let mut j = Journal {
        jobs: job_times(),
        ..Default::default()
    };
    for (i, (at, _, _)) in jobs().iter().enumerate() {
        let id = format!("faults-only-{i}");
        j.submitted.insert(id.clone());
        // Registrations are not acknowledged while there is no leader.
        let acked_s = if (15.0..16.0).contains(at) {
            16.2
        } else {
            at + 0.01
        };
        j.acked.insert(id);
        j.acks.push(Ack {
            scheduled_s: *at,
            acked_s,
        });
    }
    j
}

fn scenario() -> Scenario {
    let mut s = Scenario::load("faults").unwrap();
    s.duration = Duration::from_secs(STREAM_S);
    s.faults.truncate(1);
    s
}

/// The leader (server 2) killed at 15 s for 10 s; server 3 led from 16 s.
fn kill(scenario: &Scenario) -> Injected {
    Injected {
        step: scenario.faults[0].clone(),
        at_s: 15.0,
        servers: vec![2],
        leader_before: 2,
        term_before: 2,
        leader_s: Some(16.0),
        leader_after: Some(3),
        undone_s: 25.0,
        term_after: Some(3),
        caught_up_s: Some(26.5),
        snapshots_installed: Some(0),
        traces_before: Vec::new(),
    }
}

/// The variant summary a run like this one gets.
fn filled() -> VariantSummary {
    let scenario = scenario();
    let injected = kill(&scenario);
    filled_with(&scenario, injected)
}

/// The variant summary of the same run with `injected` as its one fault.
fn filled_with(scenario: &Scenario, injected: Injected) -> VariantSummary {
    let scenario = scenario.clone();
    let variant = scenario.runs().remove(0);
    let mut series: Vec<Series> = (1..=3)
        .map(|id| sampled(&format!("server-{id}"), move |t| server_metrics(id, t)))
        .collect();
    series.push(sampled("nodesim", nodesim_metrics));
    series.push(sampled("loadgen", loadgen_metrics));
    // nodesim stopped answering for the last sample.
    series[3].lost_at = Some(60.0);
    assemble(VariantInputs {
        scenario: &scenario,
        variant: &variant,
        stream: stream(),
        journal: &journal(),
        series: &series,
        seconds: STREAM_S as f64 + 2.0,
        started_unix: START_US as f64 / 1e6,
        ended_unix: START_US as f64 / 1e6 + 62.0,
        problems: Vec::new(),
        tls: true,
        binaries: Some(Binaries {
            dir: "runs/builds/0123abc/debug".into(),
            git_rev: Some("HEAD~1".into()),
            commit: Some("0123abc".into()),
        }),
        local: true,
        cores: 2.0,
        paths: &paths(),
        untraced: 1,
        faulted: Some(Faulted {
            injected: vec![injected],
            throughput_window: Duration::from_secs(10),
        }),
        audit: Some(Audit {
            acked: 120,
            submitted: 120,
            servers: 3,
            applied_index: 1234,
            ..Default::default()
        }),
        invariants: vec![Invariant::new(
            "capacity",
            Vec::new(),
            "240 allocations on 100 nodes".into(),
        )],
        invariants_audit: Some(crate::invariants::AuditCost {
            duration_s: 1.5,
            reading_s: 0.5,
            loadgen_peak_rss_mib_before: Some(40),
            loadgen_peak_rss_mib_after: Some(42),
        }),
        ready_s: Some(3.5),
        term_at_start: Some(2),
        loadgen: BuildInfo {
            commit: "feedface".into(),
            dirty: false,
            version: "0.1.0".into(),
        },
    })
}

/// A whole run's summary of that variant (one repetition, its intervals
/// from its windows), with every optional part.
fn run() -> RunSummary {
    let v = filled();
    let mut run = RunSummary::new(&scenario(), &[v], 1, None, None, None);
    run.prometheus = Some(PrometheusInfo {
        url: "http://127.0.0.1:9090".into(),
        browse: "prometheus --storage.tsdb.path=runs/x/prometheus".into(),
    });
    run.seed = Some(7);
    run.rounds = vec![Round {
        round: 1,
        order: vec!["faults".into()],
    }];
    run.sequential = Some(Sequential {
        first_look: 1,
        max_rounds: 1,
        level: 0.95,
        rounds_run: 1,
        stopped: "max-repeat".into(),
        undecided: vec!["faults: placements_per_s".into()],
    });
    run.search = Some(
        SearchReport {
            parameter: "rate".into(),
            max_passing: Some(2.0),
            at_least: true,
            harness_limit: None,
            min_failing: None,
            probes: vec![Probe {
                value: 2.0,
                passed: true,
                p99_placement_ms: 110.0,
                p99_running_ms: 700.0,
                breaches: Vec::new(),
                repeat: false,
                seconds: 62.0,
                valid: true,
                invalid: Vec::new(),
                placements_per_s: 4.0,
            }],
            confidence: "one probe".into(),
            budget_seconds: 600.0,
            spent_seconds: 62.0,
            placements_per_job: None,
            max_passing_placements_per_s: None,
            min_failing_placements_per_s: None,
            taken_placements_per_s: None,
        }
        .with_placements(Some(2.0)),
    );
    run
}

/// Where `summary.json` holds what each measure is read from: the names
/// earlier runs wrote, which a comparison with them reads back. A measure
/// missing here, or a field renamed, fails
/// [`every_compared_measure_is_in_a_real_summary_under_its_name`].
const MEASURE_FIELDS: &[(&str, &[&str])] = &[
    ("placements_per_s", &["/stream/placements_per_second"]),
    ("p99_placement_ms", &["/stream/placement_ms/p99"]),
    (
        "p99_time_to_running_ms",
        &["/stream/time_to_running_ms/p99"],
    ),
    (
        "cpu_seconds_per_1000_placements",
        &["/cpu_seconds_per_1000_placements"],
    ),
    ("server_rss_mib", &["/rss_mib"]),
    (
        "raft_bytes_per_placement",
        &["/raft_bytes_by_type", "/stream/allocations_placed"],
    ),
    (
        "raft_entries_per_placement",
        &["/raft_entries_by_type", "/stream/allocations_placed"],
    ),
    (
        "blocking_queries_per_placement",
        &["/blocking_queries_by_source", "/stream/allocations_placed"],
    ),
    (
        "p50_time_to_running_ms",
        &["/stream/time_to_running_ms/p50"],
    ),
    ("server_cpu_cores", &["/cpu_cores"]),
];

#[test]
fn every_compared_measure_is_in_a_real_summary_under_its_name() {
    let v = filled();
    let have = figures(&v);
    for m in MEASURES {
        let x = have.get(m.name);
        assert!(x.is_some_and(|x| *x > 0.0), "{}: {x:?}", m.name);
        assert!(
            MEASURE_FIELDS.iter().any(|(name, _)| *name == m.name),
            "{}: say where summary.json holds it in MEASURE_FIELDS",
            m.name
        );
    }
    let json = serde_json::to_value(&v).unwrap();
    for (name, fields) in MEASURE_FIELDS {
        let m = crate::summary::measures::by_name(name).unwrap();
        for field in *fields {
            assert!(
                json.pointer(field).is_some(),
                "{name}: no {field} in the summary"
            );
            // Read back without it, the measure is not what it was: the
            // measure is read from this very field.
            let mut without = json.clone();
            let (parent, key) = field.rsplit_once('/').unwrap();
            let parent = match parent {
                "" => &mut without,
                p => without.pointer_mut(p).unwrap(),
            };
            parent.as_object_mut().unwrap().remove(key);
            let back: VariantSummary = serde_json::from_value(without).unwrap();
            assert_ne!(m.of(&back), m.of(&v), "{name} does not read {field}");
        }
    }
}

#[test]
fn a_real_summary_round_trips_and_its_readers_read_it_typed() {
    let run = run();
    let text = serde_json::to_string_pretty(&run).unwrap();
    let back = parse_summary(&text).unwrap();
    let again = serde_json::to_string_pretty(&back).unwrap();
    let first_difference = (text.lines().zip(again.lines()).enumerate())
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}: {a} became {b}", i + 1));
    assert_eq!(first_difference, None);
    assert_eq!(again, text);
    assert!(!run.variants[0].confidence.intervals.is_empty());
    // What the readers read, the same read back.
    assert_eq!(figures(&back.variants[0]), figures(&run.variants[0]));
    assert_eq!(
        back.variants[0].critical_path,
        run.variants[0].critical_path
    );
    assert_eq!(back.variants[0].faults, run.variants[0].faults);
    assert_eq!(back.build, run.variants[0].build);
}

#[test]
fn the_builder_fills_the_whole_variant_from_its_inputs() {
    let v = filled();
    // The builds, as each process served it, and loadgen's own.
    let cluster = v.build.cluster.as_ref().unwrap();
    assert_eq!((&cluster.commit[..8], cluster.dirty), ("5e1f00d5", true));
    assert_eq!(v.build.nodesim.as_ref().unwrap().commit[..8], *"01234567");
    assert_eq!(v.build.loadgen.as_ref().unwrap().commit, "feedface");
    assert!(
        v.tls && v.confidence.validity.valid,
        "{:?}",
        v.confidence.validity
    );
    assert_eq!(
        v.binaries.as_ref().unwrap().commit.as_deref(),
        Some("0123abc")
    );
    assert_eq!(v.problems, ["nodesim stopped answering 60s into the run"]);
    // The critical path, with the scheduler's wait the bottleneck.
    assert_eq!(v.critical_path.stages.len(), N_STAGES);
    assert_eq!(v.critical_path.trace_check.untraced, 1);
    let bottleneck = v.critical_path.bottleneck.as_ref().unwrap();
    assert_eq!(bottleneck.stage, v.critical_path.stages[3].stage);
    // The fault, what it cost, and the audits.
    assert_eq!(v.faults.len(), 1);
    assert_eq!(v.faults[0].time_to_leader_s, Some(1.0));
    assert_eq!(v.audit.as_ref().unwrap().acked, 120);
    assert_eq!(v.invariants.len(), 1);
    // Elections (term 2 to 3, server 3 deposing the killed leader) and the fleet.
    assert_eq!(v.elections, Some(1));
    assert_eq!(
        v.elections_detail,
        [crate::summary::elections::Election {
            term: 3,
            by: Some("server-3".into()),
            at_s: 16.0,
            leader_was_alive: false,
        }]
    );
    assert_eq!(
        v.faults[0].elections,
        Some(1),
        "booked to the leader's kill"
    );
    assert_eq!(v.fleet.elections_outside_faults, Some(0));
    assert_eq!(v.fleet.nodes, scenario().nodes);
    assert_eq!(v.fleet.ready_s, Some(3.5));
    assert_eq!(v.fleet.ttl_s, Some(10.0));
    // The makespan, as the stream measured it.
    assert_eq!(v.stream.makespan_s, Some(60.18));
    // What an allocation cost: 240 running; server 3 the fullest (126 MiB
    // at its peak), nodesim 60 MiB, 486,000 raft bytes; each server built
    // one snapshot of 1.5 MB in 0.4 s while its state held 120 allocations.
    let p = &v.per_allocation;
    assert_eq!(p.allocations, 240);
    assert_eq!(p.server_rss_bytes, Some(126.0 * MIB / 240.0));
    assert_eq!(p.nodesim_rss_bytes, Some(60.0 * MIB / 240.0));
    assert_eq!(p.raft_log_bytes, Some(2025.0));
    assert_eq!(p.snapshot_bytes, Some(12_500.0));
    let per_s = p.snapshot_seconds.unwrap();
    assert!((per_s - 0.4 / 120.0).abs() < 1e-12, "{per_s}");
    assert_eq!(v.snapshots.built, 3);
    assert_eq!(v.snapshots.largest_bytes, Some(1_500_000));
    assert_eq!(v.snapshots.largest_allocations, Some(120));
    let slowest = v.snapshots.slowest_build_s.unwrap();
    assert!((slowest - 0.4).abs() < 1e-12, "{slowest}");
    // The run's windows, and the stream's wall-clock range.
    let windows = &v.confidence.intervals["placements_per_s"].samples;
    assert_eq!(windows.len(), 5, "10-20 ... 50-60");
    assert_eq!(v.confidence.repetitions.len(), 1);
    assert_eq!(v.ended_unix - v.started_unix, 62.0);
}

#[test]
fn an_election_during_a_follower_kill_is_outside_the_faults_and_invalidates_the_run() {
    // The same run, but the fault struck follower 1 from 15 to 25 s: the
    // election of term 3 deposed server 2, alive.
    let scenario = scenario();
    let mut injected = kill(&scenario);
    injected.step.action = FaultAction::KillFollower;
    injected.servers = vec![1];
    injected.leader_after = Some(2);
    let v = filled_with(&scenario, injected);
    assert_eq!(v.elections, Some(1));
    assert!(v.elections_detail[0].leader_was_alive);
    assert_eq!(
        v.faults[0].elections,
        Some(0),
        "a follower's kill books none"
    );
    assert_eq!(v.fleet.elections_outside_faults, Some(1));
    assert!(!v.confidence.validity.valid);
    assert_eq!(
        v.confidence.validity.reasons,
        ["election for term 3 at 16.0 s started by server-3 while the leader server-2 was alive"]
    );
}

#[test]
fn a_real_summary_meets_the_schema() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = std::fs::read_to_string(dir.join("summary.schema.json")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let summary = serde_json::to_value(run()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&summary)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(summary["build"]["cluster"]["dirty"], true);
    let v = &summary["variants"][0];
    assert_eq!(v["stream"]["makespan_s"], 60.18);
    assert_eq!(v["per_allocation"]["snapshot_bytes"], 12_500.0);
    assert_eq!(v["snapshots"]["built"], 3);
    let search = &summary["search"];
    assert_eq!(search["max_passing_placements_per_s"], 4.0);
    assert_eq!(search["taken_placements_per_s"], 4.0);
    assert_eq!(
        summary["variants"][0]["build"]["loadgen"]["commit"],
        "feedface"
    );
}

/// [`run`] with the parts `summary.json` leaves out when empty present
/// too: the noise floors (of three repetitions or more) and an audit that
/// failed.
fn full_run() -> RunSummary {
    let mut run = run();
    let v = &mut run.variants[0];
    (v.confidence.noise_floors).insert("placements_per_s".into(), 0.02);
    run.audit_failures = vec!["faults: 1 acknowledged job missing".into()];
    run
}

/// [`full_run`] as loadgen wrote it at d7922fd, before the summary's
/// sections and its generated schema: a summary on disk from before.
const WRITTEN_AT_D7922FD: &str = include_str!("../../../tests/fixtures/summary-d7922fd.json");

/// Where `new` lacks or changed what `old` held, by JSON pointer: every
/// field of `old` must be in `new` with the same value (`new` may hold more).
fn lost(old: &serde_json::Value, new: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    use serde_json::Value::{Array, Object};
    match (old, new) {
        (Object(a), Object(b)) => {
            for (k, x) in a {
                match b.get(k) {
                    Some(y) => lost(x, y, &format!("{at}/{k}"), out),
                    None => out.push(format!("{at}/{k} is gone")),
                }
            }
        }
        (Array(a), Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                lost(x, y, &format!("{at}/{i}"), out);
            }
        }
        _ if old == new => {}
        _ => out.push(format!("{at}: {old} became {new}")),
    }
}

/// Every field of `v` by path, with its JSON type: `/variants/[]/stream: object`.
fn shape(v: &serde_json::Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
    use serde_json::Value;
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    out.insert(format!("{at}: {kind}"));
    match v {
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| shape(x, &format!("{at}/{k}"), out)),
        Value::Array(a) => a.iter().for_each(|x| shape(x, &format!("{at}/[]"), out)),
        _ => {}
    }
}

#[test]
fn a_summary_written_before_reads_back_and_writes_again_all_it_held() {
    let before: serde_json::Value = serde_json::from_str(WRITTEN_AT_D7922FD).unwrap();
    let read = parse_summary(WRITTEN_AT_D7922FD).unwrap();
    let mut out = Vec::new();
    lost(&before, &serde_json::to_value(&read).unwrap(), "", &mut out);
    assert!(out.is_empty(), "{out:#?}");
    assert_eq!(read.variants[0].name, "faults");
}

#[test]
fn a_full_summary_has_every_field_of_one_written_before_with_its_type() {
    let before: serde_json::Value = serde_json::from_str(WRITTEN_AT_D7922FD).unwrap();
    let (mut was, mut is) = Default::default();
    shape(&before, "", &mut was);
    shape(&serde_json::to_value(full_run()).unwrap(), "", &mut is);
    let gone: Vec<&String> = was.difference(&is).collect();
    assert!(
        gone.is_empty(),
        "renamed, moved, retyped or gone: {gone:#?}"
    );
    assert!(was.len() > 300, "a full summary: {}", was.len());
}
