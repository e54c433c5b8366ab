//! Change points in a series of builds: E-divisive means (Matteson and
//! James, 2014), as MongoDB's signal processing and Apache Otava use it
//! ("Change Point Detection in Software Performance Testing", ICPE 2020),
//! with a permutation test deciding whether a split is real.
//!
//! Why this method: it assumes no distribution (a rate or a latency on a
//! shared machine is skewed by its slow moments), it finds several changes
//! by splitting again inside each part, and the permutation test gives each
//! change a p-value from the series itself. Unlike a threshold on one
//! build's z-score, it uses every run on both sides of a split.
//!
//! What the harness adds: the series holds every run of a build (its
//! repetitions pooled), and a split falls only between builds, never
//! between two runs of one build. The values are logarithms, so that a
//! change of 10% weighs the same at 100 as at 10,000. Deterministic: the
//! permutations come from a fixed seed, so a history checks the same way
//! every time.
//!
//! The statistic, for the observations X (n) before a split and Y (m)
//! after it, up to a later build boundary, with distances |a - b|:
//! `Q = nm/(n+m) * (2/(nm) ΣΣ|x-y| - 1/C(n,2) Σ|x-x'| - 1/C(m,2) Σ|y-y'|)`.
//! The best split of a segment maximizes Q over the split and Y's end; the permutation test shuffles
//! the segment's observations (build sizes kept) and counts how often the
//! best split of a shuffle reaches the observed Q.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// How a series is searched.
#[derive(Debug, Clone, Copy)]
pub struct Detector {
    /// A split is kept when its permutation p-value is at most this.
    pub alpha: f64,
    /// Shuffles per test (the smallest p-value is 1/(permutations+1)).
    pub permutations: usize,
    /// The fewest runs on each side of a split.
    pub min_runs: usize,
    pub seed: u64,
}

impl Default for Detector {
    /// 1%, from 499 shuffles: a history is checked over many measures and
    /// series at once, and every one is a chance of a false alarm.
    fn default() -> Self {
        Detector {
            alpha: 0.01,
            permutations: 499,
            min_runs: 3,
            seed: 0x5eed,
        }
    }
}

/// A change found: the series changes before build `at` (the first build
/// after it), with the p-value of its test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub at: usize,
    pub p_value: f64,
}

