//! What a capacity run says: a summary table for the terminal and a
//! self-contained `report.html`.
//!
//! It renders from the run's summary (`summary`) and, apart from it, what
//! only the report draws: each variant's samples (`sampler`), its
//! acknowledgements per second and its slowest jobs' paths ([`VariantData`]);
//! `capacity`, which runs things, calls it, never the other way round.
//! The page's tables are HTML made here (`tables`), and so are the
//! critical path's bars and waterfall (`time_went`, inline SVG); its plots
//! are data (`charts`) drawn in the browser by uPlot, which is vendored in
//! `loadgen/assets/` and inlined with the glue script, so the page loads
//! nothing from the network and opens from a run directory anywhere.

mod charts;
mod data;
mod samples;
mod tables;
mod terminal;
mod time_went;

use std::fmt::Write;

use crate::summary::RunSummary;

pub(crate) use charts::{Chart, Kind, Mark};
pub use data::{RunData, VariantData};
pub use terminal::terminal as table;

const UPLOT_JS: &str = include_str!("../../assets/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../assets/uPlot.min.css");
const REPORT_JS: &str = include_str!("../../assets/report.js");
const REPORT_CSS: &str = include_str!("../../assets/report.css");

/// Text made safe for HTML, in an element or an attribute.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A process's flags as the page shows them.
fn flags(args: &[String]) -> String {
    if args.is_empty() {
        "(none)".into()
    } else {
        escape(&args.join(" "))
    }
}

/// The page's charts: each section asks for a place for its charts, and the
/// specs are embedded once at the end for `report.js` to draw.
#[derive(Default)]
pub(crate) struct Charts(Vec<Chart>);

impl Charts {
    /// A grid with a place for each chart that has something to draw.
    pub(crate) fn grid(&mut self, charts: impl IntoIterator<Item = Chart>) -> String {
        let mut html = String::from("<div class=\"charts\">");
        for c in charts.into_iter().filter(|c| !c.is_empty()) {
            let _ = write!(
                html,
                "<div class=\"chart\" data-chart=\"{}\"></div>",
                self.0.len()
            );
            self.0.push(c);
        }
        html.push_str("</div>");
        html
    }

    /// The specs as JSON that is safe inside a `<script>` element: `<`
    /// only occurs in strings, where `\u003c` says the same.
    fn json(&self) -> String {
        serde_json::to_string(&self.0)
            .expect("charts serialize")
            .replace('<', "\\u003c")
    }
}

/// A page in the report's look: its styles, `title` in the tab,
/// `heading`, `lead` under it, and the charts that `body` placed, drawn by uPlot and
/// `report.js` (so the page's browser test reads them the same way).
/// The run's report is one; `loadgen history report` another.
pub(crate) fn page(
    title: &str,
    heading: &str,
    lead: &str,
    body: impl FnOnce(&mut Charts) -> String,
) -> String {
    let mut charts = Charts::default();
    let mut page = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>{UPLOT_CSS}\n{REPORT_CSS}</style>\
         </head><body><h1>{heading}</h1><p class=\"lead\">{lead}</p>",
        title = escape(title),
        heading = escape(heading),
        lead = escape(lead),
    );
    page.push_str(&body(&mut charts));
    let _ = write!(
        page,
        "<script type=\"application/json\" id=\"chart-specs\">{}</script>\
         <script>{UPLOT_JS}</script><script>{REPORT_JS}</script></body></html>",
        charts.json()
    );
    page
}

/// The self-contained report page: the summary `s`, and each variant's
/// samples and traces from `data`.
pub fn html(s: &RunSummary, data: &RunData) -> String {
    let name = &s.scenario.name;
    page(
        &format!("stampede capacity run: {name}"),
        &format!("Capacity run: {name}"),
        &s.scenario.description,
        |charts| body(s, data, charts),
    )
}

