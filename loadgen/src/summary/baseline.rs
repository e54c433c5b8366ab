//! The comparison with an earlier run's `summary.json` (`--baseline`):
//! gated measures judged worse, variant by variant, by the same comparison
//! as `loadgen compare`.

use super::comparison::{compare_variant, Verdict};
use super::measures::figure;
use super::SCHEMA_VERSION;

/// Why an earlier run's `summary.json` cannot be a baseline.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("schema_version {0}, this loadgen writes {SCHEMA_VERSION}")]
    SchemaVersion(u64),
    #[error("not a loadgen summary.json (no schema_version)")]
    NotASummary,
}

/// An earlier run's `summary.json` text, checked to be one this loadgen can
/// compare with. It is kept as JSON, not read back into a [`RunSummary`]:
/// only the compared measures need to be there.
pub fn parse_baseline(text: &str) -> Result<serde_json::Value, BaselineError> {
    let v: serde_json::Value = serde_json::from_str(text)?;
    match v.get("schema_version").and_then(|s| s.as_u64()) {
        Some(n) if n == SCHEMA_VERSION as u64 && v["variants"].is_array() => Ok(v),
        Some(other) => Err(BaselineError::SchemaVersion(other)),
        None => Err(BaselineError::NotASummary),
    }
}

/// The gated measures of each variant that are `worse` than the baseline's
/// variant of the same name (`comparison`: a 95% interval of the ratio
/// that excludes no change and leaves the noise floor), each with its
/// ratio and interval. A variant the baseline lacks is not compared; a
/// run of one repetition is judged on its windows.
pub fn regressions(baseline: &serde_json::Value, variants: &serde_json::Value) -> Vec<String> {
    let empty = Vec::new();
    let base = baseline["variants"].as_array().unwrap_or(&empty);
    let mut out = Vec::new();
    for v in variants.as_array().unwrap_or(&empty) {
        let Some(b) = base.iter().find(|b| b["name"] == v["name"]) else {
            continue;
        };
        let worse = compare_variant(b, v, &|m| m.gated);
        for m in worse.iter().filter(|m| m.verdict == Verdict::Worse) {
            out.push(format!(
                "{}: {} {} against {} (x{:.2}, 95% interval {:.2} to {:.2})",
                v["name"].as_str().unwrap_or("?"),
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
    use serde_json::json;

    /// A variant of one run whose 10 s windows had these placements/s.
    fn variant(name: &str, rates: &[f64]) -> serde_json::Value {
        json!({"name": name,
               "stream": {"placements_per_second": rates[0]},
               "intervals": {"placements_per_s": {"method": "batch-means", "samples": rates}}})
    }

    #[test]
    fn a_gated_measure_judged_worse_is_a_regression_and_noise_is_not() {
        let base = json!({"schema_version": 1, "variants": [
            variant("steady", &[100.0, 101.0, 99.0, 100.0, 102.0, 98.0]),
            variant("slower", &[100.0, 101.0, 99.0, 100.0, 102.0, 98.0]),
        ]});
        let now = json!([
            variant("steady", &[99.0, 102.0, 100.0, 98.0, 101.0, 100.0]),
            variant("slower", &[70.0, 71.0, 69.0, 72.0, 70.0, 68.0]),
            variant("new", &[1.0, 1.0, 1.0]),
        ]);
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
        let base = json!({"schema_version": 1, "variants": [
            {"name": "a", "cpu_seconds_per_1000_placements": 4.0}]});
        let now = json!([{"name": "a", "cpu_seconds_per_1000_placements": 9.0}]);
        assert!(regressions(&base, &now).is_empty());
    }

    #[test]
    fn a_baseline_that_is_not_a_summary_is_refused() {
        let refused = |text: &str| parse_baseline(text).unwrap_err().to_string();
        assert!(refused("{\"schema_version\": 7, \"variants\": []}").contains("schema_version 7"));
        assert!(refused("not json").contains("not JSON"));
        assert!(refused("{\"variants\": []}").contains("no schema_version"));
        assert!(parse_baseline("{\"schema_version\": 1, \"variants\": []}").is_ok());
    }
}
