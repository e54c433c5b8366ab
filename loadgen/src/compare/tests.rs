use super::*;
use crate::scenario::Scenario;
use crate::stats::{median_interval, Method, CONFIDENCE};
use crate::summary::comparison::FloorSource;
use crate::summary::intervals::Repetition;
use crate::summary::{BuildInfo, Builds, Round, VariantSummary};

/// A summary of `variants` of scenario `name`, as loadgen writes it.
fn summary(name: &str, variants: Vec<VariantSummary>) -> RunSummary {
    let mut scenario = Scenario::load("default").unwrap();
    scenario.name = name.into();
    RunSummary::new(&scenario, &variants, variants.len(), None, None, None)
}

/// A repetition of round `round` with these measures.
fn rep(round: usize, measures: &[(&str, f64)]) -> Repetition {
    Repetition {
        round: round as u32,
        measures: measures.iter().map(|(k, x)| (k.to_string(), *x)).collect(),
        valid: true,
    }
}

/// A summary of one variant whose repetitions have these placements/s and
/// p99 times to running.
fn run(scenario: &str, rates: &[f64], p99s: &[f64]) -> RunSummary {
    let mut v = VariantSummary {
        name: "only".into(),
        ..Default::default()
    };
    v.stream.placements_per_second = rates[0];
    v.stream.time_to_running_ms.p99 = p99s[0];
    v.confidence.repetitions = (rates.iter().zip(p99s).enumerate())
        .map(|(i, (r, p))| {
            rep(
                i + 1,
                &[("placements_per_s", *r), ("p99_time_to_running_ms", *p)],
            )
        })
        .collect();
    summary(scenario, vec![v])
}

/// Five repetitions of a steady build.
fn steady() -> RunSummary {
    run(
        "s",
        &[100.0, 104.0, 97.0, 101.0, 99.0],
        &[900.0, 950.0, 870.0, 910.0, 990.0],
    )
}

/// Five repetitions of a build 30% slower, whose jobs take 60% longer to run.
fn slower() -> RunSummary {
    run(
        "s",
        &[70.0, 72.0, 69.0, 74.0, 71.0],
        &[1500.0, 1600.0, 1450.0, 1550.0, 1520.0],
    )
}

fn verdict_of(c: &Comparison, measure: &str) -> Verdict {
    c.variants[0]
        .measures
        .iter()
        .find(|m| m.measure == measure)
        .unwrap()
        .verdict
}

#[test]
fn the_same_build_twice_is_inconclusive() {
    let a = steady();
    let b = run(
        "s",
        &[102.0, 98.0, 100.0, 103.0, 96.0],
        &[920.0, 880.0, 960.0, 900.0, 940.0],
    );
    let c = compare(&a, &b, &[], ("a", "b")).unwrap();
    assert_eq!(verdict_of(&c, "placements_per_s"), Verdict::Inconclusive);
    assert_eq!(
        verdict_of(&c, "p99_time_to_running_ms"),
        Verdict::Inconclusive
    );
    assert!(c.worse.is_empty());
    let m = &c.variants[0].measures[0];
    assert_eq!((m.samples, m.n_a, m.n_b), (Samples::Repetitions, 5, 5));
}

#[test]
fn a_clear_slowdown_is_worse_and_a_clear_speedup_better() {
    let a = steady();
    let slow = slower();
    let c = compare(&a, &slow, &[], ("a", "b")).unwrap();
    assert_eq!(verdict_of(&c, "placements_per_s"), Verdict::Worse);
    assert_eq!(verdict_of(&c, "p99_time_to_running_ms"), Verdict::Worse);
    assert_eq!(
        c.worse,
        ["only: placements_per_s", "only: p99_time_to_running_ms"]
    );
    let m = &c.variants[0].measures[0];
    assert!(m.hi < 1.0 && m.lo > 0.6, "{m:?}");

    let back = compare(&slow, &a, &[], ("b", "a")).unwrap();
    assert_eq!(verdict_of(&back, "placements_per_s"), Verdict::Better);
    assert!(back.worse.is_empty());
}

#[test]
fn only_the_named_gates_fail_a_comparison() {
    let a = steady();
    let slow = slower();
    let gates = ["p99_time_to_running_ms".to_string()];
    let c = compare(&a, &slow, &gates, ("a", "b")).unwrap();
    assert_eq!(c.worse, ["only: p99_time_to_running_ms"]);
    let err = compare(&a, &slow, &["speed".to_string()], ("a", "b")).unwrap_err();
    assert!(
        err.to_string().contains("--gate speed: no such measure"),
        "{err}"
    );
}

#[test]
fn one_figure_each_gives_no_verdict() {
    let a = run("s", &[100.0], &[900.0]);
    let b = run("s", &[50.0], &[2000.0]);
    let c = compare(&a, &b, &[], ("a", "b")).unwrap();
    let m = &c.variants[0].measures[0];
    assert_eq!(
        (m.verdict, m.samples),
        (Verdict::Inconclusive, Samples::Single)
    );
    assert!(
        m.why.as_deref().unwrap().contains("too few samples"),
        "{m:?}"
    );
    assert!((m.ratio - 0.5).abs() < 1e-9);
}

