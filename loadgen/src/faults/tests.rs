use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use stampede_launch::{NodeId, StatusReport};

use super::audit::compare;
use super::measure::{
    control_plane_recovery, held_up_bound_ms, Bounds, FaultReport, RecoveryWindow,
};
use super::{acks_per_second, measure, Injected};
use crate::scenario::{FaultAction, FaultStep};
use crate::server_status::{named_leader, settled};
use crate::stream::{Ack, JobTimes, Journal};

fn status(id: NodeId, state: &str, leader: Option<NodeId>, term: u64) -> StatusReport {
    StatusReport {
        id,
        leader_id: leader,
        state: state.into(),
        term,
        last_log_index: 0,
        applied_index: 0,
        snapshot_index: None,
        purged_index: None,
        members: BTreeMap::new(),
    }
}

#[test]
fn a_cluster_has_settled_when_every_server_names_one_leader_that_leads() {
    let all = vec![
        (1, Some(status(1, "Follower", Some(2), 3))),
        (2, Some(status(2, "Leader", Some(2), 3))),
        (3, Some(status(3, "Follower", Some(2), 4))),
    ];
    let s = settled(&all).unwrap();
    assert_eq!((s.leader, s.term), (2, 4));
    let mut down = all.clone();
    down[2].1 = None;
    assert!(settled(&down)
        .unwrap_err()
        .contains("server 3 not answering"));
    let mut split = all.clone();
    split[0].1 = Some(status(1, "Candidate", None, 5));
    assert!(settled(&split).is_err());
    let mut unconfirmed = all;
    unconfirmed[1].1 = Some(status(2, "Follower", Some(2), 3));
    assert!(settled(&unconfirmed).is_err());
}

#[test]
fn only_a_leader_other_than_the_struck_server_counts_until_the_fault_is_over() {
    // Server 2 led and was struck; 1 and 3 still name it.
    let stale = vec![
        (1, Some(status(1, "Follower", Some(2), 3))),
        (3, Some(status(3, "Follower", Some(2), 3))),
    ];
    assert_eq!(named_leader(&stale, &[2], false), None);
    assert_eq!(named_leader(&stale, &[2], true), Some(2));
    let elected = vec![
        (1, Some(status(1, "Follower", None, 4))),
        (3, Some(status(3, "Leader", Some(3), 4))),
    ];
    assert_eq!(named_leader(&elected, &[2], false), Some(3));
    // The struck server's own word does not count.
    let itself = vec![(2, Some(status(2, "Leader", Some(2), 3))), (1, None)];
    assert_eq!(named_leader(&itself, &[2], false), None);
}

