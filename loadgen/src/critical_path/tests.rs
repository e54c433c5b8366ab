use std::collections::BTreeMap;

use stampede_proto::JobTrace;

use super::fetch::merge;
use super::figures::rate;
use super::*;
use crate::scenario::JobKind;
use crate::stream::RanJob;

const T0: u64 = 1_700_000_000_000_000;

/// A job scheduled at `T0 + at_ms` whose eleven stages take `ms` each.
fn job(id: &str, at_ms: u64, ms: [u64; N_STAGES]) -> (RanJob, JobTrace) {
    let mut b = [0u64; N_STAGES + 1];
    b[0] = T0 + at_ms * 1000;
    for i in 0..N_STAGES {
        b[i + 1] = b[i] + ms[i] * 1000;
    }
    let run = RanJob {
        job_id: id.into(),
        scheduled_us: b[0],
        running_us: b[N_STAGES],
    };
    let trace = JobTrace {
        job_id: id.into(),
        found: true,
        eval_id: format!("eval-{id}"),
        alloc_id: format!("alloc-{id}"),
        node_id: "node-1".into(),
        registered_us: b[1],
        eval_created_us: b[2],
        enqueued_us: b[3],
        dequeued_us: b[4],
        caught_up_us: b[5],
        plan_submitted_us: b[6],
        plan_committed_us: b[7],
        delivered_us: b[8],
        started_us: b[9],
        running_committed_us: b[10],
    };
    (run, trace)
}

