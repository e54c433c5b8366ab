//! Every raft election of a run, explained (`elections_detail` in
//! `summary.json`): the term it raised, the server that started it, when,
//! and whether the leader before it was alive. Only a fault that struck the
//! leader (a kill, pause or partition of the leader, or of every server)
//! explains an election, and only one whose previous leader was the server
//! it struck; any other election (a follower that campaigned while the
//! leader was healthy, or during a fault that spared the leader) is outside
//! the faults and makes the run invalid: its figures measure a failure.
//!
//! Pure: the servers' samples and the faults' timeline in, the elections
//! out.
//!
//! - The elections are the terms above the one the cluster had when it first
//!   had a leader (before the stream; its own forming election is not one of
//!   them) up to the highest term any server reported: as many as
//!   `elections` counts.
//! - `at_s` is when a sample first showed the term on any server; the
//!   election was at most one sampling round before, and a fault counts as
//!   in effect at it when the fault overlaps that round.
//! - `by` is the server whose `stampede_raft_election_started_term` showed
//!   the term; when no sample did (its starter was killed first), the server
//!   a sample showed leading in that term (a term's leader is the candidate
//!   that started its election); failing both, unknown.
//! - The previous leader is the one a sample showed leading in the highest
//!   earlier term; it was alive unless a fault had paused or cut it off
//!   then, or had killed it since it began to lead (a server started again
//!   is a new process, and a follower). When no sample showed one, it was
//!   alive unless a fault on the leader was in effect.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stampede_proto::metric_names;

use crate::sampler::Series;
use crate::scenario::FaultAction;

const TERM: &str = metric_names::RAFT_TERM;
const IS_LEADER: &str = metric_names::RAFT_IS_LEADER;
const STARTED_TERM: &str = metric_names::RAFT_ELECTION_STARTED_TERM;

/// One election of the run, as `summary.json` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Election {
    /// The term it raised the cluster to.
    pub term: u64,
    /// The server that started it (`server-2`); null when not known.
    pub by: Option<String>,
    /// When a sample first showed the term, seconds from the start of the
    /// stream (the faults' clock).
    pub at_s: f64,
    /// Whether the leader of the previous term was alive then: its process
    /// neither killed (since it led), paused, nor cut off from the others
    /// by a fault.
    pub leader_was_alive: bool,
}

/// What a fault did to the servers: which it struck (by the names their
/// samples go by), from when until it was undone, seconds from the start
/// of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Struck {
    pub action: FaultAction,
    pub servers: Vec<String>,
    pub from_s: f64,
    pub to_s: f64,
}

impl Struck {
    /// Whether it was in effect at any time in `[from_s, to_s]`.
    fn overlaps(&self, from_s: f64, to_s: f64) -> bool {
        self.from_s <= to_s && self.to_s >= from_s
    }

    /// Whether it killed its servers (they came back as new processes).
    fn kills(&self) -> bool {
        matches!(
            self.action,
            FaultAction::KillLeader | FaultAction::KillFollower | FaultAction::KillAll
        )
    }

    /// Whether it had struck `leader` at an election in `[after_s, at_s]`:
    /// a pause or partition in effect then, or a kill since it began to
    /// lead, before the election (the process that led never comes back: a
    /// server started again is a new process, a follower; so a kill shorter
    /// than an election timeout still deposed it).
    fn struck(&self, leader: &Leader, after_s: f64, at_s: f64) -> bool {
        self.servers.iter().any(|s| s == leader.name)
            && match self.kills() {
                true => self.from_s > leader.since_s && self.from_s <= at_s,
                false => self.overlaps(after_s, at_s),
            }
    }
}

/// The leader before an election: the server a sample showed leading in
/// the highest earlier term, and the sampling round before the first such
/// sample (its leadership began after it).
struct Leader<'a> {
    name: &'a str,
    since_s: f64,
}

/// An election with what explains it.
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    pub election: Election,
    /// The leader before it, when a sample showed one.
    pub previous_leader: Option<String>,
    /// The sampling round before the one that first showed it (the
    /// election came after it); minus infinity when none was.
    pub after_s: f64,
    /// The first fault (its index in the timeline) that had struck the
    /// previous leader then; `None` when it was alive.
    pub struck_by: Option<usize>,
    /// The fault it is booked to: the first that had struck the previous
    /// leader then and is a fault on the leader. `None`: an election
    /// outside the faults.
    pub fault: Option<usize>,
}

