//! Confidence intervals for the figures of repeated runs, and for the ratio
//! of two runs' figures. Both are distribution-free (no normality assumed:
//! a run's latency or rate on a shared machine is skewed by its slow
//! moments), built from order statistics, and they say the confidence they
//! actually reach: with few samples the exact level is below the one asked
//! for, and a caller shows it rather than pretending.
//!
//! - [`median_interval`]: the median of a sample with the classic
//!   order-statistics interval (the binomial sign-test inversion).
//! - [`ratio_interval`]: how B compares with A as a ratio: the
//!   Hodges–Lehmann estimate of the shift between the logarithms of the two
//!   samples, with the Mann–Whitney (Moses) interval for it, turned back
//!   into a ratio. It assumes only that B's values are A's scaled by one
//!   factor, plus noise of the same shape.
//! - [`paired_ratio_interval`]: the same ratio when A and B ran in the same
//!   rounds (one run, variants interleaved): the Hodges–Lehmann estimate
//!   of the rounds' own log ratios (the median of their pairwise means,
//!   the Walsh averages) with the exact Wilcoxon signed-rank interval.
//!   Pairing takes out what a round shares (the machine's drift, a busy
//!   neighbour), and ranks keep one odd round (a stall of the machine)
//!   from widening the interval as it would a mean's.
//! - [`log_spread`]: how much one variant's figure varies from run to run
//!   (a robust standard deviation of its logarithm), for noise floors.
//!
//! Everything here is pure and tested on synthetic data of known
//! distribution (see the tests: coverage over 1,000 seeded trials).

use serde::{Deserialize, Serialize};

/// The level every interval of a run or comparison is built for.
pub const CONFIDENCE: f64 = 0.95;

/// How an interval was made; its name is what `summary.json` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum Method {
    /// Over repetitions of the run: the distribution-free interval for the
    /// median from order statistics.
    OrderStatistics,
    /// Over one run's own time windows (batch means), the same interval:
    /// tells how steady the run was, not how a rerun would land.
    BatchMeans,
}

/// A median with its interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Interval {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
    pub method: Method,
    /// The confidence the interval reaches exactly (below [`CONFIDENCE`]
    /// with fewer than six samples: min to max of five covers 93.75%).
    pub confidence: f64,
    /// The samples it was built from.
    pub samples: Vec<f64>,
}

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> Option<f64> {
    let s = sorted(xs);
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// The median of `xs` with the widest-needed order-statistics interval that
/// reaches `level`: `[x(j), x(n+1-j)]` covers the true median with
/// probability `1 - 2 P(Bin(n, 1/2) < j)`. With too few samples for
/// `level`, min to max, and the confidence it reaches. `None` for no
/// samples or a sample that is not a number.
pub fn median_interval(xs: &[f64], level: f64, method: Method) -> Option<Interval> {
    if xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let s = sorted(xs);
    let n = s.len();
    let median = median(&s)?;
    let binom = binomial_cdf_half(n);
    let (j, confidence) = order_bounds(n, level, |j| 1.0 - 2.0 * binom[j]);
    Some(Interval {
        median,
        lo: s[j - 1],
        hi: s[n - j],
        method,
        confidence,
        samples: xs.to_vec(),
    })
}

/// How B compares with A, as the ratio B/A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    /// The confidence the interval reaches exactly.
    pub confidence: f64,
}