#[test]
fn stages_are_contiguous_and_add_up_to_the_time_to_running() {
    let (run, trace) = job("a", 0, [3, 0, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    let p = path(&run, &trace).unwrap();
    assert_eq!((p.clamps, p.clamped_us), (0, 0));
    assert_eq!(
        p.stages_ms(),
        [3.0, 0.0, 1.0, 5.0, 2.0, 4.0, 6.0, 7.0, 1.0, 9.0, 2.0]
    );
    assert_eq!(p.stages_ms().iter().sum::<f64>(), 40.0);
    assert_eq!(p.time_to_running_ms(), 40.0);
    let spans = &figures::slowest(std::slice::from_ref(&p), 1, "v")[0].spans;
    assert_eq!(spans.len(), N_STAGES);
    assert_eq!(spans[0].start_ms, 0.0);
    for w in spans.windows(2) {
        assert_eq!(
            w[0].end_ms, w[1].start_ms,
            "{} to {}",
            w[0].stage, w[1].stage
        );
    }
    assert_eq!(spans[10].end_ms, 40.0);
    let names: Vec<&str> = spans.iter().map(|s| s.stage.as_str()).collect();
    assert_eq!(names, STAGES.map(|s| s.name));
}

#[test]
fn a_boundary_read_before_the_one_it_follows_is_clamped_and_counted() {
    let (run, mut trace) = job("a", 0, [3, 0, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    // The worker's catch-up read 2.5 ms before its dequeue, and the running
    // report's apply 500 µs before the runner started.
    trace.caught_up_us = trace.dequeued_us - 2500;
    trace.running_committed_us = trace.started_us - 500;
    let p = path(&run, &trace).unwrap();
    assert_eq!((p.clamps, p.clamped_us), (2, 3000));
    assert_eq!((p.bounded, p.bounded_us), (0, 0));
    let ms = p.stages_ms();
    assert_eq!(ms[4], 0.0, "catch_up");
    assert_eq!(ms[9], 0.0, "report_running");
    assert!(p.boundaries.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(ms.iter().sum::<f64>(), p.time_to_running_ms());
    assert_eq!(p.time_to_running_ms(), 40.0, "the ends are loadgen's own");
}

#[test]
fn a_missing_boundary_leaves_the_job_out_and_counts_it() {
    let (run, mut trace) = job("a", 0, [1; 11]);
    trace.started_us = 0;
    assert_eq!(path(&run, &trace), Err(Untraced::Missing(9)));
    let unknown = JobTrace {
        job_id: "a".into(),
        ..JobTrace::default()
    };
    assert_eq!(path(&run, &unknown), Err(Untraced::NotFound));
    let (b_run, b_trace) = job("b", 5, [1; 11]);
    let (paths, untraced) = paths(&[run, b_run], &[trace, b_trace]);
    assert_eq!(untraced, 1);
    assert_eq!(paths.len(), 1);
    assert_eq!(paths[0].job_id, "b");
}

#[test]
fn only_a_jobs_last_run_is_traced_and_a_later_submissions_trace_is_refused() {
    let (first, _) = job("a", 0, [1; 11]);
    let (second, trace) = job("a", 100, [2; 11]);
    let (other, other_trace) = job("b", 50, [1; 11]);
    let runs = [first.clone(), other, second];
    assert_eq!(traced_ids(&runs), ["b", "a"]);
    let (p, untraced) = paths(&runs, &[other_trace, trace.clone()]);
    assert_eq!(untraced, 1, "the first run of a");
    assert_eq!(p.len(), 2);
    // The trace of the update, against the first run: registered after it ran.
    assert_eq!(path(&first, &trace), Err(Untraced::Superseded));
}

fn fleet(n: usize) -> Vec<JobPath> {
    (0..n)
        .map(|i| {
            let slow = i as u64;
            let (run, trace) = job(
                &format!("j{i}"),
                i as u64,
                [1, 0, 1, 1, 1, 1, 1, 1, 1, slow, 1],
            );
            path(&run, &trace).unwrap()
        })
        .collect()
}

#[test]
fn shares_add_up_to_one_and_are_of_the_slowest_percent() {
    let paths = fleet(250);
    let cores: BTreeMap<String, f64> = [("server-1".into(), 0.4), ("nodesim".into(), 0.97)].into();
    let f = figures(&paths, 3, &cores, 6000.0);
    assert_eq!(f.stages.len(), N_STAGES);
    let total: f64 = f.stages.iter().map(|s| s.share_of_p99).sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    // The slowest 1% of 250: three jobs, with report_running 249, 248, 247
    // ms of 258, 257 and 256 ms.
    assert_eq!(f.trace_check.slowest_jobs, 3);
    let share = f.stages[9].share_of_p99;
    assert!((share - 744.0 / 771.0).abs() < 1e-9, "{share}");
    assert_eq!(f.stages_median_ms.slowest[9], 248.0);
    assert_eq!(f.stages_median_ms.all[0], 1.0);
    assert_eq!(f.stages[9].p50_ms, 124.0);
    assert_eq!(f.stages[9].p99_ms, 247.0);
    assert_eq!(f.trace_check.traced, 250);
    assert_eq!(f.trace_check.untraced, 3);
    assert_eq!(f.trace_check.sum_of_stage_medians_ms, 9.0 + 124.0);
    assert_eq!(f.trace_check.median_time_to_running_ms, 133.0);
    let b = f.bottleneck.unwrap();
    assert_eq!(
        (b.stage.as_str(), b.process.as_str()),
        ("report_running", "nodesim")
    );
    assert_eq!(
        b.text,
        "at 6,000 jobs/s the p99 is set by client-update batching (report_running, 96%); nodesim used 0.97 of its core"
    );
}

#[test]
fn one_job_is_its_own_slowest_percent_and_no_jobs_give_no_stages() {
    let f = figures(&fleet(1), 0, &BTreeMap::new(), 2.0);
    assert_eq!(f.trace_check.slowest_jobs, 1);
    // Job 0 spends 1 ms in each stage but report_running (0 ms): 1/9 each.
    assert!((f.stages[0].share_of_p99 - 1.0 / 9.0).abs() < 1e-9);
    assert_eq!(f.stages[9].share_of_p99, 0.0);
    let b = f.bottleneck.unwrap();
    assert_eq!(
        b.process, "leader",
        "no CPU sampled: the stage's own process"
    );
    assert!(b.text.starts_with("at 2.0 jobs/s"), "{}", b.text);
    let none = figures(&[], 4, &BTreeMap::new(), 2.0);
    assert!(none.stages.is_empty() && none.bottleneck.is_none());
    assert_eq!(none.trace_check.untraced, 4);
}

#[test]
fn the_slowest_come_first_and_k_bounds_them() {
    let paths = fleet(30);
    let slow = figures::slowest(&paths, 5, "legacy");
    assert_eq!(slow.len(), 5);
    assert_eq!(slow[0].spans[0].job_id, "j29");
    assert!(slow
        .windows(2)
        .all(|w| w[0].time_to_running_ms >= w[1].time_to_running_ms));
    assert_eq!(slow[0].spans[4].variant, "legacy");
    assert!(figures::slowest(&paths, 0, "v").is_empty());
}

/// `t` as a server that applied each of its entries `us` later records it.
fn applied_later(t: &JobTrace, us: u64) -> JobTrace {
    JobTrace {
        registered_us: t.registered_us + us,
        eval_created_us: t.eval_created_us + us,
        plan_committed_us: t.plan_committed_us + us,
        running_committed_us: t.running_committed_us + us,
        ..t.clone()
    }
}

#[test]
fn merged_traces_take_each_applied_boundary_from_the_earliest_server() {
    let (_, leader) = job("a", 0, [1; 11]);
    let follower = applied_later(&leader, 300);
    let mut lagging = leader.clone();
    lagging.running_committed_us = 0;
    lagging.registered_us -= 50;
    let m = merge("a", &[&follower, &lagging, &leader], &[]);
    assert_eq!(m.registered_us, leader.registered_us - 50);
    assert_eq!(m.eval_created_us, leader.eval_created_us);
    assert_eq!(m.plan_committed_us, leader.plan_committed_us);
    assert_eq!(m.running_committed_us, leader.running_committed_us);
    let mut other_alloc = leader.clone();
    other_alloc.alloc_id = "another".into();
    other_alloc.running_committed_us = 1;
    let m = merge("a", &[&leader, &other_alloc], &[]);
    assert_eq!(m.running_committed_us, leader.running_committed_us);
    assert!(!merge("a", &[], &[]).found);
}

/// A leader killed and restarted loses its record of when it applied each
/// entry: after the drain only the late replays answer. The trace read
/// from it before the kill gives back the applies on time, but only for
/// the evaluation and allocation the answers after the drain chose.
#[test]
fn traces_kept_before_a_kill_fill_in_the_applies_it_lost() {
    let (_, on_time) = job("a", 0, [1; 11]);
    let replayed = applied_later(&on_time, 9_000_000);
    let m = merge("a", &[&replayed], &[&on_time]);
    assert_eq!(m.registered_us, on_time.registered_us);
    assert_eq!(m.eval_created_us, on_time.eval_created_us);
    assert_eq!(m.plan_committed_us, on_time.plan_committed_us);
    assert_eq!(m.running_committed_us, on_time.running_committed_us);
    assert_eq!(m.delivered_us, replayed.delivered_us);

    // Kept before an update: another allocation, and never the one chosen,
    // however complete it is.
    let mut older = on_time.clone();
    older.alloc_id = "older".into();
    older.running_committed_us = 1;
    let mut partial = replayed.clone();
    partial.delivered_us = 0;
    let m = merge("a", &[&partial], &[&older]);
    assert_eq!(m.alloc_id, partial.alloc_id);
    assert_eq!(m.running_committed_us, partial.running_committed_us);
    assert_eq!(m.delivered_us, 0);
    // Another job's trace is not this job's.
    let mut other_job = on_time.clone();
    other_job.job_id = "b".into();
    assert_eq!(
        merge("a", &[&replayed], &[&other_job]).registered_us,
        replayed.registered_us
    );
    // Kept traces alone are no answer: the job was not found after the drain.
    assert!(!merge("a", &[], &[&on_time]).found);
}

#[test]
fn rates_read_as_a_person_writes_them() {
    assert_eq!(rate(6000.0), "6,000");
    assert_eq!(rate(1234567.4), "1,234,567");
    assert_eq!(rate(950.0), "950");
    assert_eq!(rate(2.0), "2.0");
}

#[test]
fn a_stage_whose_interval_overlaps_a_faults_window_says_which() {
    // Stages of 10 ms each from T0: stage i runs from 10i to 10(i + 1) ms.
    let (run, trace) = job("a", 0, [10; 11]);
    let p = path(&run, &trace).unwrap();
    let fault = FaultWindow {
        label: FaultWindow::label("kill_leader", 15.0),
        from_us: T0 + 25_000,
        to_us: T0 + 41_000,
    };
    assert_eq!(fault.label, "kill_leader@15s");
    assert_eq!(FaultWindow::label("pause_leader", 2.5), "pause_leader@2.5s");
    let spans = &figures::slowest_marked(std::slice::from_ref(&p), 1, "v", &[fault])[0].spans;
    let marked: Vec<&str> = spans
        .iter()
        .filter(|s| s.spans_fault.is_some())
        .map(|s| s.stage.as_str())
        .collect();
    // 20–30, 30–40 and 40–50 ms overlap 25–41 ms.
    assert_eq!(marked, ["enqueue", "broker_wait", "catch_up"]);
    assert_eq!(spans[2].spans_fault.as_deref(), Some("kill_leader@15s"));
    // Omitted from traces.json when none; the other fields as they were.
    let json = serde_json::to_value(spans).unwrap();
    assert_eq!(json[2]["spans_fault"], "kill_leader@15s");
    let keys: Vec<&String> = json[0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["end_ms", "job_id", "process", "stage", "start_ms", "variant"]
    );
    // Two windows over one stage are both named.
    let both = [
        FaultWindow {
            label: "a@1s".into(),
            from_us: 5,
            to_us: 6,
        },
        FaultWindow {
            label: "b@2s".into(),
            from_us: 8,
            to_us: 20,
        },
    ];
    assert_eq!(
        figures::overlapping(&both, 0, 10).as_deref(),
        Some("a@1s, b@2s")
    );
    assert_eq!(figures::overlapping(&both, 21, 30), None);
}

#[test]
fn an_apply_read_after_the_step_that_follows_it_is_moved_back_to_that_step_not_clamped() {
    // As a run that killed the leader traced it (faults-faults-web-2): the
    // leader's apply times went with it, and a follower's apply of the
    // registration is 250 µs after the leader's broker enqueued the
    // evaluation and 26 µs after a worker dequeued it; the plan's apply
    // 240 µs after the node received the allocation, and the running
    // report's 400 µs after loadgen saw the job running.
    let (run, mut trace) = job("a", 0, [3, 0, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    let (enqueued, delivered, running) = (trace.enqueued_us, trace.delivered_us, run.running_us);
    // The registration's entry created its evaluation: one apply.
    trace.registered_us = trace.enqueued_us + 250;
    trace.eval_created_us = trace.registered_us;
    trace.dequeued_us = trace.enqueued_us + 224;
    trace.plan_committed_us = trace.delivered_us + 240;
    trace.running_committed_us = run.running_us + 400;
    let p = path(&run, &trace).unwrap();
    assert_eq!((p.clamps, p.clamped_us), (0, 0), "nothing clamped up");
    assert_eq!((p.bounded, p.bounded_us), (4, 1140));
    assert_eq!(p.boundaries[1], enqueued);
    assert_eq!(p.boundaries[2], enqueued);
    assert_eq!(p.boundaries[7], delivered);
    assert_eq!(p.boundaries[10], running);
    let ms = p.stages_ms();
    assert_eq!((ms[1], ms[2], ms[7], ms[10]), (0.0, 0.0, 0.0, 0.0));
    assert_eq!(
        ms[3], 0.224,
        "the broker wait as the leader and worker read it"
    );
    assert_eq!(p.time_to_running_ms(), 40.0);
    // An evaluation created before the submission (a rolling update's,
    // or an older one that placed the newer version) still clamps.
    let (run, mut trace) = job("b", 10, [3, 0, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    trace.registered_us = run.scheduled_us - 3_000_000;
    trace.eval_created_us = trace.registered_us;
    trace.enqueued_us = run.scheduled_us - 2_999_000;
    let p = path(&run, &trace).unwrap();
    assert_eq!((p.clamps, p.bounded), (3, 0));
    let c = figures(&[p], 0, &BTreeMap::new(), 1.0).trace_check;
    assert_eq!((c.clamps, c.applies_bounded), (3, 0));
}

#[test]
fn a_job_every_server_replayed_is_traced_on_its_bounds_not_taken_for_a_later_submission() {
    // Every server that applied the job's entries live was restarted since:
    // each one's apply times are its replay's, 90 s later.
    let (run, mut trace) = job("a", 0, [3, 0, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    let later = run.running_us + 90_000_000;
    trace.registered_us = later;
    trace.eval_created_us = later;
    trace.plan_committed_us = later + 10;
    trace.running_committed_us = later + 20;
    let p = path(&run, &trace).expect("traced");
    assert_eq!((p.clamps, p.bounded), (0, 4));
    assert_eq!(p.time_to_running_ms(), 40.0);
    // A later submission's evaluation was enqueued after the run too.
    trace.enqueued_us = later + 1;
    trace.dequeued_us = later + 2;
    assert_eq!(path(&run, &trace), Err(Untraced::Superseded));
}

#[test]
fn the_sentence_names_the_fault_and_its_mechanism_when_most_of_the_slowest_spent_the_stage_across_it(
) {
    // 250 jobs, one a millisecond; the three slowest (j247-j249) spend
    // report_running across a pause that starts at 240 ms.
    let paths = fleet(250);
    let pause = FaultWindow {
        label: FaultWindow::label("pause_leader", 59.0),
        from_us: T0 + 240_000,
        to_us: T0 + 600_000,
    };
    let f = figures::figures_with_faults(
        &paths,
        0,
        &BTreeMap::new(),
        6000.0,
        std::slice::from_ref(&pause),
        &[],
    );
    let text = f.bottleneck.unwrap().text;
    assert!(
        text.ends_with(
            "; 3 of the 3 slowest jobs spent it across pause_leader@59s: the node's running report went to a server that stopped answering, and waited for the node's retry"
        ),
        "{text}"
    );
    // A fault the slowest jobs did not wait through is not named.
    let earlier = FaultWindow {
        from_us: T0,
        to_us: T0 + 1_000,
        ..pause
    };
    let f = figures::figures_with_faults(&paths, 0, &BTreeMap::new(), 6000.0, &[earlier], &[]);
    assert!(!f.bottleneck.unwrap().text.contains("across"));
}

#[test]
fn a_rolling_updates_later_step_is_the_rollout_and_the_registration_only_its_commit() {
    // The registration applied 4 ms after the submission; the deployment's
    // last step created the evaluation that placed the last allocation
    // 2.5 s later.
    let (run, trace) = job("web", 0, [4, 2500, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    assert!(trace.eval_created_us > trace.registered_us);
    let p = path(&run, &trace).unwrap();
    let ms = p.stages_ms();
    assert_eq!((ms[0], ms[1]), (4.0, 2500.0), "register, rollout");
    assert_eq!(STAGES[1].name, "rollout");
    assert_eq!(ms.iter().sum::<f64>(), p.time_to_running_ms());
    assert_eq!((p.clamps, p.bounded), (0, 0));
    // A first registration: its own entry created the evaluation.
    let (run, trace) = job("etl", 0, [4, 0, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    assert_eq!(trace.eval_created_us, trace.registered_us);
    let ms = path(&run, &trace).unwrap().stages_ms();
    assert_eq!((ms[0], ms[1]), (4.0, 0.0));
}

#[test]
fn a_server_that_sends_no_registration_time_keeps_the_rollout_in_register() {
    let (run, mut trace) = job("web", 0, [4, 2500, 1, 5, 2, 4, 6, 7, 1, 9, 2]);
    trace.registered_us = 0;
    let ms = path(&run, &trace).unwrap().stages_ms();
    assert_eq!((ms[0], ms[1]), (2504.0, 0.0));
}

fn kind(name: &str, kind: crate::scenario::Kind, count: u32, max_parallel: u32) -> JobKind {
    JobKind {
        name: name.into(),
        kind,
        weight: 1,
        count,
        cpu_mhz: 100,
        memory_mb: 64,
        max_parallel,
        min_healthy_time_ms: 500,
        node_class: None,
    }
}

#[test]
fn the_sentence_names_the_update_blocks_when_the_rollout_sets_the_p99_and_only_then() {
    use crate::scenario::Kind::{Batch, Service};
    let mix = [
        kind("web", Service, 5, 2),
        kind("api", Service, 3, 3),
        kind("etl", Batch, 10, 0),
    ];
    // 100 jobs; the slowest one (j99) rolled out for 99 ms.
    let rolling: Vec<JobPath> = (0..100)
        .map(|i| {
            let (run, trace) = job(&format!("j{i}"), i, [4, i, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
            path(&run, &trace).unwrap()
        })
        .collect();
    let f = figures::figures_with_faults(&rolling, 0, &BTreeMap::new(), 4.0, &[], &mix);
    assert_eq!(
        f.bottleneck.unwrap().text,
        "at 4.0 jobs/s the p99 is set by the rolling update's pace: each step waited for the \
         previous one's health (web: max_parallel 2 of count 5, min_healthy_time_ms 500) \
         (rollout, 88%)"
    );
    // Without a scenario's mix, the sentence still says what the stage is.
    let f = figures(&rolling, 0, &BTreeMap::new(), 4.0);
    assert!(f.bottleneck.unwrap().text.contains("health (rollout, 88%)"));
    // The registration's commit sets it: no word of a rollout.
    let committing: Vec<JobPath> = (0..100)
        .map(|i| {
            let (run, trace) = job(&format!("j{i}"), i, [i, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
            path(&run, &trace).unwrap()
        })
        .collect();
    let f = figures::figures_with_faults(&committing, 0, &BTreeMap::new(), 4.0, &[], &mix);
    let text = f.bottleneck.unwrap().text;
    assert_eq!(
        text,
        "at 4.0 jobs/s the p99 is set by the registration's commit (register, 92%)"
    );
    assert_eq!(f.stages[1].p99_ms, 0.0, "no rollout");
}

#[test]
fn a_step_created_after_the_run_was_seen_running_is_not_its_path() {
    // An update seen running 4 ms after its submission (the old version's
    // allocations up) whose last step came 3 s later: not this run's path.
    let (mut run, trace) = job("web", 0, [2, 3000, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    run.running_us = run.scheduled_us + 4000;
    assert_eq!(path(&run, &trace), Err(Untraced::Superseded));
}

#[test]
fn stage_names_and_processes_are_the_contract_summary_json_carries() {
    let pairs = STAGES.map(|s| (s.name, s.process));
    assert_eq!(
        pairs,
        [
            ("register", "leader"),
            ("rollout", "leader"),
            ("enqueue", "leader"),
            ("broker_wait", "leader"),
            ("catch_up", "worker"),
            ("schedule", "worker"),
            ("plan_commit", "leader"),
            ("deliver", "nodesim"),
            ("runner_start", "nodesim"),
            ("report_running", "leader"),
            ("observe", "loadgen"),
        ]
    );
}
