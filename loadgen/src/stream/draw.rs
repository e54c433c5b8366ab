//! What each arrival of the stream does, drawn from the stream's seed: when
//! it comes, and whether it registers a new job, updates or scales one the
//! stream registered, or stops or purges one it followed to running.
//!
//! The draws are made in a fixed order from one generator, so every variant
//! of a scenario gets the very same workload.

use std::collections::HashMap;
use std::sync::Mutex;

use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use stampede_proto::{
    Constraint, ConstraintOperand, ConstraintTarget, Job, JobType, Resources, TaskGroup,
    UpdateStrategy,
};

use super::{job_id, Tally, SEED};
use crate::scenario::{Arrival, JobKind, Kind, Scenario};

/// One arrival's write.
pub(super) enum Draw {
    /// Stop (or purge) job `id`, which the stream followed to running.
    Deregister { id: String, purge: bool },
    /// Register `job`: a new one, a new spec of one (`update`), or the same
    /// spec with another count (`scaled`); `version` is its spec version.
    Register {
        job: Job,
        update: bool,
        version: u64,
        scaled: bool,
    },
}

/// A job the stream registered: its kind, number, spec version and count.
#[derive(Clone, Copy)]
struct Registered {
    kind: usize,
    n: u64,
    version: u64,
    count: u32,
}

/// The stream's draws and what they need to remember: the jobs registered
/// so far (updates, scales and stops pick one) and how many of each kind.
pub(super) struct Planner<'a> {
    scenario: &'a Scenario,
    prefix: &'a str,
    rng: StdRng,
    weights: WeightedIndex<u32>,
    registered: Vec<Registered>,
    counts: HashMap<usize, u64>,
}

impl<'a> Planner<'a> {
    pub(super) fn new(scenario: &'a Scenario, prefix: &'a str) -> Self {
        Self {
            scenario,
            prefix,
            rng: StdRng::seed_from_u64(SEED),
            weights: WeightedIndex::new(scenario.job_mix.iter().map(|j| j.weight))
                .expect("the scenario check keeps weights above 0"),
            registered: Vec::new(),
            counts: HashMap::new(),
        }
    }

    /// Seconds from the arrival at `t` to the next (of a stream `total` long).
    pub(super) fn gap(&mut self, t: f64, total: f64) -> f64 {
        let rate = self.scenario.arrival.rate_at(t, total).max(1e-3);
        match self.scenario.arrival {
            Arrival::Poisson { .. } => {
                let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
                -u.ln() / rate
            }
            _ => 1.0 / rate,
        }
    }

    /// The next arrival's write; `tally` says which jobs were followed to
    /// running (the only ones a stop may pick).
    pub(super) fn draw(&mut self, tally: &Mutex<Tally>) -> Draw {
        let (s, prefix) = (self.scenario, self.prefix);
        if s.stop_share > 0.0 {
            // A stream that stops jobs is one meant to run long: batch work
            // that has run is done with, not updated again, so the mix of
            // live jobs an update picks from stays the same all through.
            let t = tally.lock().unwrap();
            self.registered
                .retain(|r| !(is_batch(s, r.kind) && followed(&t, s, prefix, r)));
        }
        let update = !self.registered.is_empty() && self.rng.gen_bool(s.update_share);
        // Drawn only when stops are asked for, so the workload of a scenario
        // without them stays as it always was.
        let stop = !update
            && s.stop_share > 0.0
            && self
                .rng
                .gen_bool((s.stop_share / (1.0 - s.update_share)).min(1.0));
        // Scales and purges are drawn likewise, each from what is left.
        let mut rest = 1.0 - s.update_share - s.stop_share;
        let mut draw = |share: f64, rng: &mut StdRng, before: bool| {
            let p = if rest > 0.0 {
                (share / rest).min(1.0)
            } else {
                1.0
            };
            rest -= share;
            !before && share > 0.0 && rng.gen_bool(p)
        };
        let scale = draw(s.scale_share, &mut self.rng, update || stop);
        let purge = draw(s.purge_share, &mut self.rng, update || stop || scale);
        if stop || purge {
            if let Some(id) = self.take_followed(tally) {
                return Draw::Deregister { id, purge };
            }
        }
        let (r, scaled) = match self.pick_scalable(scale) {
            Some(r) => (r, true),
            None if update => (self.pick_update(), false),
            None => (self.register_new(), false),
        };
        let job = build_job(prefix, &s.job_mix[r.kind], r.n, r.version, r.count);
        Draw::Register {
            job,
            update: update && !scaled,
            version: r.version,
            scaled,
        }
    }

