//! Proof that the invariant audit bites: the short audit run of `audit.rs`
//! once for each scheduler bug planted in the servers (`STAMPEDE_PLANTED_BUG`,
//! known to debug builds only, as the tests' servers are), and each must be
//! caught by the check made for it, fail the run and be named. The mutation
//! score is printed.

mod common;

use common::{capacity, json};

const AUDIT: &str = include_str!("common/audit-ci.toml");

/// Each planted bug, the invariant that must catch it, `cluster serve`
/// flags for its run, and changes to the scenario for it (text replaced).
type Plant = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

const CAUGHT_BY: [Plant; 4] = [
    // Nothing checks that a placement fits: the scheduler packs onto nodes
    // already full and the plan applier takes it. (Skipping only the
    // applier's check shows only when two workers race for the last room
    // on a node, which a short run does not always bring about.)
    ("skip_fit_check", "capacity", &[], &[]),
    // A deployment after a scale-up owns only its new allocations, so it
    // never counts the kept ones healthy and never finishes. It shows only
    // when a rolling job is scaled up and then left alone: the short run's
    // fifteen scales, some down and some later stopped, did not always
    // bring one, so this run scales more and stops less.
    (
        "deployment_ignores_kept",
        "deployments",
        &[],
        &[
            ("scale_share = 0.15", "scale_share = 0.4"),
            ("stop_share = 0.1", "stop_share = 0.02"),
            ("purge_share = 0.1", "purge_share = 0.02"),
        ],
    ),
    // A woken node's stale `running` report revives its lost allocations.
    (
        "accept_terminal_report",
        "terminal_stays_terminal",
        &[],
        &[],
    ),
    // A batch job's evaluation after the first (an update, a scale) places
    // every index again beside what runs, and the plan applier lets it.
    ("place_every_index", "duplicates", &[], &[]),
];

#[test]
#[ignore = "the mutation suite: scripts/test-mutations.sh"]
fn every_planted_scheduler_bug_is_caught_by_its_invariant() {
    let mut missed = Vec::new();
    for (bug, check, server_args, edits) in CAUGHT_BY {
        let scenario = edits.iter().fold(AUDIT.to_string(), |text, (from, to)| {
            assert!(text.contains(from), "audit-ci.toml has no {from:?}");
            text.replace(from, to)
        });
        let (_dir, out, mut cmd) = capacity(&scenario, "audit-ci");
        for arg in server_args {
            cmd.arg(format!("--server-arg={arg}"));
        }
        let run = cmd
            .arg("--no-prometheus")
            .env("STAMPEDE_PLANTED_BUG", bug)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        let summary = json(&out.join("summary.json"));
        let violated: Vec<&str> = summary["invariants"]
            .as_array()
            .expect("invariants")
            .iter()
            .filter(|i| i["ok"] != true)
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        let violations = summary["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == check)
            .map_or(0, |i| i["violations"].as_u64().unwrap_or(0));
        let caught = violated.contains(&check)
            && !run.status.success()
            && format!("{stdout}{stderr}").contains(check);
        eprintln!(
            "planted {bug}: violated {violated:?}; caught by {check} \
             ({violations} violations): {caught}"
        );
        if !caught {
            missed.push(format!(
                "{bug}: {check} did not catch it (violated: {violated:?}, exit {:?})\n{stderr}",
                run.status.code()
            ));
        }
    }
    eprintln!(
        "mutation score: {} of {} planted bugs caught",
        CAUGHT_BY.len() - missed.len(),
        CAUGHT_BY.len()
    );
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}