/// The ratio of B to A (Hodges–Lehmann on logarithms) with its Moses
/// interval at `level` or, with too few samples for it, the widest one and
/// the confidence that reaches. `None` when either side is empty or holds a
/// value that is not a positive number (a ratio of zeros means nothing).
pub fn ratio_interval(a: &[f64], b: &[f64], level: f64) -> Option<Ratio> {
    let positive = |xs: &[f64]| !xs.is_empty() && xs.iter().all(|x| x.is_finite() && *x > 0.0);
    if !positive(a) || !positive(b) {
        return None;
    }
    let mut diffs: Vec<f64> = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| y.ln() - x.ln()))
        .collect();
    diffs.sort_by(f64::total_cmp);
    let estimate = median(&diffs)?;
    // U counts the pairs on one side; P(U < k) on each tail is what the
    // interval [d(k), d(N+1-k)] leaves out.
    let u_cdf = mann_whitney_cdf(a.len(), b.len());
    let total = diffs.len();
    let (k, confidence) = order_bounds(total, level, |k| 1.0 - 2.0 * u_cdf[k]);
    Some(Ratio {
        ratio: estimate.exp(),
        lo: diffs[k - 1].exp(),
        hi: diffs[total - k].exp(),
        confidence,
    })
}

/// The ratio B/A from `pairs` of (A, B) figures of the same rounds: the
/// Hodges–Lehmann estimate of the rounds' log ratios with the signed-rank
/// interval at `level` or, with too few rounds for it, the widest one and
/// the confidence that reaches (six rounds reach 96.9%, five 93.75%).
/// `None` with fewer than two pairs or a figure that is not a positive
/// number.
pub fn paired_ratio_interval(pairs: &[(f64, f64)], level: f64) -> Option<Ratio> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    if pairs.len() < 2 || !pairs.iter().all(|(a, b)| ok(*a) && ok(*b)) {
        return None;
    }
    let d: Vec<f64> = pairs.iter().map(|(a, b)| b.ln() - a.ln()).collect();
    let d = &d;
    let mut walsh: Vec<f64> = (0..d.len())
        .flat_map(|i| d[i..].iter().map(move |y| (d[i] + y) / 2.0))
        .collect();
    walsh.sort_by(f64::total_cmp);
    let estimate = median(&walsh)?;
    // The interval [w(k), w(N+1-k)] leaves out P(T < k) on each tail, T the
    // signed-rank statistic under no difference.
    let t_cdf = signed_rank_cdf(d.len());
    let total = walsh.len();
    let (k, confidence) = order_bounds(total, level, |k| 1.0 - 2.0 * t_cdf[k]);
    Some(Ratio {
        ratio: estimate.exp(),
        lo: walsh[k - 1].exp(),
        hi: walsh[total - k].exp(),
        confidence,
    })
}

/// The most confidence a paired interval of `n` rounds can reach: its
/// widest, min to max of the Walsh averages (`1 - 2 / 2^n`).
pub fn paired_max_confidence(n: usize) -> f64 {
    1.0 - 2.0 * 0.5f64.powi(n as i32)
}

/// `cdf[k] = P(T < k)` for k in 0..=n(n+1)/2, with T the Wilcoxon
/// signed-rank statistic of `n` pairs under no difference.
fn signed_rank_cdf(n: usize) -> Vec<f64> {
    let total = n * (n + 1) / 2;
    // p[t]: the chance that the ranks with a positive sign sum to t, built
    // one rank at a time (each positive or not with chance 1/2).
    let mut p = vec![0.0; total + 1];
    p[0] = 1.0;
    for rank in 1..=n {
        for t in (0..=total).rev() {
            let with = if t >= rank { p[t - rank] } else { 0.0 };
            p[t] = (p[t] + with) / 2.0;
        }
    }
    let mut cdf = Vec::with_capacity(total + 1);
    let mut acc = 0.0;
    for x in &p {
        cdf.push(acc);
        acc += x;
    }
    cdf
}

/// How much `xs` (one variant's figure over its runs) varies: the median
/// absolute deviation of the logarithms scaled to a standard deviation
/// (1.4826 MAD), about the relative spread (0.05: runs differ by about 5%).
/// Robust to one odd run. `None` with fewer than three positive values.
pub fn log_spread(xs: &[f64]) -> Option<f64> {
    if xs.len() < 3 || !xs.iter().all(|x| x.is_finite() && *x > 0.0) {
        return None;
    }
    let logs: Vec<f64> = xs.iter().map(|x| x.ln()).collect();
    let mid = median(&logs)?;
    let dev: Vec<f64> = logs.iter().map(|x| (x - mid).abs()).collect();
    Some(1.4826 * median(&dev)?)
}

