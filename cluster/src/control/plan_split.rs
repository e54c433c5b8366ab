//! A plan cut into pieces raft can carry: one plan of a system job on a
//! quarter of a million nodes is one raft entry of tens of MiB, longer to
//! replicate than a follower waits for its leader's heartbeat. A worker
//! submits the pieces one after another, each checked and committed as any
//! plan is; a piece the leader refuses in part sends the worker back to
//! schedule again on the newer state, which holds the pieces committed.
//! How the pieces go through the applier is argued in the plan applier's
//! design (`control::leader::plan_apply`); the cutting is pure, so the
//! worker on any server cuts its own plans before they travel.

use prost::Message;
use stampede_proto::{AllocList, Plan};

/// How much one piece of a plan may carry (`--plan-max-allocs`,
/// `--plan-max-bytes`). A node's allocations never straddle two pieces, so
/// a node with more than the budget makes a piece of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanBudget {
    pub max_allocs: usize,
    pub max_bytes: usize,
}

impl PlanBudget {
    /// Most allocations a piece may carry, by default.
    pub const MAX_ALLOCS: usize = 2_000;
    /// Most encoded bytes of allocations a piece may carry, by default
    /// (about 1,000-2,000 allocations: replicated in a few ms).
    pub const MAX_BYTES: usize = 512 * 1024;
    /// The leader refuses a plan over these (`ResourceExhausted`), whatever
    /// a worker's budget: the highest the flags allow.
    pub const LIMIT_ALLOCS: usize = 100_000;
    pub const LIMIT_BYTES: usize = 32 << 20;

    /// `ResourceExhausted`'s message if `plan` is over the leader's limits.
    pub fn over_limit(plan: &Plan) -> Option<String> {
        let (allocs, bytes) = weight(plan);
        (allocs > Self::LIMIT_ALLOCS || bytes > Self::LIMIT_BYTES).then(|| {
            format!(
                "plan: {allocs} allocations in {bytes} bytes; one plan carries at most {} allocations and {} bytes (submit it in pieces, as workers do within --plan-max-allocs and --plan-max-bytes)",
                Self::LIMIT_ALLOCS,
                Self::LIMIT_BYTES
            )
        })
    }
}

fn weigh(l: &AllocList) -> (usize, usize) {
    let bytes = l.allocs.iter().map(|a| a.encoded_len()).sum();
    (l.allocs.len(), bytes)
}

/// Allocations a plan places and stops, and their encoded bytes.
fn weight(plan: &Plan) -> (usize, usize) {
    plan.node_allocation
        .values()
        .chain(plan.node_update.values())
        .map(weigh)
        .fold((0, 0), |(n, b), (dn, db)| (n + dn, b + db))
}

impl Default for PlanBudget {
    fn default() -> Self {
        Self {
            max_allocs: Self::MAX_ALLOCS,
            max_bytes: Self::MAX_BYTES,
        }
    }
}

