//! Reading a `summary.json` back ([`parse_summary`]: `loadgen compare`
//! and `--baseline`), and the comparison with an earlier run's
//! (`--baseline`): gated measures judged worse, variant by variant, by the
//! same comparison as `loadgen compare`.

use super::comparison::{compare_variant, Verdict};
use super::measures::figure;
use super::{RunSummary, VariantSummary, SCHEMA_VERSION};

/// Why a file cannot be read back as a `summary.json` (the caller names
/// the file).
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("schema_version {0}, this loadgen writes {SCHEMA_VERSION}")]
    SchemaVersion(u64),
    #[error("not a loadgen summary.json (no schema_version)")]
    NotASummary,
    /// A field of the wrong type, or a required one (`scenario`,
    /// `variants`) missing: serde's message names it, with the line.
    #[error("a field is missing or of the wrong type: {0}")]
    Shape(serde_json::Error),
}

/// An earlier run's `summary.json` text, read back typed. A field an
/// earlier loadgen of the same schema version did not write takes its
/// default (see [`RunSummary`]), so a comparison with an older run still
/// works, on the measures it has.
pub fn parse_summary(text: &str) -> Result<RunSummary, SummaryError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(SummaryError::NotJson)?;
    match v.get("schema_version").and_then(|s| s.as_u64()) {
        Some(n) if n == SCHEMA_VERSION as u64 => {}
        Some(other) => return Err(SummaryError::SchemaVersion(other)),
        None => return Err(SummaryError::NotASummary),
    }
    // From the text, not the value: serde's error then says the line.
    serde_json::from_str(text).map_err(SummaryError::Shape)
}

/// The gated measures of each variant that are `worse` than the baseline's
/// variant of the same name (`comparison`: a 95% interval of the ratio
/// that excludes no change and leaves the noise floor), each with its
/// ratio and interval. A variant the baseline lacks is not compared; a
/// run of one repetition is judged on its windows.
pub fn regressions(baseline: &RunSummary, variants: &[VariantSummary]) -> Vec<String> {
    let mut out = Vec::new();
    for v in variants {
        let Some(b) = baseline.variants.iter().find(|b| b.name == v.name) else {
            continue;
        };
        let worse = compare_variant(b, v, &|m| m.gated);
        for m in worse.iter().filter(|m| m.verdict == Verdict::Worse) {
            out.push(format!(
                "{}: {} {} against {} (x{:.2}, 95% interval {:.2} to {:.2})",
                v.name,
                m.measure,
                figure(m.b),
                figure(m.a),
                m.ratio,
                m.lo,
                m.hi
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{median_interval, Method, CONFIDENCE};

    /// A variant of one run whose 10 s windows had these placements/s.
    fn variant(name: &str, rates: &[f64]) -> VariantSummary {
        let mut v = VariantSummary {
            name: name.into(),
            ..Default::default()
        };
        v.stream.placements_per_second = rates[0];
        let windows = median_interval(rates, CONFIDENCE, Method::BatchMeans).unwrap();
        v.confidence
            .intervals
            .insert("placements_per_s".into(), windows);
        v
    }

    fn run(variants: Vec<VariantSummary>) -> RunSummary {
        let scenario = crate::scenario::Scenario::load("default").unwrap();
        RunSummary::new(&scenario, &variants, variants.len(), None, None, None)
    }

    #[test]
    fn a_gated_measure_judged_worse_is_a_regression_and_noise_is_not() {
        let base = run(vec![
            variant("steady", &[100.0, 101.0, 99.0, 100.0, 102.0, 98.0]),
            variant("slower", &[100.0, 101.0, 99.0, 100.0, 102.0, 98.0]),
        ]);
        let now = [
            variant("steady", &[99.0, 102.0, 100.0, 98.0, 101.0, 100.0]),
            variant("slower", &[70.0, 71.0, 69.0, 72.0, 70.0, 68.0]),
            variant("new", &[1.0, 1.0, 1.0]),
        ];
        let r = regressions(&base, &now);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            r[0].starts_with("slower: placements_per_s 70.000 against 100 (x0.70"),
            "{r:?}"
        );
    }

    #[test]
    fn one_figure_against_one_is_never_a_regression() {
        // Without samples there is no interval, whatever the change.
        let one = |cpu: f64| VariantSummary {
            name: "a".into(),
            processes: crate::summary::Processes {
                cpu_seconds_per_1000_placements: Some(cpu),
                ..Default::default()
            },
            ..Default::default()
        };
        let base = run(vec![one(4.0)]);
        assert!(regressions(&base, &[one(9.0)]).is_empty());
    }

    #[test]
    fn a_file_that_is_not_a_summary_is_refused_saying_why() {
        let refused = |text: &str| parse_summary(text).unwrap_err().to_string();
        assert!(refused("{\"schema_version\": 7, \"variants\": []}").contains("schema_version 7"));
        assert!(refused("not json").contains("not JSON"));
        assert!(refused("{\"variants\": []}").contains("no schema_version"));
        let no_scenario = refused("{\"schema_version\": 1, \"variants\": []}");
        assert!(
            no_scenario.contains("missing field `scenario`"),
            "{no_scenario}"
        );
        let text = serde_json::to_string_pretty(&run(vec![variant("a", &[1.0, 2.0])])).unwrap();
        assert!(parse_summary(&text).is_ok());
        let wrong = text.replace(
            "\"placements_per_second\": 1.0",
            "\"placements_per_second\": \"fast\"",
        );
        assert_ne!(wrong, text);
        let why = refused(&wrong);
        assert!(
            why.contains("invalid type") && why.contains("line"),
            "{why}"
        );
    }

    #[test]
    fn a_summary_of_an_earlier_loadgen_reads_with_defaults() {
        // What an earlier loadgen wrote lacked `build`, `fleet`, `memory`
        // and more: they read as their defaults, and its measures compare.
        let mut full = serde_json::to_value(run(vec![variant("a", &[5.0, 6.0])])).unwrap();
        let v = full["variants"][0].as_object_mut().unwrap();
        for field in [
            "build",
            "fleet",
            "memory",
            "trace_check",
            "blocking_delivery_ms",
        ] {
            assert!(v.remove(field).is_some(), "{field}");
        }
        full.as_object_mut().unwrap().remove("build");
        let old = parse_summary(&full.to_string()).unwrap();
        assert_eq!(old.variants[0].build, Default::default());
        assert_eq!(old.variants[0].stream.placements_per_second, 5.0);
    }
}