/// For an interval between the k-th smallest and k-th largest of `n`
/// ordered values, whose coverage is `coverage(k)` (falling as k grows):
/// the narrowest that still reaches `level` (largest k), or min to max
/// (k = 1) when none does, with the coverage it has.
fn order_bounds(n: usize, level: f64, coverage: impl Fn(usize) -> f64) -> (usize, f64) {
    let mut k = 1;
    while k < n.div_ceil(2) && coverage(k + 1) >= level {
        k += 1;
    }
    (k, coverage(k).max(0.0))
}

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// `cdf[j] = P(Bin(n, 1/2) < j)` for j in 0..=n.
fn binomial_cdf_half(n: usize) -> Vec<f64> {
    // Probabilities by the recurrence C(n, i+1) = C(n, i) (n-i)/(i+1), in
    // logs so that large n neither overflows nor underflows.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut cdf = Vec::with_capacity(n + 1);
    let (mut acc, mut ln_c) = (0.0, 0.0);
    for i in 0..=n {
        cdf.push(acc);
        acc += (ln_c + ln_half_n).exp();
        ln_c += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    cdf
}

/// `cdf[k] = P(U < k)` for k in 0..=n*m, with U the Mann–Whitney count of
/// pairs (x from A, y from B) with y below x, under no difference.
fn mann_whitney_cdf(n: usize, m: usize) -> Vec<f64> {
    let total = n * m;
    // ways[i][j][u]: arrangements of i of A and j of B with count u, built
    // one sample at a time; only the current row of i is kept.
    let mut prev: Vec<Vec<f64>> = vec![vec![0.0; total + 1]; m + 1];
    for row in prev.iter_mut() {
        row[0] = 1.0; // no A samples: U = 0 in one way
    }
    for i in 1..=n {
        let mut cur: Vec<Vec<f64>> = vec![vec![0.0; total + 1]; m + 1];
        cur[0][0] = 1.0;
        for j in 1..=m {
            for u in 0..=i * j {
                // The largest of the i + j is A's (it is above all j of B:
                // adds j) or B's (adds nothing).
                let from_a = if u >= j { prev[j][u - j] } else { 0.0 };
                cur[j][u] = from_a + cur[j - 1][u];
            }
        }
        prev = cur;
    }
    let ways = &prev[m];
    let all: f64 = ways.iter().sum();
    let mut cdf = Vec::with_capacity(total + 1);
    let mut acc = 0.0;
    for w in ways.iter() {
        cdf.push(acc / all);
        acc += w;
    }
    cdf
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// A skewed sample with a known median: exp(normal(mu, 0.3)) has median e^mu.
    fn lognormal(rng: &mut StdRng, mu: f64, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| {
                // Box–Muller: two uniforms give one standard normal.
                let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                (mu + 0.3 * z).exp()
            })
            .collect()
    }

    #[test]
    fn the_median_interval_covers_the_true_median_about_95_percent_of_the_time() {
        let mut rng = StdRng::seed_from_u64(38);
        let true_median = 2f64.exp();
        let trials = 1000;
        let covered = (0..trials)
            .filter(|_| {
                let i = median_interval(
                    &lognormal(&mut rng, 2.0, 20),
                    CONFIDENCE,
                    Method::OrderStatistics,
                )
                .unwrap();
                i.lo <= true_median && true_median <= i.hi
            })
            .count();
        let rate = covered as f64 / trials as f64;
        // 20 samples: [x(6), x(15)] reaches 95.86% exactly; 1,000 trials
        // put the observed rate within about ±1.9 points of it (3 sigma).
        assert!((0.935..=0.985).contains(&rate), "coverage {rate}");
    }

    #[test]
    fn five_samples_give_min_to_max_at_the_confidence_it_reaches() {
        let i = median_interval(
            &[5.0, 1.0, 3.0, 2.0, 4.0],
            CONFIDENCE,
            Method::OrderStatistics,
        )
        .unwrap();
        assert_eq!((i.median, i.lo, i.hi), (3.0, 1.0, 5.0));
        assert!((i.confidence - 0.9375).abs() < 1e-12, "{}", i.confidence);
        assert_eq!(i.samples.len(), 5);
    }

    #[test]
    fn no_interval_of_nothing_or_of_not_a_number() {
        assert!(median_interval(&[], CONFIDENCE, Method::BatchMeans).is_none());
        assert!(median_interval(&[1.0, f64::NAN], CONFIDENCE, Method::BatchMeans).is_none());
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn the_ratio_interval_covers_the_true_ratio_about_95_percent_of_the_time() {
        let mut rng = StdRng::seed_from_u64(7);
        let trials = 1000;
        let true_ratio = 1.1f64;
        let covered = (0..trials)
            .filter(|_| {
                let a = lognormal(&mut rng, 3.0, 8);
                let b = lognormal(&mut rng, 3.0 + true_ratio.ln(), 8);
                let r = ratio_interval(&a, &b, CONFIDENCE).unwrap();
                r.lo <= true_ratio && true_ratio <= r.hi
            })
            .count();
        let rate = covered as f64 / trials as f64;
        assert!((0.93..=0.985).contains(&rate), "coverage {rate}");
    }

    #[test]
    fn the_ratio_of_a_clear_slowdown_excludes_no_change() {
        let a = [100.0, 102.0, 98.0, 101.0, 99.0];
        let b = [150.0, 149.0, 152.0, 148.0, 151.0];
        let r = ratio_interval(&a, &b, CONFIDENCE).unwrap();
        assert!(
            r.lo > 1.4 && r.hi < 1.6 && (r.ratio - 1.5).abs() < 0.02,
            "{r:?}"
        );
        // Five against five reaches 96.8%: U < 3 on each tail is 4 of the
        // 252 arrangements (U < 4 would be 7, only 94.4%).
        assert!(
            (r.confidence - (1.0 - 2.0 * 4.0 / 252.0)).abs() < 1e-9,
            "{r:?}"
        );
    }

    #[test]
    fn one_sample_each_gives_a_ratio_but_no_confidence() {
        let r = ratio_interval(&[2.0], &[3.0], CONFIDENCE).unwrap();
        assert!((r.lo - 1.5).abs() < 1e-12 && r.lo == r.hi, "{r:?}");
        assert_eq!(r.confidence, 0.0);
        assert!(ratio_interval(&[0.0], &[3.0], CONFIDENCE).is_none());
        assert!(ratio_interval(&[], &[3.0], CONFIDENCE).is_none());
    }

    #[test]
    fn the_paired_interval_covers_the_true_ratio_at_its_level_under_shared_drift() {
        // Each round shares a drift of up to ±30% (what pairing takes out)
        // and each run adds its own lognormal noise of 5%.
        let mut rng = StdRng::seed_from_u64(50);
        let (trials, true_ratio) = (1000, 1.1f64);
        let mut widths = Vec::new();
        let covered = (0..trials)
            .filter(|_| {
                let pairs: Vec<(f64, f64)> = (0..8)
                    .map(|_| {
                        let drift = 100.0 * rng.gen_range(0.7..1.3);
                        let noise = |rng: &mut StdRng| lognormal(rng, 0.0, 1)[0].powf(1.0 / 6.0);
                        (
                            drift * noise(&mut rng),
                            drift * true_ratio * noise(&mut rng),
                        )
                    })
                    .collect();
                let r = paired_ratio_interval(&pairs, CONFIDENCE).unwrap();
                widths.push(r.hi / r.lo);
                r.lo <= true_ratio && true_ratio <= r.hi
            })
            .count();
        let rate = covered as f64 / trials as f64;
        // Eight rounds: [w(4), w(33)] reaches 96.1% exactly.
        assert!((0.94..=0.98).contains(&rate), "coverage {rate}");
        // Unpaired, the ±30% drift would make the interval wider than 1.3×;
        // paired it is set by the runs' own 5% noise.
        let w = median(&widths).unwrap();
        assert!(w < 1.2, "median width {w}");
    }

    #[test]
    fn one_odd_round_does_not_hide_a_change_seen_in_every_round() {
        // B is 1.7× A in every round, and 3.5× in one (a stall).
        let pairs = [
            (57.0, 198.0),
            (57.0, 97.0),
            (65.0, 114.0),
            (65.0, 99.0),
            (56.0, 96.0),
            (57.0, 91.0),
        ];
        let r = paired_ratio_interval(&pairs, CONFIDENCE).unwrap();
        assert!(r.lo > 1.5 && r.ratio > 1.6 && r.ratio < 1.9, "{r:?}");
        assert!(
            (r.confidence - paired_max_confidence(6)).abs() < 1e-12 || r.confidence >= CONFIDENCE
        );
    }

    #[test]
    fn a_paired_interval_needs_two_positive_pairs_and_a_higher_level_is_wider() {
        assert!(paired_ratio_interval(&[(1.0, 2.0)], CONFIDENCE).is_none());
        assert!(paired_ratio_interval(&[(1.0, 2.0), (0.0, 1.0)], CONFIDENCE).is_none());
        let pairs: Vec<(f64, f64)> = [1.21, 1.18, 1.24, 1.14, 1.2, 1.17, 1.19, 1.22, 1.16, 1.2]
            .iter()
            .enumerate()
            .map(|(i, r)| (100.0 + i as f64, (100.0 + i as f64) * r))
            .collect();
        let r95 = paired_ratio_interval(&pairs, 0.95).unwrap();
        let r99 = paired_ratio_interval(&pairs, 0.99).unwrap();
        assert!(
            r95.lo > 1.1 && r99.lo < r95.lo && r99.hi > r95.hi,
            "{r95:?} {r99:?}"
        );
        assert!((r95.ratio - 1.19).abs() < 0.01, "{r95:?}");
        // Five rounds reach 93.75% at most (min to max), whatever is asked.
        let r = paired_ratio_interval(&pairs[..5], 0.99).unwrap();
        assert!((r.confidence - 0.9375).abs() < 1e-12, "{r:?}");
        assert_eq!(paired_max_confidence(5), 0.9375);
        let cdf = signed_rank_cdf(10);
        assert!((cdf[cdf.len() - 1] + 1.0 / 1024.0 - 1.0).abs() < 1e-12);
        // P(T <= 8) for ten pairs is 25/1024 (tables of the signed-rank test).
        assert!((cdf[9] - 25.0 / 1024.0).abs() < 1e-12, "{}", cdf[9]);
    }

    #[test]
    fn the_log_spread_is_the_relative_spread_and_ignores_one_odd_run() {
        assert_eq!(log_spread(&[1.0, 2.0]), None);
        let s = log_spread(&[100.0, 105.0, 95.0, 300.0, 100.0]).unwrap();
        assert!((0.03..0.08).contains(&s), "{s}");
    }

    #[test]
    fn the_exact_distributions_sum_to_one() {
        let b = binomial_cdf_half(10);
        assert!((b[10] + 0.5f64.powi(10) - 1.0).abs() < 1e-12);
        let u = mann_whitney_cdf(3, 4);
        // 35 arrangements; U = 0 in one of them.
        assert!((u[1] - 1.0 / 35.0).abs() < 1e-12);
        assert!((u[12] + 1.0 / 35.0 - 1.0).abs() < 1e-12);
    }
}