    /// Takes a service job the stream followed to running out of the
    /// registered ones (for a stop or a purge), if there is one.
    fn take_followed(&mut self, tally: &Mutex<Tally>) -> Option<String> {
        let (s, prefix) = (self.scenario, self.prefix);
        let candidates: Vec<usize> = {
            let t = tally.lock().unwrap();
            self.registered
                .iter()
                .enumerate()
                .filter(|(_, r)| !is_batch(s, r.kind) && followed(&t, s, prefix, r))
                .map(|(i, _)| i)
                .collect()
        };
        if candidates.is_empty() {
            return None;
        }
        let i = candidates[self.rng.gen_range(0..candidates.len())];
        let r = self.registered.swap_remove(i);
        Some(job_id(prefix, &s.job_mix[r.kind], r.n))
    }

    /// For a scale: a registered service job with a new count (1 to twice
    /// its kind's count, never its present one), if there is one.
    fn pick_scalable(&mut self, scale: bool) -> Option<Registered> {
        if !scale {
            return None;
        }
        let s = self.scenario;
        let scalable: Vec<usize> = (0..self.registered.len())
            .filter(|&i| s.job_mix[self.registered[i].kind].kind == Kind::Service)
            .collect();
        if scalable.is_empty() {
            return None;
        }
        let i = scalable[self.rng.gen_range(0..scalable.len())];
        let k = &s.job_mix[self.registered[i].kind];
        let mut count = self.rng.gen_range(1..=(2 * k.count).max(2) - 1);
        if count >= self.registered[i].count {
            count += 1;
        }
        self.registered[i].count = count;
        Some(self.registered[i])
    }

    /// For an update: a registered job at its next spec version.
    fn pick_update(&mut self) -> Registered {
        let i = self.rng.gen_range(0..self.registered.len());
        self.registered[i].version += 1;
        self.registered[i]
    }

    /// A new job of a kind drawn by the mix's weights.
    fn register_new(&mut self) -> Registered {
        let kind = self.weights.sample(&mut self.rng);
        let n = self.counts.entry(kind).or_default();
        *n += 1;
        let k = &self.scenario.job_mix[kind];
        let count = if k.kind == Kind::System { 1 } else { k.count };
        let r = Registered {
            kind,
            n: *n,
            version: 0,
            count,
        };
        self.registered.push(r);
        r
    }
}

fn is_batch(s: &Scenario, kind: usize) -> bool {
    s.job_mix[kind].kind == Kind::Batch
}

/// Whether the stream has followed job `r` to its end.
fn followed(t: &Tally, s: &Scenario, prefix: &str, r: &Registered) -> bool {
    t.settled.contains(&job_id(prefix, &s.job_mix[r.kind], r.n))
}

/// The job a submission registers: kind `k`, numbered `n`, at spec
/// `version`, with `count` allocations (a scale changes only that).
pub(super) fn build_job(prefix: &str, k: &JobKind, n: u64, version: u64, count: u32) -> Job {
    let update = (k.max_parallel > 0).then_some(UpdateStrategy {
        max_parallel: k.max_parallel,
        min_healthy_time_ms: k.min_healthy_time_ms,
        progress_deadline_ms: 600_000,
        ..Default::default()
    });
    Job {
        id: job_id(prefix, k, n),
        r#type: match k.kind {
            Kind::Service => JobType::Service,
            Kind::Batch => JobType::Batch,
            Kind::System => JobType::System,
        } as i32,
        task_groups: vec![TaskGroup {
            name: k.name.clone(),
            count: Some(count),
            resources: Some(Resources {
                cpu_mhz: k.cpu_mhz,
                memory_mb: k.memory_mb,
            }),
            update,
            meta: [("spec".to_string(), version.to_string())].into(),
            constraints: k
                .node_class
                .iter()
                .map(|class| Constraint {
                    target: ConstraintTarget::NodeClass as i32,
                    operand: ConstraintOperand::Equal as i32,
                    value: class.clone(),
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}
