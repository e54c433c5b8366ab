//! `report.html` in a real browser: a report of a made-up sweep with faults
//! and a search, opened in headless Chromium. What the page's script says
//! it drew is read from the DOM; a screenshot at a laptop's width is
//! checked for its size and for being more than a blank page.
//! (`capacity.rs` opens the report of a real run the same way.)

use crate::common;

use std::path::Path;

use common::browser;
use loadgen::report::{RunData, VariantData};
use loadgen::{
    critical_path_figures, sketch_quantiles, slowest_paths, FaultAction, FaultReport, Interval,
    JobPath, LatencyQuantiles, Method, Point, Probe, RunSummary, Scenario, SearchReport, Series,
    Target, Validity, VariantSummary, SCHEMA_VERSION,
};

const SWEEP: &str = r#"
name = "sweep"
description = "a made-up sweep over the rate"
nodes = 40
duration = "60s"
arrival = { process = "constant", rate = 2.0 }

[[jobs]]
name = "web"
type = "service"
count = 2
cpu_mhz = 100

[sweep]
parameter = "rate"
values = [2.0, 4.0, 8.0]

[slo]
p99_placement_ms = 400.0
p99_running_ms = 2500.0
"#;

/// A process's samples over a minute, every two seconds.
fn series(name: &str, scale: f64) -> Series {
    let points = (0..=30)
        .map(|i| {
            let t = 2.0 * i as f64;
            let mut values: std::collections::BTreeMap<String, f64> = [
                ("process_cpu_seconds_total", 0.3 * scale * t),
                ("process_resident_memory_bytes", (80.0 + t) * 1048576.0),
                ("stampede_broker_ready", (t / 7.0).sin().abs() * 5.0 * scale),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            for (kind, rate) in [("job_register", 2.0), ("plan_apply", 3.0)] {
                values.insert(
                    format!("stampede_raft_entries_total{{type=\"{kind}\"}}"),
                    rate * scale * t,
                );
            }
            for (name, v) in [
                (
                    "stampede_nodesim_update_rpcs_total{priority=\"high\"}",
                    4.0 * t,
                ),
                (
                    "stampede_blocking_queries_started_total{source=\"loadgen\"}",
                    5.0 * t,
                ),
                (
                    "stampede_blocking_queries_inflight{source=\"loadgen\"}",
                    3.0 + t % 5.0,
                ),
            ] {
                values.insert(name.into(), v);
            }
            Point { t, values }
        })
        .collect();
    // Tagged as a run tags the processes it samples.
    let target = match name.strip_prefix("server-") {
        Some(id) => Target::server(id, String::new()),
        None => Target::nodesim(None, String::new()),
    };
    Series {
        target,
        points,
        lost_at: None,
        last_text: None,
    }
}

/// A variant at `rate`, and what the report draws of it.
fn variant(rate: f64) -> (VariantSummary, VariantData) {
    let q = sketch_quantiles();
    let mut v = VariantSummary {
        name: format!("rate-{rate}"),
        faults: vec![FaultReport {
            action: FaultAction::KillLeader,
            at_s: 20.0,
            scheduled_at_s: 20.0,
            duration_s: 5.0,
            servers: vec![1],
            leader_before: Some(1),
            time_to_leader_s: Some(1.2),
            leader_after: Some(2),
            unavailable_s: Some(1.4),
            elections: Some(1),
            recovered_s: Some(25.0),
            throughput_before: Some(rate),
            throughput_after: Some(rate),
            control_plane_recovery_s: Some(2.0),
            catch_up_time_s: Some(0.3),
            snapshots_installed: Some(1),
        }],
        ..Default::default()
    };
    v.stream.latency_quantiles = LatencyQuantiles {
        placement_ms: q
            .iter()
            .map(|q| 20.0 * rate * (1.0 + 4.0 * q.powi(4)))
            .collect(),
        time_to_running_ms: q
            .iter()
            .map(|q| 300.0 * rate * (1.0 + 3.0 * q.powi(3)))
            .collect(),
        q,
    };
    let paths = job_paths(rate);
    let cores = [("nodesim".to_string(), 0.9)].into();
    v.critical_path = critical_path_figures(&paths, 1, &cores, rate);
    v.stream.placement_ms.p99 = 100.0 * rate;
    v.stream.time_to_running_ms.p99 = 1200.0 * rate;
    let data = VariantData {
        series: vec![
            series("server-1", rate),
            series("server-2", rate / 2.0),
            series("nodesim", 1.0),
        ],
        acks_per_second: (1..60).map(|t| (t as f64, rate)).collect(),
        slowest_paths: slowest_paths(&paths, 5, &v.name),
    };
    (v, data)
}

/// The report page of `s`, each variant drawn from its `data`.
fn html(s: &RunSummary, data: &[VariantData]) -> String {
    let by_name: RunData = (s.variants.iter().zip(data))
        .map(|(v, d)| (v.name.as_str(), d))
        .collect();
    loadgen::report::html(s, &by_name)
}

/// Twelve jobs' paths: job `i` waits `i * rate` ms for its running report.
fn job_paths(rate: f64) -> Vec<JobPath> {
    (0..12u64)
        .map(|i| {
            let mut boundaries = [0u64; 12];
            for s in 1..12 {
                let report_running = (i as f64 * rate * 1000.0) as u64;
                // No rollout; report_running is the tenth stage.
                let ms = match s {
                    2 => 0,
                    10 => report_running,
                    _ => 2000,
                };
                boundaries[s] = boundaries[s - 1] + ms;
            }
            JobPath {
                job_id: format!("web-{i}"),
                boundaries: boundaries.map(|b| b + 1_700_000_000_000_000),
                clamps: 0,
                clamped_us: 0,
                bounded: 0,
                bounded_us: 0,
            }
        })
        .collect()
}

/// A sweep of three rates, and what the report draws of each.
fn summary() -> (RunSummary, Vec<VariantData>) {
    let probe = |value: f64, passed: bool| Probe {
        value,
        passed,
        p99_placement_ms: 50.0 * value,
        p99_running_ms: 400.0 * value,
        breaches: if passed {
            vec![]
        } else {
            vec!["p99 time to running too slow".into()]
        },
        repeat: false,
        seconds: 60.0,
        valid: true,
        invalid: vec![],
        placements_per_s: 9.0 * value,
    };
    let (variants, data) = [2.0, 4.0, 8.0].map(variant).into_iter().unzip();
    let s = RunSummary {
        schema_version: SCHEMA_VERSION,
        build: Default::default(),
        scenario: Scenario::parse(SWEEP, "sweep.toml").unwrap(),
        raft_entries_by_type: Default::default(),
        blocking_queries_by_source: Default::default(),
        variants,
        slo_breaches: vec![],
        regressions: vec![],
        audit_failures: vec![],
        invariants: vec![],
        complete: true,
        prometheus: None,
        search: Some(SearchReport {
            parameter: "rate".into(),
            max_passing: Some(4.0),
            at_least: false,
            harness_limit: None,
            min_failing: Some(8.0),
            probes: vec![probe(2.0, true), probe(4.0, true), probe(8.0, false)],
            confidence: "made up".into(),
            budget_seconds: 600.0,
            spent_seconds: 180.0,
            placements_per_job: Some(10.0),
            max_passing_placements_per_s: Some(40.0),
            min_failing_placements_per_s: Some(80.0),
            taken_placements_per_s: Some(36.0),
        }),
        seed: None,
        rounds: vec![],
        sequential: None,
        machine: None,
    };
    (s, data)
}

#[test]
fn the_page_says_first_whether_each_variant_was_valid_and_shows_the_intervals() {
    let (mut s, data) = summary();
    s.variants[2].confidence.validity = Validity {
        valid: false,
        reasons: vec![
            "nodesim used 0.97 of the 1 core(s) it can use in the 10 s from 20 s (over 90%)".into(),
        ],
    };
    for v in &mut s.variants {
        if v.name != "rate-8" {
            v.confidence.validity.valid = true;
        }
        v.confidence.intervals.insert(
            "placements_per_s".into(),
            Interval {
                median: 5970.0,
                lo: 5912.0,
                hi: 6034.0,
                method: Method::OrderStatistics,
                confidence: 0.9375,
                samples: vec![5912.0, 5950.0, 5970.0, 6001.0, 6034.0],
            },
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, html(&s, &data)).unwrap();
    let dom = browser::dom(&page, "");
    let text = |needle: &str| {
        dom.find(needle)
            .unwrap_or_else(|| panic!("{needle} not on the page"))
    };
    // The verdicts come before the summary table, the invalid one with its reason.
    let invalid =
        text("rate-8: INVALID: these figures do not measure the cluster under this load: nodesim used 0.97");
    assert!(invalid < text("<h2>Summary</h2>"));
    assert!(text("rate-2: valid") < invalid);
    // The intervals row, one cell per variant.
    text("placements/s: median [95% interval]");
    assert_eq!(
        dom.matches("5970 [5912, 6034]").count(),
        3,
        "one per variant"
    );
    let terminal = loadgen::report::table(&s);
    assert!(
        terminal.contains("INVALID rate-8: nodesim used 0.97"),
        "{terminal}"
    );
}

#[test]
fn the_browser_shows_where_the_time_went_for_each_variant() {
    let dir = tempfile::tempdir().unwrap();
    let page = write_report(dir.path());
    let dom = browser::dom(&page, "");
    assert_eq!(dom.matches("id=\"where-the-time-went\"").count(), 1);
    for (class, n) in [
        ("class=\"time-went\"", 3),
        ("class=\"bottleneck\"", 3),
        ("class=\"stage-bars\"", 3),
        ("class=\"stage-legend\"", 3),
        ("class=\"data stages\"", 3),
        ("class=\"waterfall\"", 3),
        ("<g class=\"job\"", 3 * 5),
        ("<tr data-stage=", 3 * 11),
    ] {
        assert_eq!(dom.matches(class).count(), n, "{class}");
    }
    assert!(
        dom.contains("the p99 is set by client-update batching (report_running"),
        "the sentence"
    );
    let section = dom.find("id=\"where-the-time-went\"").unwrap();
    assert!(dom.find("<h2>Summary</h2>").unwrap() < section);
}

fn write_report(dir: &Path) -> std::path::PathBuf {
    let page = dir.join("report.html");
    let (s, data) = summary();
    std::fs::write(&page, html(&s, &data)).unwrap();
    page
}

#[test]
fn the_browser_draws_every_chart_of_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let page = write_report(dir.path());
    let d = browser::drawn(&page, "");
    // Two CDFs, three sweep charts, the search, and eight time charts for
    // each of the three variants.
    assert_eq!(d.places, 2 + 3 + 1 + 3 * 8, "{d:?}");
    assert_eq!(d.charts, d.places, "every place got a chart: {d:?}");
    assert_eq!(d.drawn, d.charts, "every chart shows its series: {d:?}");
    assert_eq!(d.legends_filled, 0, "no cursor, no values: {d:?}");
}

#[test]
fn a_screenshot_at_a_laptops_width_shows_charts_with_values_at_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let page = write_report(dir.path());
    let d = browser::drawn(&page, "#cursor=0.6");
    assert_eq!(d.legends_filled, d.charts, "{d:?}");

    let png = browser::screenshot(
        &page,
        "#cursor=0.6",
        1366,
        2400,
        &dir.path().join("shot.png"),
    );
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((frame.width, frame.height), (1366, 2400));
    let channels = frame.color_type.samples();
    let pixels = &pixels[..frame.buffer_size()];
    let colours: std::collections::HashSet<&[u8]> = pixels.chunks(channels).collect();
    let background = pixels
        .chunks(channels)
        .filter(|p| p[..3] == [255, 255, 255])
        .count();
    let total = pixels.len() / channels;
    assert!(
        colours.len() > 500,
        "{} colours: a blank page?",
        colours.len()
    );
    assert!(
        background < total * 97 / 100,
        "{background} of {total} pixels are white"
    );
}