/// `plan` as pieces within `budget`, in order: the first carries the
/// deployment, the last the evaluations (how the evaluation ends is
/// written only with its last placements). A plan within the budget is
/// returned whole.
pub fn split(mut plan: Plan, budget: PlanBudget) -> Vec<Plan> {
    let (allocs, bytes) = weight(&plan);
    if allocs <= budget.max_allocs && bytes <= budget.max_bytes {
        return vec![plan];
    }
    // Taken out, not copied: the plans cut here are the largest.
    let mut node_allocation = std::mem::take(&mut plan.node_allocation);
    let mut node_update = std::mem::take(&mut plan.node_update);
    let deployment = plan.deployment.take();
    let evals = std::mem::take(&mut plan.evals);
    let head = plan;
    // Every node the plan touches, in order, with what it places and stops.
    let mut nodes: Vec<String> = node_allocation
        .keys()
        .chain(node_update.keys())
        .cloned()
        .collect();
    nodes.sort();
    nodes.dedup();
    let mut pieces = vec![head.clone()];
    let (mut n, mut b) = (0, 0);
    for node in nodes {
        let place = node_allocation.remove(&node);
        let stop = node_update.remove(&node);
        let (dn, db) = [&place, &stop]
            .into_iter()
            .flatten()
            .map(weigh)
            .fold((0, 0), |(n, b), (dn, db)| (n + dn, b + db));
        let full = n > 0 && (n + dn > budget.max_allocs || b + db > budget.max_bytes);
        if full {
            pieces.push(head.clone());
            (n, b) = (0, 0);
        }
        let piece = pieces.last_mut().expect("one piece at least");
        if let Some(l) = place {
            piece.node_allocation.insert(node.clone(), l);
        }
        if let Some(l) = stop {
            piece.node_update.insert(node, l);
        }
        (n, b) = (n + dn, b + db);
    }
    pieces[0].deployment = deployment;
    pieces.last_mut().expect("one piece at least").evals = evals;
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::{Allocation, Deployment, Evaluation};

    fn plan(nodes: usize, per_node: usize) -> Plan {
        let list = |node: usize, kind: &str| AllocList {
            allocs: (0..per_node)
                .map(|i| Allocation {
                    id: format!("{kind}-{node}-{i}"),
                    node_id: format!("n{node:03}"),
                    ..Default::default()
                })
                .collect(),
        };
        Plan {
            eval_id: "e1".into(),
            job_id: "j".into(),
            node_allocation: (0..nodes)
                .map(|n| (format!("n{n:03}"), list(n, "p")))
                .collect(),
            node_update: (0..nodes)
                .step_by(3)
                .map(|n| (format!("n{n:03}"), list(n, "s")))
                .collect(),
            deployment: Some(Deployment {
                id: "d1".into(),
                ..Default::default()
            }),
            evals: vec![Evaluation {
                id: "e1".into(),
                ..Default::default()
            }],
            snapshot_index: 7,
            ..Default::default()
        }
    }

    fn ids(p: &Plan) -> Vec<String> {
        let mut ids: Vec<String> = (p.node_allocation.values().chain(p.node_update.values()))
            .flat_map(|l| l.allocs.iter().map(|a| a.id.clone()))
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn a_plan_within_the_budget_stays_whole() {
        let p = plan(10, 2);
        assert_eq!(split(p.clone(), PlanBudget::default()), vec![p]);
    }

    #[test]
    fn pieces_keep_every_allocation_once_within_the_budget_and_nodes_whole() {
        let p = plan(100, 2);
        let budget = PlanBudget {
            max_allocs: 15,
            max_bytes: usize::MAX,
        };
        let pieces = split(p.clone(), budget);
        assert!(pieces.len() >= 9, "{} pieces", pieces.len());
        let mut all: Vec<String> = pieces.iter().flat_map(ids).collect();
        all.sort();
        assert_eq!(all, ids(&p), "each allocation exactly once");
        for (i, piece) in pieces.iter().enumerate() {
            assert!(ids(piece).len() <= 15);
            assert_eq!((&piece.eval_id, piece.snapshot_index), (&p.eval_id, 7));
            assert_eq!(
                piece.deployment.is_some(),
                i == 0,
                "the deployment goes first"
            );
            assert_eq!(
                !piece.evals.is_empty(),
                i == pieces.len() - 1,
                "evals go last"
            );
            // A node's placements and stops travel together.
            for node in piece.node_update.keys() {
                assert!(piece.node_allocation.contains_key(node));
            }
        }
    }

    #[test]
    fn the_leader_refuses_a_plan_over_its_limits_naming_them() {
        assert_eq!(PlanBudget::over_limit(&plan(100, 2)), None);
        let huge = plan(PlanBudget::LIMIT_ALLOCS / 2 + 1, 2);
        let message = PlanBudget::over_limit(&huge).expect("over the limit");
        assert!(message.contains("at most 100000 allocations"), "{message}");
    }

    #[test]
    fn bytes_bound_pieces_too_and_a_big_node_makes_its_own() {
        let p = plan(4, 50);
        let one_node: usize = p.node_allocation["n001"]
            .allocs
            .iter()
            .map(|a| a.encoded_len())
            .sum();
        let budget = PlanBudget {
            max_allocs: usize::MAX,
            max_bytes: one_node / 2,
        };
        let pieces = split(p, budget);
        assert_eq!(
            pieces.len(),
            4,
            "one node a piece, each over the budget alone"
        );
    }
}