#[test]
fn a_single_run_is_judged_on_its_windows() {
    let windows = |xs: &[f64]| median_interval(xs, CONFIDENCE, Method::BatchMeans).unwrap();
    let mut a = run("s", &[100.0], &[900.0]);
    let mut b = run("s", &[60.0], &[900.0]);
    let (wa, wb) = (
        windows(&[100.0, 98.0, 103.0, 99.0, 101.0, 100.0]),
        windows(&[60.0, 61.0, 59.0, 62.0, 58.0, 60.0]),
    );
    a.variants[0]
        .confidence
        .intervals
        .insert("placements_per_s".into(), wa);
    b.variants[0]
        .confidence
        .intervals
        .insert("placements_per_s".into(), wb);
    let c = compare(&a, &b, &[], ("a", "b")).unwrap();
    let m = &c.variants[0].measures[0];
    assert_eq!(
        (m.verdict, m.samples, m.n_a),
        (Verdict::Worse, Samples::Windows, 6)
    );
}

#[test]
fn a_change_wholly_inside_the_noise_floor_is_the_same_and_one_reaching_into_it_is_inconclusive() {
    // Placements/s 2% lower, very steadily: the interval excludes 1 but
    // lies inside the measure's 3% floor (two separate runs: their own tiny
    // spread does not lower the fixed floor).
    let a = run("s", &[100.0, 100.1, 99.9, 100.0, 100.05], &[900.0; 5]);
    let b = run("s", &[98.0, 98.1, 97.9, 98.0, 98.05], &[900.0; 5]);
    let c = compare(&a, &b, &[], ("a", "b")).unwrap();
    let m = &c.variants[0].measures[0];
    assert!(m.hi < 1.0, "{m:?}");
    assert_eq!(
        (m.verdict, m.floor, m.floor_source),
        (Verdict::Same, 0.03, FloorSource::Fixed)
    );
    // 3% lower with a spread of about 1%: the interval crosses the floor's edge.
    let b = run("s", &[96.0, 98.0, 97.0, 96.5, 97.5], &[900.0; 5]);
    let a = run("s", &[100.0, 99.0, 101.0, 100.5, 99.5], &[900.0; 5]);
    let m = compare(&a, &b, &[], ("a", "b")).unwrap().variants[0].measures[0].clone();
    assert!(m.lo < 1.0 / 1.03 && m.hi > 1.0 / 1.03, "{m:?}");
    assert_eq!(m.verdict, Verdict::Inconclusive);
    assert!(m.why.as_deref().unwrap().contains("noise floor"), "{m:?}");
}

/// One run of two variants, `base` and `new`, whose rounds had these
/// placements/s: the summary with its seed and rounds, as loadgen writes it.
fn one_run(base: &[f64], new: &[f64]) -> RunSummary {
    let variant = |name: &str, xs: &[f64]| {
        let mut v = VariantSummary {
            name: name.into(),
            ..Default::default()
        };
        v.stream.placements_per_second = xs[0];
        v.confidence.repetitions = (xs.iter().enumerate())
            .map(|(i, x)| rep(i + 1, &[("placements_per_s", *x)]))
            .collect();
        v
    };
    let mut run = summary("s", vec![variant("base", base), variant("new", new)]);
    run.seed = Some(7);
    run.rounds = (1..=base.len() as u32)
        .map(|round| Round {
            round,
            order: vec!["new".into(), "base".into()],
        })
        .collect();
    run
}

#[test]
fn two_variants_of_one_run_are_paired_round_by_round_against_a_calibrated_floor() {
    // The machine drifts ±20% from round to round, and the new build is 8%
    // slower in every round: pooled, the drift hides it; paired, it shows.
    let base = [100.0, 120.0, 85.0, 110.0, 95.0, 105.0];
    let new: Vec<f64> = base
        .iter()
        .zip([1.0, 0.99, 1.01, 1.0, 1.005, 0.995])
        .map(|(x, e)| x * 0.92 * e)
        .collect();
    let run = one_run(&base, &new);
    let (mut a, mut b) = (run.clone(), run.clone());
    pick(&mut a, Path::new("run"), "base", "base").unwrap();
    pick(&mut b, Path::new("run"), "new", "base").unwrap();
    let m = compare(&a, &b, &[], ("run:base", "run:new"))
        .unwrap()
        .variants[0]
        .measures[0]
        .clone();
    assert_eq!(
        (m.samples, m.verdict, m.floor_source),
        (Samples::Rounds, Verdict::Worse, FloorSource::Calibrated)
    );
    assert!((m.ratio - 0.92).abs() < 0.01 && m.hi < 0.95, "{m:?}");
    // Half the rounds' ±10% spread: a floor of about 5%, not the fixed 3%.
    assert!(m.floor > 0.03, "{m:?}");

    // The same figures as two separate runs (no shared rounds): pooled,
    // the drift makes it inconclusive.
    let mut apart = b.clone();
    apart.seed = Some(8);
    let m = compare(&a, &apart, &[], ("a", "b")).unwrap().variants[0].measures[0].clone();
    assert_eq!(
        (m.samples, m.verdict),
        (Samples::Repetitions, Verdict::Inconclusive)
    );
}