/// The run's elections above `term_at_start`, each with its starter, its
/// time, whether the previous leader was alive, and the fault that caused
/// it if one did. Empty when the term at the start is unknown.
pub fn explain(
    servers: &[&Series],
    term_at_start: Option<u64>,
    faults: &[Struck],
) -> Vec<Explained> {
    let Some(start) = term_at_start else {
        return Vec::new();
    };
    // Every sampling round's time; when each term was first seen; who
    // started each term, and who led in it, by the first sample to say so.
    let mut rounds: Vec<f64> = Vec::new();
    let mut first_seen: BTreeMap<u64, f64> = BTreeMap::new();
    let mut started: BTreeMap<u64, (f64, &str)> = BTreeMap::new();
    let mut led: BTreeMap<u64, (f64, &str)> = BTreeMap::new();
    for s in servers {
        let name = s.target.name.as_str();
        for p in &s.points {
            rounds.push(p.t);
            let Some(term) = p.values.get(TERM).map(|t| *t as u64) else {
                continue;
            };
            let seen = first_seen.entry(term).or_insert(p.t);
            *seen = seen.min(p.t);
            if p.values.get(IS_LEADER).is_some_and(|l| *l >= 0.5) {
                earliest(&mut led, term, p.t, name);
            }
            if let Some(t) = p.values.get(STARTED_TERM).map(|t| *t as u64) {
                if t > 0 {
                    earliest(&mut started, t, p.t, name);
                }
            }
        }
    }
    rounds.sort_by(f64::total_cmp);
    rounds.dedup();
    let Some(highest) = first_seen.keys().next_back().copied() else {
        return Vec::new();
    };
    ((start + 1)..=highest)
        .filter_map(|term| {
            // Shown first by the first sample of this term or a later one.
            let at_s = first_seen.range(term..).map(|(_, t)| *t).reduce(f64::min)?;
            let after_s = round_before(&rounds, at_s);
            let by = started
                .get(&term)
                .or_else(|| led.get(&term))
                .map(|(_, n)| n.to_string());
            let previous = led.range(..term).next_back().map(|(_, (t, n))| Leader {
                name: n,
                since_s: round_before(&rounds, *t),
            });
            // Without a leader in any sample, a fault on the leader in
            // effect then struck it, whichever server it was.
            let struck = |f: &Struck| match &previous {
                Some(l) => f.struck(l, after_s, at_s),
                None => f.action.hits_leader() && f.overlaps(after_s, at_s),
            };
            let struck_by = faults.iter().position(struck);
            let fault = faults
                .iter()
                .position(|f| f.action.hits_leader() && struck(f));
            Some(Explained {
                election: Election {
                    term,
                    by,
                    at_s,
                    leader_was_alive: struck_by.is_none(),
                },
                previous_leader: previous.map(|l| l.name.to_string()),
                after_s,
                struck_by,
                fault,
            })
        })
        .collect()
}

/// The last of the sampling `rounds` (sorted) before `t`; minus infinity
/// when none was.
fn round_before(rounds: &[f64], t: f64) -> f64 {
    let i = rounds.partition_point(|r| *r < t);
    i.checked_sub(1).map_or(f64::NEG_INFINITY, |i| rounds[i])
}

/// Keeps in `m` the earliest sample to say `name` for `term`.
fn earliest<'a>(m: &mut BTreeMap<u64, (f64, &'a str)>, term: u64, t: f64, name: &'a str) {
    let e = m.entry(term).or_insert((t, name));
    if t < e.0 {
        *e = (t, name);
    }
}

/// The elections booked to fault `i` of the timeline.
pub fn booked(explained: &[Explained], i: usize) -> u64 {
    explained.iter().filter(|e| e.fault == Some(i)).count() as u64
}

/// The most elections [`reasons`] names one by one.
pub const REASONS_MAX: usize = 20;