fn journal(acks: &[(f64, f64)]) -> Journal {
    Journal {
        acks: acks
            .iter()
            .map(|&(scheduled_s, acked_s)| Ack {
                scheduled_s,
                acked_s,
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_fault_is_measured_from_the_acknowledgements_around_it() {
    // One ack per second before the fault at 20 s; the one scheduled at
    // 19.5 s is acknowledged after it but was sent before it.
    let mut acks: Vec<(f64, f64)> = (10..20).map(|t| (t as f64, t as f64 + 0.1)).collect();
    acks.push((19.5, 21.0));
    acks.push((20.2, 23.5));
    acks.extend((24..30).map(|t| (t as f64, t as f64 + 0.1)));
    let j = journal(&acks);
    let f = fault_at_20(FaultAction::KillLeader, 2, 22.5);
    let r = &measure(
        std::slice::from_ref(&f),
        &j,
        &JobTimes::default(),
        30.0,
        Duration::from_secs(10),
    )[0];
    assert_eq!(r.action, FaultAction::KillLeader);
    assert_eq!(r.time_to_leader_s, Some(2.5));
    assert_eq!(r.unavailable_s, Some(3.5));
    assert_eq!(r.elections, Some(1));
    assert_eq!(r.recovered_s, Some(22.5));
    // Caught up 0.75 s after the struck server was started again.
    assert_eq!(
        (r.catch_up_time_s, r.snapshots_installed),
        (Some(0.75), Some(1))
    );
    assert_eq!(r.throughput_before, Some(1.0));
    // 22.5 to 30 (the end of the stream): 23.5 and 24.1 ... 29.1.
    assert_eq!(r.throughput_after, Some(7.0 / 7.5));
    assert_eq!(
        r.control_plane_recovery_s, None,
        "no job placed: no baseline"
    );
    // A fault that spares the leader causes no election, though the term
    // grew while it lasted (a follower campaigned): that one is outside it.
    for action in [
        FaultAction::KillFollower,
        FaultAction::PauseFollower,
        FaultAction::PartitionFollower,
        FaultAction::PauseFleet,
    ] {
        let spared = fault_at_20(action, 2, 22.5);
        let r = &measure(
            &[spared],
            &j,
            &JobTimes::default(),
            30.0,
            Duration::from_secs(10),
        )[0];
        assert_eq!(r.elections, Some(0), "{action:?}");
    }

    // No leader found: no recovery, nothing after; no submission after
    // the fault: no unavailability measured.
    let lost = Injected {
        leader_s: None,
        leader_after: None,
        at_s: 29.5,
        ..f.clone()
    };
    let r = &measure(
        &[lost],
        &j,
        &JobTimes::default(),
        30.0,
        Duration::from_secs(10),
    )[0];
    assert_eq!(
        (r.time_to_leader_s, r.unavailable_s, r.throughput_after),
        (None, None, None)
    );
    // Two faults 6 s apart: the first one's after-window ends where the
    // second starts, whose before-window starts at the first's recovery.
    let next = Injected {
        at_s: 26.5,
        leader_s: Some(27.0),
        undone_s: 27.0,
        ..f.clone()
    };
    let both = measure(
        &[f, next],
        &j,
        &JobTimes::default(),
        30.0,
        Duration::from_secs(10),
    );
    // 22.5 to 26.5: 23.5, 24.1, 25.1, 26.1.
    assert_eq!(both[0].throughput_after, Some(1.0));
    assert_eq!(both[1].throughput_before, Some(1.0));
    assert_eq!(
        acks_per_second(&journal(&[(0.0, 0.5), (0.1, 0.7), (1.0, 2.2)]), 3.0),
        [(1.0, 2.0), (2.0, 0.0), (3.0, 1.0)]
    );
}

#[test]
fn an_audit_counts_acknowledged_jobs_missing_anywhere_and_jobs_never_sent() {
    let mut j = Journal::default();
    for id in ["a", "b", "c", "d"] {
        j.submitted.insert(id.into());
    }
    for id in ["a", "b", "c"] {
        j.acked.insert(id.into());
    }
    let set = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
    // d was sent but never acknowledged: it may or may not be there.
    let clean = BTreeMap::from([
        (1, set(&["a", "b", "c", "d"])),
        (2, set(&["a", "b", "c"])),
        (3, set(&["a", "b", "c", "d"])),
    ]);
    let a = compare(&j, &BTreeSet::new(), &clean);
    assert_eq!((a.acked, a.submitted, a.lost, a.phantom), (3, 4, 0, 0));
    assert_eq!(a.failure(), None);

    let bad = BTreeMap::from([
        (1, set(&["a", "c", "zz"])),
        (2, set(&["a", "b", "c"])),
        (3, set(&["a", "c"])),
    ]);
    let a = compare(&j, &BTreeSet::new(), &bad);
    assert_eq!((a.lost, a.phantom), (1, 1));
    // b was seen dead (a batch job done): collected since, not lost.
    let dead = BTreeSet::from(["b".to_string()]);
    assert_eq!(compare(&j, &dead, &bad).lost, 0);
    assert_eq!(a.lost_jobs, ["b (missing on server 1, 3)"]);
    assert_eq!(a.phantom_jobs, ["zz (on server 1)"]);
    assert!(a.failure().unwrap().contains("b (missing on server 1, 3)"));
}

/// Jobs every 0.5 s from `from` to `to` (exclusive), each taking `ms`.
/// A fault on server 1, leader in term 3, injected at 20 s and undone
/// `secs` later, server 2 leading from `leader_s`.
fn fault_at_20(action: FaultAction, secs: u64, leader_s: f64) -> Injected {
    Injected {
        step: FaultStep {
            at: Duration::from_secs(20),
            action,
            duration: Duration::from_secs(secs),
            share: None,
        },
        at_s: 20.0,
        servers: vec![1],
        leader_before: 1,
        term_before: 3,
        leader_s: Some(leader_s),
        leader_after: Some(2),
        undone_s: 20.0 + secs as f64,
        term_after: Some(4),
        caught_up_s: Some(20.0 + secs as f64 + 0.75),
        snapshots_installed: Some(1),
        traces_before: Vec::new(),
    }
}

fn steady(from: f64, to: f64, ms: f64) -> Vec<(f64, f64)> {
    let n = ((to - from) / 0.5).round() as usize;
    (0..n).map(|i| (from + i as f64 * 0.5, ms)).collect()
}

/// What `faults` cost a stream of `jobs` lasting `stream_s`, with no
/// acknowledgement recorded and the usual 10 s throughput window.
fn recoveries(faults: &[Injected], jobs: &JobTimes, stream_s: f64) -> Vec<FaultReport> {
    measure(
        faults,
        &journal(&[]),
        jobs,
        stream_s,
        Duration::from_secs(10),
    )
}

/// The recovery against the fault's own baseline.
fn recovery(w: RecoveryWindow, placed: &[(f64, f64)], running: &[(f64, f64)]) -> Option<f64> {
    control_plane_recovery(w, Bounds::pooled(&[w], placed, running), placed, running)
}

fn window(at_s: f64, undone_s: f64) -> RecoveryWindow {
    RecoveryWindow {
        at_s,
        baseline_from_s: at_s - 10.0,
        undone_s,
        until_s: f64::INFINITY,
    }
}

#[test]
fn the_held_up_bound_is_half_again_the_baseline_p99_and_at_least_250_ms_over_it() {
    assert_eq!(held_up_bound_ms(100.0), 350.0);
    assert_eq!(held_up_bound_ms(500.0), 750.0);
    assert_eq!(held_up_bound_ms(1000.0), 1500.0);
}

#[test]
fn the_control_plane_is_back_when_the_last_job_the_fault_held_up_is_done() {
    // Placement takes 20 ms and running 800 ms before and after a fault at
    // 20 s, undone at 21 s. Three jobs are held up: one in flight at the
    // injection (submitted at 19.9 s, placed 2 s later), two submitted
    // under the fault, the last running at 20.6 + 3.4 = 24.0 s.
    let mut placed = steady(10.0, 19.5, 20.0);
    let mut running = steady(10.0, 19.5, 800.0);
    placed.extend([(19.9, 2000.0), (20.3, 1800.0), (20.6, 1500.0)]);
    running.extend([(19.9, 2800.0), (20.3, 2600.0), (20.6, 3400.0)]);
    placed.extend(steady(21.0, 30.0, 20.0));
    running.extend(steady(21.0, 30.0, 800.0));
    let w = window(20.0, 21.0);
    let r = recovery(w, &placed, &running).unwrap();
    assert!((r - 4.0).abs() < 1e-9, "{r}");
    // Placement alone was back at 22.1 s.
    let r = recovery(w, &placed, &[]).unwrap();
    assert!((r - 2.1).abs() < 1e-9, "{r}");
}

#[test]
fn no_job_held_up_is_back_at_once_and_no_job_around_the_fault_is_unmeasured() {
    let placed = steady(10.0, 30.0, 20.0);
    let running = steady(10.0, 30.0, 800.0);
    assert_eq!(recovery(window(20.0, 21.0), &placed, &running), Some(0.0));
    // Slower, but within the bound (800 ms → 1,200 ms): not held up.
    let slower: Vec<_> = running
        .iter()
        .map(|&(s, ms)| (s, if s >= 20.0 { 1150.0 } else { ms }))
        .collect();
    assert_eq!(recovery(window(20.0, 21.0), &placed, &slower), Some(0.0));
    // No job at all; jobs only before; jobs only after.
    assert_eq!(recovery(window(20.0, 21.0), &[], &[]), None);
    let before = steady(10.0, 19.0, 20.0);
    assert_eq!(recovery(window(20.0, 21.0), &before, &[]), None);
    let after = steady(20.0, 30.0, 20.0);
    assert_eq!(recovery(window(20.0, 21.0), &after, &[]), None);
}

#[test]
fn a_slow_job_after_the_control_plane_settled_is_not_the_faults() {
    let mut placed = steady(10.0, 30.0, 20.0);
    // Held up under the fault (placed at 21.5 s), then a straggler at 27 s
    // submitted after everything had settled, and one at 21.2 s, submitted
    // while the first was still waiting: the backlog, counted.
    placed.push((20.5, 1000.0));
    placed.push((21.2, 800.0));
    placed.push((27.0, 900.0));
    let r = recovery(window(20.0, 21.0), &placed, &[]).unwrap();
    assert!((r - 2.0).abs() < 1e-9, "{r}");
    // The next fault's jobs are not this one's, and one of this fault's
    // still held up when the next one strikes (placed at 21.5 s, the next
    // fault at 21 s) ends the recovery there.
    let w = RecoveryWindow {
        until_s: 21.0,
        ..window(20.0, 21.0)
    };
    let r = recovery(w, &placed, &[]).unwrap();
    assert!(
        (r - 1.0).abs() < 1e-9,
        "not back at the next fault: cut there, {r}"
    );
}

#[test]
fn each_fault_is_measured_against_the_jobs_before_it() {
    let f = fault_at_20(FaultAction::KillLeader, 2, 21.0);
    let mut jobs = JobTimes {
        placed: steady(5.0, 40.0, 20.0),
        ran: steady(5.0, 40.0, 800.0)
            .into_iter()
            .map(|(s, ms)| (s, ms, 1))
            .collect(),
        ..Default::default()
    };
    jobs.placed.push((20.1, 2500.0));
    let second = Injected {
        at_s: 30.0,
        leader_s: Some(30.5),
        undone_s: 31.0,
        ..f.clone()
    };
    let r = recoveries(&[f.clone(), second], &jobs, 40.0);
    assert!((r[0].control_plane_recovery_s.unwrap() - 2.6).abs() < 1e-9);
    assert_eq!(r[1].control_plane_recovery_s, Some(0.0));
    // A fault right after the first one's control plane was back (22.6 s)
    // has no baseline job of its own: it takes the first one's bounds, and
    // the job it holds up (placed 1 s late) counts.
    let close = Injected {
        at_s: 23.0,
        leader_s: Some(23.5),
        undone_s: 23.5,
        ..f.clone()
    };
    jobs.placed.push((23.1, 1000.0));
    let r = recoveries(&[f, close], &jobs, 40.0);
    assert!(
        (r[1].control_plane_recovery_s.unwrap() - 1.1).abs() < 1e-9,
        "{:?}",
        r[1]
    );
    let json = serde_json::to_value(&r[0]).unwrap();
    assert!(json["control_plane_recovery_s"].is_number());
}

#[test]
fn a_faults_window_runs_from_its_injection_until_the_control_plane_was_back() {
    let report = |cp: Option<f64>, recovered: Option<f64>| super::FaultReport {
        action: FaultAction::KillLeader,
        at_s: 15.05,
        scheduled_at_s: 15.0,
        duration_s: 10.0,
        servers: vec![3],
        leader_before: Some(3),
        time_to_leader_s: Some(1.1),
        leader_after: Some(1),
        unavailable_s: Some(1.1),
        elections: Some(1),
        recovered_s: recovered,
        throughput_before: None,
        throughput_after: None,
        control_plane_recovery_s: cp,
        catch_up_time_s: None,
        snapshots_installed: None,
    };
    let start = 1_000_000_000;
    let w = super::windows(&[report(Some(2.5), Some(25.05))], start);
    assert_eq!(w[0].label, "kill_leader@15s");
    assert_eq!(
        (w[0].from_us, w[0].to_us),
        (start + 15_050_000, start + 17_550_000)
    );
    // Not measured: until the fault was over, or only its instant.
    let w = super::windows(&[report(None, Some(25.05)), report(None, None)], start);
    assert_eq!(w[0].to_us, start + 25_050_000);
    assert_eq!(w[1].to_us, w[1].from_us);
}

#[test]
fn a_rolling_update_is_measured_against_other_updates_not_registrations() {
    let f = fault_at_20(FaultAction::PartitionLeader, 10, 21.0);
    // Registrations run in 0.8 s; rolling updates, every 2.5 s from 6 s,
    // in 4 s: their rollout's pace.
    let updates: Vec<(f64, f64)> = (0..14).map(|i| (6.0 + 2.5 * i as f64, 4000.0)).collect();
    let mut ran: Vec<(f64, f64, u64)> = steady(5.0, 40.0, 800.0)
        .into_iter()
        .chain(updates.iter().copied())
        .map(|(s, ms)| (s, ms, 1))
        .collect();
    let mut jobs = JobTimes {
        placed: steady(5.0, 40.0, 20.0),
        rollouts: updates.iter().map(|u| u.0).collect(),
        ..Default::default()
    };
    jobs.ran = ran.clone();
    let r = recoveries(std::slice::from_ref(&f), &jobs, 40.0);
    assert_eq!(
        r[0].control_plane_recovery_s,
        Some(0.0),
        "updates at their own pace are not held up"
    );
    // One registration caught by the fault: running 2.2 s late.
    ran.push((20.2, 3000.0, 1));
    jobs.ran = ran;
    let r = recoveries(&[f], &jobs, 40.0);
    let back = r[0].control_plane_recovery_s.unwrap();
    assert!((back - 3.2).abs() < 1e-9, "{back}");
}

#[test]
fn a_registration_an_update_overtook_is_left_to_the_update() {
    let f = fault_at_20(FaultAction::KillLeader, 10, 21.0);
    let mut ran: Vec<(f64, f64, u64)> = steady(5.0, 40.0, 800.0)
        .into_iter()
        .map(|(s, ms)| (s, ms, 1))
        .collect();
    // Registered at 20.3 and updated at 21.5, before it ran: it ran only
    // as the update, whose rollout took 5 s.
    ran.push((20.3, 6200.0, 5));
    let mut jobs = JobTimes {
        placed: steady(5.0, 40.0, 20.0),
        ran,
        ..Default::default()
    };
    let measured = |jobs: &JobTimes| {
        let r = recoveries(std::slice::from_ref(&f), jobs, 40.0);
        r[0].control_plane_recovery_s.unwrap()
    };
    let counted = measured(&jobs);
    assert!((counted - 6.5).abs() < 1e-9, "{counted}");
    jobs.superseded.push(20.3);
    assert_eq!(
        measured(&jobs),
        0.0,
        "the overtaken registration is not the fault's"
    );
}

#[test]
fn rollouts_are_measured_against_every_quiet_stretch_so_far() {
    // Two faults; rolling updates every 2 s take 4.5-5 s, except the few
    // in the quiet stretch right before the second fault, which happened
    // to take 2.5 s.
    let first = fault_at_20(FaultAction::KillLeader, 5, 21.0);
    let mut second = fault_at_20(FaultAction::PartitionLeader, 5, 51.0);
    second.step.at = Duration::from_secs(50);
    second.at_s = 50.0;
    second.undone_s = 55.0;
    let updates: Vec<(f64, f64)> = (0..35)
        .map(|i| {
            let at = 1.0 + 2.0 * i as f64;
            let ms = if (40.0..46.0).contains(&at) {
                2500.0
            } else {
                4500.0 + 250.0 * (i % 3) as f64
            };
            (at, ms)
        })
        .collect();
    let jobs = JobTimes {
        placed: updates.iter().map(|u| (u.0, 20.0)).collect(),
        ran: updates.iter().map(|u| (u.0, u.1, 5)).collect(),
        rollouts: updates.iter().map(|u| u.0).collect(),
        ..Default::default()
    };
    let r = recoveries(&[first, second], &jobs, 80.0);
    assert_eq!(
        r[1].control_plane_recovery_s,
        Some(0.0),
        "rollouts at their usual pace after the second fault are not held up"
    );
}