#[test]
fn one_build_against_itself_in_one_run_is_the_same_not_a_change() {
    // A/A: both variants move together with the drift, each with its own
    // 1% noise.
    let base = [100.0, 120.0, 85.0, 110.0, 95.0, 105.0, 90.0, 115.0];
    let noise = [1.01, 0.99, 1.0, 1.005, 0.995, 1.01, 0.99, 1.0];
    let new: Vec<f64> = base.iter().zip(noise).map(|(x, e)| x * e).collect();
    let run = one_run(&base, &new);
    let (mut a, mut b) = (run.clone(), run);
    pick(&mut a, Path::new("run"), "base", "base").unwrap();
    pick(&mut b, Path::new("run"), "new", "base").unwrap();
    let m = compare(&a, &b, &[], ("a", "b")).unwrap().variants[0].measures[0].clone();
    assert_eq!(m.samples, Samples::Rounds);
    assert_ne!(m.verdict, Verdict::Worse);
    assert_ne!(m.verdict, Verdict::Better);
}

#[test]
fn different_scenarios_or_variants_cannot_be_compared() {
    let a = run("default", &[1.0], &[1.0]);
    let b = run("c2m-mini", &[1.0], &[1.0]);
    let err = compare(&a, &b, &[], ("a", "b")).unwrap_err();
    assert!(matches!(err, Mismatch::Scenarios { .. }), "{err}");
    let mut c = run("default", &[1.0], &[1.0]);
    c.variants[0].name = "legacy".into();
    let err = compare(&a, &c, &[], ("a", "b")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "different variants: A has [only], B has [legacy]"
    );
}

#[test]
fn the_page_and_table_show_every_verdict() {
    let a = steady();
    let slow = slower();
    let c = compare(&a, &slow, &[], ("runs/a", "runs/b")).unwrap();
    let table = page::table(&c);
    assert!(
        table.contains("WORSE") && table.contains("worse: only: placements_per_s"),
        "{table}"
    );
    let html = page::html(&c, &a, &slow);
    assert!(
        html.contains("<td class=\"worse\"") && html.contains("runs/b"),
        "{html}"
    );
}

#[test]
fn two_variants_of_one_run_compare_as_one_and_a_missing_one_is_named() {
    // One run of two variants: the steady build, and the slower one.
    let mut both = steady();
    let mut slow = slower().variants[0].clone();
    slow.name = "slow".into();
    both.variants.push(slow);
    let (mut a, mut b) = (both.clone(), both);
    pick(&mut a, Path::new("run"), "only", "only").unwrap();
    pick(&mut b, Path::new("run"), "slow", "only").unwrap();
    let c = compare(&a, &b, &[], ("run:only", "run:slow")).unwrap();
    assert_eq!(verdict_of(&c, "placements_per_s"), Verdict::Worse);

    let err = pick(&mut steady(), Path::new("run"), "timed", "timed").unwrap_err();
    assert_eq!(err.to_string(), "run: no variant \"timed\" (it has only)");
}

#[test]
fn the_table_and_the_json_name_the_builds_each_side_ran() {
    let build = |commit: &str, dirty: bool| BuildInfo {
        commit: commit.into(),
        dirty,
        version: "0.1.0".into(),
    };
    let builds = |commit: &str, dirty: bool| Builds {
        cluster: Some(build(commit, dirty)),
        nodesim: Some(build(commit, dirty)),
        loadgen: Some(build("1111111111111111", false)),
    };
    let (mut a, mut b) = (steady(), slower());
    a.variants[0].build = builds("aaaaaaaaaaaaaaaa", false);
    b.variants[0].build = builds("bbbbbbbbbbbbbbbb", true);
    // The run's build is its first variant's.
    let (a, b) = (summary("s", a.variants), summary("s", b.variants));
    let c = compare(&a, &b, &[], ("runs/a", "runs/b")).unwrap();
    let table = page::table(&c);
    assert!(
        table.contains("A ran cluster aaaaaaaaaaaa, nodesim aaaaaaaaaaaa, loadgen 111111111111"),
        "{table}"
    );
    assert!(
        table.contains("B ran cluster bbbbbbbbbbbb+dirty, nodesim bbbbbbbbbbbb+dirty"),
        "{table}"
    );
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["build_a"]["cluster"]["commit"], "aaaaaaaaaaaaaaaa");
    assert_eq!(json["build_b"]["cluster"]["dirty"], true);
    assert_eq!(
        json["variants"][0]["build_b"]["nodesim"]["commit"],
        "bbbbbbbbbbbbbbbb"
    );
    assert!(page::html(&c, &a, &b).contains("bbbbbbbbbbbb+dirty"));
}

#[test]
fn a_file_that_is_not_a_summary_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("summary.json");
    std::fs::write(
        &path,
        "{\"schema_version\": 1, \"variants\": [{\"name\": 3}]}",
    )
    .unwrap();
    let err = load(dir.path()).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}: not a loadgen summary.json", path.display())),
        "{err}"
    );
    assert!(err.contains("invalid type"), "{err}");
}
