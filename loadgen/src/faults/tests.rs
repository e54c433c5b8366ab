use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use stampede_launch::{NodeId, StatusReport};

use super::audit::compare;
use super::{acks_per_second, measure, Injected};
use crate::scenario::{FaultAction, FaultStep};
use crate::server_status::{named_leader, settled};
use crate::stream::{Ack, Journal};

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
    let f = Injected {
        step: FaultStep {
            at: Duration::from_secs(20),
            action: FaultAction::KillLeader,
            duration: Duration::from_secs(2),
        },
        at_s: 20.0,
        servers: vec![1],
        leader_before: 1,
        term_before: 3,
        leader_s: Some(22.5),
        leader_after: Some(2),
        undone_s: 22.0,
        term_after: Some(4),
    };
    let r = &measure(std::slice::from_ref(&f), &j, 30.0, Duration::from_secs(10))[0];
    assert_eq!(r.action, FaultAction::KillLeader);
    assert_eq!(r.time_to_leader_s, Some(2.5));
    assert_eq!(r.unavailable_s, Some(3.5));
    assert_eq!(r.elections, Some(1));
    assert_eq!(r.recovered_s, Some(22.5));
    assert_eq!(r.throughput_before, Some(1.0));
    // 22.5 to 30 (the end of the stream): 23.5 and 24.1 ... 29.1.
    assert_eq!(r.throughput_after, Some(7.0 / 7.5));

    // No leader found: no recovery, nothing after; no submission after
    // the fault: no unavailability measured.
    let lost = Injected {
        leader_s: None,
        leader_after: None,
        at_s: 29.5,
        ..f.clone()
    };
    let r = &measure(&[lost], &j, 30.0, Duration::from_secs(10))[0];
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
    let both = measure(&[f, next], &j, 30.0, Duration::from_secs(10));
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