/// The run's page below its heading.
fn body(s: &RunSummary, data: &RunData, charts: &mut Charts) -> String {
    let mut page = String::new();
    if !s.complete {
        page.push_str("<p class=\"warn\" id=\"partial\">This run did not complete: the report is partial.</p>");
    }
    for v in &s.variants {
        match v.confidence.validity.valid {
            true => {
                let _ = write!(page, "<p class=\"valid\">{}: valid: the harness kept its schedule, neither it nor the machine saturated, and no election came without a fault on the leader.</p>", escape(&v.name));
            }
            false => {
                let reasons: Vec<String> = v
                    .confidence
                    .validity
                    .reasons
                    .iter()
                    .map(|r| escape(r))
                    .collect();
                let _ = write!(page, "<p class=\"warn invalid\">{}: INVALID: these figures do not measure the cluster under this load: {}</p>", escape(&v.name), reasons.join("; "));
            }
        }
    }
    for b in &s.slo_breaches {
        let _ = write!(page, "<p class=\"warn\">SLO breached: {}</p>", escape(b));
    }
    for r in &s.regressions {
        let _ = write!(
            page,
            "<p class=\"warn\">Worse than the baseline: {}</p>",
            escape(r)
        );
    }
    for a in &s.audit_failures {
        let _ = write!(page, "<p class=\"warn\">Audit failed: {}</p>", escape(a));
    }
    page.push_str("<p class=\"hint\">Hover a chart for its values; drag across it to zoom in on a time range, double-click to zoom out.</p>");
    let _ = write!(page, "<h2>Summary</h2>{}", tables::summary(s));
    if s.variants.len() > 1 {
        let _ = write!(page, "<h2>Side by side</h2>{}", tables::comparison(s));
    }
    let cdfs = charts::latency_cdfs(s);
    if !cdfs.is_empty() {
        let _ = write!(
            page,
            "<h2>Latency distributions</h2><p>The fraction of jobs placed, or running, within a time, \
             every variant on the same axes; p50, p90 and p99 are marked.</p>{}",
            charts.grid(cdfs)
        );
    }
    page.push_str(&time_went::section(s, data));
    if let Some(sw) = &s.scenario.sweep {
        let _ = write!(
            page,
            "<h2>Cost against {}</h2>{}",
            sw.parameter.name(),
            charts.grid(charts::sweep(s))
        );
    }
    if s.search.is_some() {
        let _ = write!(
            page,
            "<h2>The highest rate that meets the SLOs</h2>{}{}",
            tables::probes(s),
            charts.grid(charts::search(s))
        );
    }
    for v in &s.variants {
        let _ = write!(
            page,
            "<h2>{}</h2><p>server flags: <code>{}</code>; nodesim flags: <code>{}</code></p>",
            escape(&v.name),
            flags(&v.server_args),
            flags(&v.nodesim_args)
        );
        for p in &v.problems {
            let _ = write!(page, "<p class=\"warn\">{}</p>", escape(p));
        }
        page.push_str(&tables::faults(v));
        page.push_str(&charts.grid(charts::variant(v, VariantData::of(data, &v.name))));
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{Audit, FaultReport};
    use crate::scenario::{FaultAction, Scenario};
    use crate::summary::{RunSummary, VariantSummary, SCHEMA_VERSION};

    /// The acknowledgements of [`with_faults`]' variant.
    fn acks() -> VariantData {
        VariantData {
            acks_per_second: vec![(1.0, 4.0), (2.0, 3.0)],
            ..Default::default()
        }
    }

    /// The page of `s` with [`acks`] as its variant's data.
    fn page(s: &RunSummary) -> String {
        let acks = acks();
        html(s, &[(s.variants[0].name.as_str(), &acks)].into())
    }

    fn with_faults() -> RunSummary {
        let fault = FaultReport {
            action: FaultAction::KillLeader,
            at_s: 20.4,
            scheduled_at_s: 20.0,
            duration_s: 3.0,
            servers: vec![2],
            leader_before: Some(2),
            time_to_leader_s: Some(1.3),
            leader_after: Some(3),
            unavailable_s: Some(1.5),
            elections: Some(1),
            recovered_s: Some(23.4),
            throughput_before: Some(4.0),
            throughput_after: Some(3.9),
            control_plane_recovery_s: Some(2.3),
            catch_up_time_s: Some(0.4),
            snapshots_installed: Some(0),
        };
        let mut variant = VariantSummary {
            name: "faults <b>".into(),
            faults: vec![fault],
            audit: Some(Audit {
                acked: 100,
                submitted: 101,
                servers: 3,
                ..Default::default()
            }),
            ..Default::default()
        };
        let q = crate::stream::sketch_quantiles();
        variant.stream.latency_quantiles.placement_ms = q.iter().map(|q| 10.0 + 90.0 * q).collect();
        variant.stream.latency_quantiles.q = q;
        RunSummary {
            build: Default::default(),
            schema_version: SCHEMA_VERSION,
            scenario: Scenario::load("faults").unwrap(),
            raft_entries_by_type: Default::default(),
            blocking_queries_by_source: Default::default(),
            variants: vec![variant],
            slo_breaches: vec![],
            regressions: vec![],
            audit_failures: vec![],
            invariants: vec![],
            complete: true,
            prometheus: None,
            search: None,
            seed: None,
            rounds: vec![],
            sequential: None,
            machine: None,
        }
    }

    /// The chart specs the page embeds.
    fn specs(page: &str) -> serde_json::Value {
        let start = page.find("id=\"chart-specs\">").unwrap() + "id=\"chart-specs\">".len();
        let end = start + page[start..].find("</script>").unwrap();
        serde_json::from_str(&page[start..end]).unwrap()
    }

    #[test]
    fn the_table_shows_each_fault_and_the_audit() {
        let t = table(&with_faults());
        assert!(
            t.contains("fault 1: kill_leader (leader s / unavailable s / elections)"),
            "{t}"
        );
        assert!(t.contains("@20s: 1.3 / 1.5 / 1"), "{t}");
        assert!(t.contains("4.0 / 3.9"), "{t}");
        assert!(
            t.contains("\n  control plane back s") && t.contains("2.3"),
            "{t}"
        );
        assert!(t.contains("audit: acked / lost / phantom") && t.contains("100 / 0 / 0"));
        assert!(
            t.contains("\n  acks/s before / after"),
            "sub rows indent: {t}"
        );
    }

    #[test]
    fn the_page_has_html_tables_and_marks_each_fault_on_every_time_chart() {
        let page = page(&with_faults());
        assert!(page.contains("<table class=\"data summary\">") && !page.contains("<pre>"));
        assert!(page.contains("<td>@20s: 1.3 / 1.5 / 1</td>"));
        assert!(page.contains("Audit: all 100 acknowledged jobs"));
        assert!(page.contains("faults &lt;b&gt;") && !page.contains("faults <b>"));
        let specs = specs(&page);
        let charts = specs.as_array().unwrap();
        assert_eq!(
            page.matches("class=\"chart\" data-chart=").count(),
            charts.len()
        );
        let time: Vec<_> = charts.iter().filter(|c| c["kind"] == "time").collect();
        assert_eq!(time[0]["title"], "Job registrations acknowledged");
        for c in &time {
            assert_eq!(c["marks"][0]["label"], "kill_leader", "{}", c["title"]);
            assert_eq!(c["marks"][0]["x"], 20.4);
        }
        let cdf = charts.iter().find(|c| c["kind"] == "cdf").unwrap();
        assert_eq!(cdf["title"], "Time to placement");
        assert_eq!(
            cdf["series"][0]["label"], "faults <b>",
            "escaped by JSON, not HTML"
        );
        let dots: Vec<&str> = cdf["dots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["label"].as_str().unwrap())
            .collect();
        assert_eq!(dots, ["55.0 ms", "91.0 ms", "99.1 ms"]);
        let levels: Vec<&str> = cdf["levels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["label"].as_str().unwrap())
            .collect();
        assert_eq!(levels, ["p50", "p90", "p99"]);
        // No time to running was measured: no empty chart for it.
        assert!(!charts.iter().any(|c| c["title"] == "Time to running"));
    }

    #[test]
    fn the_elections_are_said_with_who_started_them_and_the_leaders_fate() {
        use crate::summary::elections::Election;
        let election = |term, by: Option<&str>, alive| Election {
            term,
            by: by.map(Into::into),
            at_s: 20.0 + term as f64,
            leader_was_alive: alive,
        };
        let mut s = with_faults();
        let v = &mut s.variants[0];
        v.elections = Some(1);
        v.elections_detail = vec![election(7, Some("server-2"), true)];
        v.fleet.elections_outside_faults = Some(1);
        let t = table(&s);
        assert!(
            t.contains(
                "1 election, started by server-2 while the leader was alive; 1 outside faults"
            ),
            "{t}"
        );
        let v = &mut s.variants[0];
        v.elections = Some(4);
        v.elections_detail = vec![
            election(7, Some("server-3"), false),
            election(8, None, false),
            election(9, Some("server-3"), false),
            election(10, Some("server-2"), true),
        ];
        let t = table(&s);
        let said = "4 elections: 2 started by server-3 after the leader was lost, \
                    1 started by an unknown server after the leader was lost, \
                    1 started by server-2 while the leader was alive; 1 outside faults";
        assert!(t.contains(said), "{t}");
        let html = page(&s);
        assert!(html.contains(&format!("<p class=\"elections\">Elections: {said}.</p>")));
        assert!(html.contains(
            "<tr class=\"warn\"><td>10</td><td>30.0</td><td>server-2</td><td>alive</td></tr>"
        ));
        assert!(html.contains("<td>8</td><td>28.0</td><td>unknown</td><td>lost</td>"));
        // A summary from before the detail: the counts alone.
        let v = &mut s.variants[0];
        v.elections_detail.clear();
        assert!(table(&s).contains("4; 1 outside faults"));
        s.variants[0].elections = Some(0);
        assert!(!page(&s).contains("class=\"elections\""));
    }

    #[test]
    fn the_page_loads_nothing_from_the_network() {
        let page = page(&with_faults());
        for pattern in ["src=", "href=", "url(", "@import", "import(", "<link"] {
            assert!(!page.contains(pattern), "the page has {pattern}");
        }
        // The inlined scripts cannot end their element early.
        for asset in [UPLOT_JS, REPORT_JS] {
            assert!(!asset.to_ascii_lowercase().contains("</script"));
        }
        assert_eq!(page.matches("</script>").count(), 3);
    }
}
