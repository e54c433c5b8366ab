//! The comparison with an earlier run's `summary.json` (`--baseline`):
//! measures more than 10% worse, variant by variant.

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

/// What is compared with a baseline: a name, where it is read, the
/// smallest growth that counts (so a handful of extra entries is not news),
/// and the decimals it is told with. For each, lower is better.
const COMPARED: &[(&str, &str, f64, usize)] = &[
    ("raft entries", "/raft_entries_by_type", 10.0, 0),
    ("raft bytes", "/raft_bytes_by_type", 10_000.0, 0),
    ("client update RPCs", "/client_update_rpcs", 10.0, 0),
    ("blocking queries", "/blocking_queries_by_source", 10.0, 0),
    (
        "deployment query wait s",
        "/deployment_query_wait_seconds",
        5.0,
        0,
    ),
    ("p99 placement ms", "/stream/placement_ms/p99", 50.0, 0),
    (
        "p99 time to running ms",
        "/stream/time_to_running_ms/p99",
        50.0,
        0,
    ),
    // Null (nothing placed) on either side: not compared.
    (
        "CPU-s per 1000 placements",
        "/cpu_seconds_per_1000_placements",
        0.0,
        2,
    ),
];

/// A number, or the sum of an object's numbers.
fn measure(v: &serde_json::Value, pointer: &str) -> Option<f64> {
    match v.pointer(pointer)? {
        serde_json::Value::Object(m) => Some(m.values().filter_map(|n| n.as_f64()).sum()),
        n => n.as_f64(),
    }
}

/// Measures of each variant more than 10% above the baseline's variant of
/// the same name.
pub fn regressions(baseline: &serde_json::Value, variants: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let base = baseline["variants"].as_array().unwrap_or(&empty);
    for v in variants.as_array().unwrap_or(&empty) {
        let name = v["name"].as_str().unwrap_or("?");
        let Some(b) = base.iter().find(|b| b["name"] == v["name"]) else {
            continue;
        };
        for (what, pointer, floor, decimals) in COMPARED {
            let (Some(now), Some(was)) = (measure(v, pointer), measure(b, pointer)) else {
                continue;
            };
            if now > was * 1.10 && now - was > *floor {
                out.push(format!(
                    "{name}: {what} {now:.decimals$}, baseline {was:.decimals$} (+{:.0}%)",
                    if was > 0.0 {
                        100.0 * (now / was - 1.0)
                    } else {
                        100.0
                    }
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_growth_past_ten_percent_and_the_floor_is_a_regression() {
        let base = json!({"schema_version": 1, "variants": [
            {"name": "legacy", "raft_entries_by_type": {"plan_apply": 100, "eval_update": 100},
             "stream": {"placement_ms": {"p99": 100.0}, "time_to_running_ms": {"p99": 1000.0}}},
        ]});
        let now = json!([
            {"name": "legacy", "raft_entries_by_type": {"plan_apply": 150, "eval_update": 100},
             "stream": {"placement_ms": {"p99": 140.0}, "time_to_running_ms": {"p99": 1050.0}}},
            {"name": "new", "raft_entries_by_type": {"plan_apply": 1000}},
        ]);
        let r = regressions(&base, &now);
        assert_eq!(
            r,
            vec!["legacy: raft entries 250, baseline 200 (+25%)".to_string()]
        );
    }

    #[test]
    fn more_than_ten_percent_more_cpu_per_placement_is_a_regression() {
        let base = json!({"schema_version": 1, "variants": [
            {"name": "a", "cpu_seconds_per_1000_placements": 4.0},
            {"name": "b", "cpu_seconds_per_1000_placements": 4.0},
            {"name": "c", "cpu_seconds_per_1000_placements": 4.0},
            {"name": "d", "cpu_seconds_per_1000_placements": null},
        ]});
        let now = json!([
            {"name": "a", "cpu_seconds_per_1000_placements": 4.6},
            {"name": "b", "cpu_seconds_per_1000_placements": 4.4},
            {"name": "c", "cpu_seconds_per_1000_placements": null},
            {"name": "d", "cpu_seconds_per_1000_placements": 9.0},
        ]);
        // a: +15%; b: +10% exactly is not more than 10%; c and d: nothing
        // placed on one side, so there is nothing to compare.
        assert_eq!(
            regressions(&base, &now),
            ["a: CPU-s per 1000 placements 4.60, baseline 4.00 (+15%)"]
        );
        // Less CPU per placement is better, never a regression.
        let cheaper = json!([{"name": "a", "cpu_seconds_per_1000_placements": 1.0}]);
        assert!(regressions(&base, &cheaper).is_empty());
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