/// Why the run is invalid, one reason per election no fault on the leader
/// caused: its term, who started it and when, and the leader it deposed;
/// past [`REASONS_MAX`] of them, one more reason counts the rest.
pub fn reasons(explained: &[Explained], faults: &[Struck]) -> Vec<String> {
    let outside: Vec<&Explained> = explained.iter().filter(|e| e.fault.is_none()).collect();
    let mut reasons: Vec<String> = (outside.iter().take(REASONS_MAX))
        .map(|e| {
            let el = &e.election;
            let by = el.by.as_deref().unwrap_or("an unknown server");
            let head = format!(
                "election for term {} at {:.1} s started by {by}",
                el.term, el.at_s
            );
            match (&e.previous_leader, el.leader_was_alive) {
                (Some(l), true) => format!("{head} while the leader {l} was alive"),
                (None, true) => format!("{head} while no fault had struck the leader"),
                (l, false) => {
                    // Struck, but by a fault meant to spare the leader.
                    let l = l.as_deref().unwrap_or("the leader");
                    let by_what = (e.struck_by)
                        .and_then(|i| faults.get(i))
                        .map_or("a fault", |f| f.action.name());
                    format!(
                        "{head} while {l} was struck by {by_what}, a fault that spares the leader"
                    )
                }
            }
        })
        .collect();
    if outside.len() > REASONS_MAX {
        reasons.push(format!(
            "{} more elections outside the faults, up to term {} at {:.1} s (elections_detail lists them)",
            outside.len() - REASONS_MAX,
            outside[outside.len() - 1].election.term,
            outside[outside.len() - 1].election.at_s,
        ));
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::figures::tests::series;

    const STARTED_TOTAL: &str = metric_names::RAFT_ELECTIONS_STARTED_TOTAL;

    fn struck(action: FaultAction, server: &str, from_s: f64, to_s: f64) -> Struck {
        Struck {
            action,
            servers: vec![server.into()],
            from_s,
            to_s,
        }
    }

    /// A server sampled every second from 0 to 20 s, in `term(t)`, leading
    /// when `leads(t)`, having started the election of `started(t)` (0: none).
    fn server(
        name: &str,
        term: impl Fn(f64) -> f64,
        leads: impl Fn(f64) -> bool,
        started: impl Fn(f64) -> f64,
    ) -> Series {
        let points: Vec<(f64, Vec<(&str, f64)>)> = (0..=20)
            .map(|t| {
                let t = t as f64;
                let values = vec![
                    (TERM, term(t)),
                    (IS_LEADER, f64::from(u8::from(leads(t)))),
                    (STARTED_TERM, started(t)),
                    (STARTED_TOTAL, f64::from(u8::from(started(t) > 0.0))),
                ];
                (t, values)
            })
            .collect();
        let borrowed: Vec<(f64, &[(&str, f64)])> =
            points.iter().map(|(t, v)| (*t, v.as_slice())).collect();
        series(name, &borrowed)
    }

    /// Drops a server's samples from `from` to `to` s (killed or paused then).
    fn silent(mut s: Series, from: f64, to: f64) -> Series {
        s.points.retain(|p| p.t < from || p.t > to);
        s
    }

    #[test]
    fn an_election_during_a_follower_kill_is_outside_the_faults_and_named() {
        // server-1 leads in term 2 throughout; server-2 is killed from 5 to
        // 15 s; server-3, slow, campaigns at 9.5 s and raises the term to 3
        // (shown at 10 s), and server-1 wins it back.
        let s1 = server(
            "server-1",
            |t| if t < 10.0 { 2.0 } else { 3.0 },
            |_| true,
            |_| 0.0,
        );
        let s2 = silent(server("server-2", |_| 2.0, |_| false, |_| 0.0), 5.0, 15.0);
        let s3 = server(
            "server-3",
            |t| if t < 10.0 { 2.0 } else { 3.0 },
            |_| false,
            |t| if t < 10.0 { 0.0 } else { 3.0 },
        );
        let faults = [struck(FaultAction::KillFollower, "server-2", 5.0, 15.0)];
        let e = explain(&[&s1, &s2, &s3], Some(2), &faults);
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].election,
            Election {
                term: 3,
                by: Some("server-3".into()),
                at_s: 10.0,
                leader_was_alive: true,
            }
        );
        assert_eq!(e[0].previous_leader.as_deref(), Some("server-1"));
        assert_eq!(e[0].fault, None, "a follower's kill books no election");
        assert_eq!(booked(&e, 0), 0);
        assert_eq!(
            reasons(&e, &faults),
            ["election for term 3 at 10.0 s started by server-3 while the leader server-1 was alive"]
        );
    }

    #[test]
    fn a_leader_kills_election_is_booked_to_it_with_the_leader_dead() {
        // server-1 leads in term 4 until it is killed at 6.2 s (down until
        // 12 s); server-2 starts term 5 and leads from 7 s.
        let s1 = silent(
            server(
                "server-1",
                |t| if t < 12.0 { 4.0 } else { 5.0 },
                |t| t < 6.0,
                |_| 0.0,
            ),
            6.2,
            12.0,
        );
        let s2 = server(
            "server-2",
            |t| if t < 7.0 { 4.0 } else { 5.0 },
            |t| t >= 7.0,
            |t| if t < 7.0 { 0.0 } else { 5.0 },
        );
        let s3 = server(
            "server-3",
            |t| if t < 7.0 { 4.0 } else { 5.0 },
            |_| false,
            |_| 0.0,
        );
        let faults = [
            struck(FaultAction::PauseFollower, "server-3", 1.0, 3.0),
            struck(FaultAction::KillLeader, "server-1", 6.2, 12.0),
        ];
        let e = explain(&[&s1, &s2, &s3], Some(4), &faults);
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].election,
            Election {
                term: 5,
                by: Some("server-2".into()),
                at_s: 7.0,
                leader_was_alive: false,
            }
        );
        assert_eq!(e[0].fault, Some(1));
        assert_eq!((booked(&e, 0), booked(&e, 1)), (0, 1));
        assert!(reasons(&e, &faults).is_empty());
        // The same run without the fault: the leader was alive, outside faults.
        let e = explain(&[&s1, &s2, &s3], Some(4), &faults[..1]);
        assert!(e[0].election.leader_was_alive);
        assert_eq!(e[0].fault, None);
    }

    #[test]
    fn the_starter_falls_back_to_the_terms_leader_and_then_to_unknown() {
        // No server serves the started-term gauge (its starter was killed
        // before a sample showed it, or an older build): term 3 is won by
        // server-2, term 4 (shown at 15 s) never has a leader in a sample.
        let term = |t: f64| match t {
            t if t < 8.0 => 2.0,
            t if t < 15.0 => 3.0,
            _ => 4.0,
        };
        let s1 = server("server-1", term, |t| t < 8.0, |_| 0.0);
        let s2 = server("server-2", term, |t| (8.0..15.0).contains(&t), |_| 0.0);
        let faults = [
            struck(FaultAction::PauseLeader, "server-1", 7.5, 9.0),
            struck(FaultAction::PartitionLeader, "server-2", 14.5, 16.0),
        ];
        let e = explain(&[&s1, &s2], Some(2), &faults);
        let by: Vec<Option<&str>> = e.iter().map(|e| e.election.by.as_deref()).collect();
        assert_eq!(by, [Some("server-2"), None]);
        assert_eq!(e[1].previous_leader.as_deref(), Some("server-2"));
        assert_eq!(
            e.iter().map(|e| e.fault).collect::<Vec<_>>(),
            [Some(0), Some(1)],
            "each booked to the fault on its previous leader"
        );
        // The gauge, when a sample shows it, names the starter over the leader.
        let s3 = server(
            "server-3",
            term,
            |_| false,
            |t| if t >= 15.0 { 4.0 } else { 0.0 },
        );
        let e = explain(&[&s1, &s2, &s3], Some(2), &faults);
        assert_eq!(e[1].election.by.as_deref(), Some("server-3"));
    }

    #[test]
    fn every_term_above_the_start_is_listed_even_when_skipped_between_samples() {
        // The term goes from 1 to 4 between two samples (two elections that
        // did not win, then one that did), while the leader was paused.
        let term = |t: f64| if t < 10.0 { 1.0 } else { 4.0 };
        let s1 = silent(server("server-1", term, |t| t < 9.5, |_| 0.0), 9.2, 12.0);
        let s2 = server(
            "server-2",
            term,
            |t| t >= 10.0,
            |t| if t >= 10.0 { 4.0 } else { 0.0 },
        );
        let faults = [struck(FaultAction::PauseLeader, "server-1", 9.2, 12.0)];
        let e = explain(&[&s1, &s2], Some(1), &faults);
        let terms: Vec<(u64, f64, bool)> = e
            .iter()
            .map(|e| {
                (
                    e.election.term,
                    e.election.at_s,
                    e.election.leader_was_alive,
                )
            })
            .collect();
        assert_eq!(
            terms,
            [(2, 10.0, false), (3, 10.0, false), (4, 10.0, false)]
        );
        assert_eq!(booked(&e, 0), 3);
        assert_eq!(e[0].election.by, None, "term 2's starter was never shown");
        assert_eq!(e[2].election.by.as_deref(), Some("server-2"));
        // Not listed without the term at the start.
        assert!(explain(&[&s1, &s2], None, &faults).is_empty());
    }

    #[test]
    fn an_election_after_the_leaders_fault_was_undone_is_outside_it() {
        // server-1 paused from 2 to 4 s and still leading after it; at 9 s
        // server-3 deposes it anyway.
        let term = |t: f64| if t < 9.0 { 2.0 } else { 3.0 };
        let s1 = server("server-1", term, |t| t < 9.0, |_| 0.0);
        let s3 = server(
            "server-3",
            term,
            |t| t >= 9.0,
            |t| if t >= 9.0 { 3.0 } else { 0.0 },
        );
        let faults = [struck(FaultAction::PauseLeader, "server-1", 2.0, 4.0)];
        let e = explain(&[&s1, &s3], Some(2), &faults);
        assert!(e[0].election.leader_was_alive);
        assert_eq!(e[0].fault, None);
        assert_eq!(reasons(&e, &faults).len(), 1);
    }

    #[test]
    fn a_killed_leader_stays_lost_after_it_is_started_again() {
        // Every server killed from 10 to 11 s; they elect after the start
        // (term 3, server-2, shown at 13 s): the kill deposed server-1.
        let term = |t: f64| if t < 13.0 { 2.0 } else { 3.0 };
        let s1 = silent(server("server-1", term, |t| t < 10.0, |_| 0.0), 10.0, 11.0);
        let s2 = silent(
            server(
                "server-2",
                term,
                |t| t >= 13.0,
                |t| if t >= 13.0 { 3.0 } else { 0.0 },
            ),
            10.0,
            11.0,
        );
        let all = Struck {
            action: FaultAction::KillAll,
            servers: vec!["server-1".into(), "server-2".into()],
            from_s: 10.0,
            to_s: 11.0,
        };
        let e = explain(&[&s1, &s2], Some(2), std::slice::from_ref(&all));
        assert!(!e[0].election.leader_was_alive);
        assert_eq!(e[0].fault, Some(0));
        // A leader killed for less than an election timeout: the same.
        let short = struck(FaultAction::KillLeader, "server-1", 11.5, 12.0);
        let e = explain(&[&s1, &s2], Some(2), std::slice::from_ref(&short));
        assert_eq!(
            (e[0].election.leader_was_alive, e[0].fault),
            (false, Some(0))
        );
        // A kill before the server began to lead does not depose it: a
        // follower killed at 1 s, back and elected by 5 s, leads until 13 s.
        let s1 = server("server-1", term, |t| (5.0..13.0).contains(&t), |_| 0.0);
        let before = struck(FaultAction::KillFollower, "server-1", 1.0, 2.0);
        let e = explain(&[&s1, &s2], Some(2), std::slice::from_ref(&before));
        assert_eq!((e[0].election.leader_was_alive, e[0].fault), (true, None));
    }

    #[test]
    fn past_twenty_elections_outside_the_faults_one_reason_counts_the_rest() {
        // A follower raises the term every second while the leader, alive,
        // keeps its own.
        let s1 = server("server-1", |_| 1.0, |_| true, |_| 0.0);
        let s2 = server("server-2", |t| 1.0 + t, |_| false, |t| 1.0 + t);
        let e = explain(&[&s1, &s2], Some(0), &[]);
        assert_eq!(e.len(), 21, "terms 1 to 21");
        let why = reasons(&e, &[]);
        assert_eq!(why.len(), REASONS_MAX + 1);
        assert_eq!(
            why[0],
            "election for term 1 at 0.0 s started by server-2 while no fault had struck the leader"
        );
        assert_eq!(
            why[1],
            "election for term 2 at 1.0 s started by server-2 while the leader server-1 was alive"
        );
        assert_eq!(
            why[REASONS_MAX],
            "1 more elections outside the faults, up to term 21 at 20.0 s (elections_detail lists them)"
        );
    }

    #[test]
    fn elections_read_back_from_json() {
        let e = Election {
            term: 7,
            by: None,
            at_s: 93.2,
            leader_was_alive: true,
        };
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"term": 7, "by": null, "at_s": 93.2, "leader_was_alive": true})
        );
        assert_eq!(serde_json::from_value::<Election>(json).unwrap(), e);
        // A summary written before the field reads back without elections.
        let old = serde_json::json!({"name": "old", "elections": 2});
        let v: crate::summary::VariantSummary = serde_json::from_value(old).unwrap();
        assert_eq!((v.elections, v.elections_detail.len()), (Some(2), 0));
    }
}