impl Detector {
    /// The change points of `builds` (each build's values, in build
    /// order), by repeated splitting: the best split over every segment is
    /// tested, kept if significant, and the search goes on in its two
    /// halves; it stops at the first split that is not. Sorted by build.
    pub fn splits(&self, builds: &[Vec<f64>]) -> Vec<Split> {
        let logs: Vec<Vec<f64>> = (builds.iter())
            .map(|b| {
                b.iter()
                    .filter(|x| x.is_finite() && **x > 0.0)
                    .map(|x| x.ln())
                    .collect()
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut bounds = vec![0, logs.len()];
        let mut found = Vec::new();
        loop {
            let best = (bounds.windows(2))
                .filter_map(|w| {
                    let seg = &logs[w[0]..w[1]];
                    let (at, q) = self.best_split(seg)?;
                    Some((w[0], w[1], w[0] + at, q))
                })
                .max_by(|a, b| a.3.total_cmp(&b.3));
            let Some((from, to, at, q)) = best else { break };
            let p_value = self.permutation_p(&logs[from..to], q, &mut rng);
            if p_value > self.alpha {
                break;
            }
            found.push(Split { at, p_value });
            bounds.push(at);
            bounds.sort_unstable();
        }
        found.sort_by_key(|s| s.at);
        found
    }

    /// The best split of a segment of builds: the build it starts at
    /// (within the segment) and its Q; `None` when no split leaves
    /// [`Detector::min_runs`] on each side.
    fn best_split(&self, seg: &[Vec<f64>]) -> Option<(usize, f64)> {
        let flat: Vec<f64> = seg.iter().flatten().copied().collect();
        let cuts = cuts(seg);
        best_q(&flat, &cuts, self.min_runs)
    }

    /// The share of shuffles of the segment whose best split reaches `q`
    /// (counting the observed order as one of them).
    fn permutation_p(&self, seg: &[Vec<f64>], q: f64, rng: &mut StdRng) -> f64 {
        let mut flat: Vec<f64> = seg.iter().flatten().copied().collect();
        let cuts = cuts(seg);
        let mut reached = 0;
        for _ in 0..self.permutations {
            flat.shuffle(rng);
            if best_q(&flat, &cuts, self.min_runs).is_some_and(|(_, s)| s >= q * (1.0 - 1e-12)) {
                reached += 1;
            }
        }
        (reached + 1) as f64 / (self.permutations + 1) as f64
    }
}

/// The observation indexes where each build after the first starts, with
/// the build it is: the only places a split may fall.
fn cuts(seg: &[Vec<f64>]) -> Vec<(usize, usize)> {
    let mut at = 0;
    let mut out = Vec::new();
    for (b, values) in seg.iter().enumerate() {
        if b > 0 {
            out.push((at, b));
        }
        at += values.len();
    }
    out
}

/// The split among `cuts` with the largest Q, as (build, Q). As in
/// E-divisive, Y runs from the split to any later build boundary κ, not
/// only to the end, so that a change undone later (a dip in the middle of
/// a series) is found too. O(n²) with a table of prefix sums of the
/// pairwise distances.
fn best_q(xs: &[f64], cuts: &[(usize, usize)], min_runs: usize) -> Option<(usize, f64)> {
    let n = xs.len();
    let min = min_runs.max(2);
    if n < 2 * min {
        return None;
    }
    // s[i][j]: Σ|xp - xq| over p < i, q < j.
    let w = n + 1;
    let mut s = vec![0.0; w * w];
    for i in 1..=n {
        let mut row = 0.0;
        for j in 1..=n {
            row += (xs[i - 1] - xs[j - 1]).abs();
            s[i * w + j] = s[(i - 1) * w + j] + row;
        }
    }
    let block = |a: usize, b: usize, c: usize, d: usize| {
        s[b * w + d] - s[a * w + d] - s[b * w + c] + s[a * w + c]
    };
    let ends: Vec<usize> = cuts.iter().map(|c| c.0).chain([n]).collect();
    let mut best: Option<(usize, f64)> = None;
    for &(t, build) in cuts {
        if t < min {
            continue;
        }
        let fa = t as f64;
        let within_x = block(0, t, 0, t) / 2.0;
        for &k in ends.iter().filter(|&&k| k >= t + min) {
            let fb = (k - t) as f64;
            let between = block(0, t, t, k);
            let within_y = block(t, k, t, k) / 2.0;
            let e = 2.0 * between / (fa * fb)
                - within_x / (fa * (fa - 1.0) / 2.0)
                - within_y / (fb * (fb - 1.0) / 2.0);
            let q = fa * fb / (fa + fb) * e;
            if best.is_none_or(|(_, bq)| q > bq) {
                best = Some((build, q));
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// Standard normal noise without another crate (Box–Muller).
    fn normal(rng: &mut impl Rng) -> f64 {
        let (u, v): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// `builds` builds of `per_build` runs around 100 with relative noise
    /// `sd`, multiplied by `step` from build `at` on.
    fn series(
        seed: u64,
        builds: usize,
        per_build: usize,
        sd: f64,
        at: usize,
        step: f64,
    ) -> Vec<Vec<f64>> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..builds)
            .map(|b| {
                let level = if b >= at { 100.0 * step } else { 100.0 };
                (0..per_build)
                    .map(|_| level * (1.0 + sd * normal(&mut rng)))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_planted_step_is_found_at_its_build() {
        let d = Detector::default();
        for seed in 0..10 {
            let s = series(seed, 20, 1, 0.02, 12, 0.85);
            let splits = d.splits(&s);
            assert_eq!(splits.len(), 1, "seed {seed}: {splits:?}");
            assert_eq!(splits[0].at, 12, "seed {seed}");
            assert!(splits[0].p_value <= 0.01);
        }
    }

    #[test]
    fn repetitions_of_one_build_are_pooled_and_never_split() {
        // Three runs a build; the step at build 5 of 8.
        let s = series(7, 8, 3, 0.03, 5, 1.2);
        let splits = Detector::default().splits(&s);
        assert_eq!(splits.iter().map(|s| s.at).collect::<Vec<_>>(), [5]);
    }

    #[test]
    fn two_steps_are_both_found() {
        let mut s = series(3, 24, 1, 0.02, 8, 0.8);
        for b in s.iter_mut().skip(16) {
            for x in b.iter_mut() {
                *x *= 1.3;
            }
        }
        let at: Vec<usize> = Detector::default()
            .splits(&s)
            .iter()
            .map(|s| s.at)
            .collect();
        assert_eq!(at, [8, 16]);
    }

    #[test]
    fn aa_noise_flags_nothing_in_most_seeds() {
        let d = Detector::default();
        let flagged = (0..100)
            .filter(|&seed| !d.splits(&series(seed, 30, 1, 0.05, 30, 1.0)).is_empty())
            .count();
        // At 1%, about one seed in a hundred; a few is still right.
        assert!(flagged <= 4, "{flagged} of 100 A/A series flagged");
    }

    #[test]
    fn too_short_a_series_has_no_split() {
        let d = Detector::default();
        assert!(d.splits(&[vec![1.0], vec![2.0], vec![3.0]]).is_empty());
        assert!(d.splits(&[]).is_empty());
        let mut rng = StdRng::seed_from_u64(1);
        let one_build = vec![(0..30).map(|_| 100.0 + rng.gen::<f64>()).collect()];
        assert!(d.splits(&one_build).is_empty(), "one build cannot change");
    }
}
