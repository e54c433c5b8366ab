//! A run against its scenario's SLO: which thresholds each variant
//! breached, whether a search probe passed, and failed audits, in words.

use super::VariantSummary;
use crate::scenario::Slo;
use crate::search::NEAR;

/// Every variant's failed audit and violated invariants, said in words.
pub fn audit_failures(variants: &[VariantSummary]) -> Vec<String> {
    let audits = variants
        .iter()
        .filter_map(|v| Some(format!("{}: {}", v.name, v.audit.as_ref()?.failure()?)));
    let invariants = variants.iter().filter_map(|v| {
        let failed = crate::invariants::failure(&v.invariants)?;
        Some(format!("{}: {failed}", v.name))
    });
    audits.chain(invariants).collect()
}

/// Each of the scenario's SLO thresholds that is set, with the variant's
/// measure of it: `(what, p99 ms, threshold ms)`.
pub fn slo_measures(slo: &Slo, v: &VariantSummary) -> Vec<(&'static str, f64, f64)> {
    [
        ("placement", v.stream.placement_ms.p99, slo.p99_placement_ms),
        (
            "time to running",
            v.stream.time_to_running_ms.p99,
            slo.p99_running_ms,
        ),
    ]
    .into_iter()
    .filter_map(|(what, p99, max)| Some((what, p99, max?)))
    .collect()
}

/// A breached threshold, said in words.
pub fn breach(what: &str, p99: f64, max: f64) -> String {
    format!("p99 {what} {p99:.0} ms > {max:.0} ms")
}

/// Whether a variant's measures meet the SLO, and whether one of them is
/// near its threshold.
pub fn judge(slo: &Slo, v: &VariantSummary) -> (bool, bool, Vec<String>) {
    let mut breaches = Vec::new();
    let mut near = false;
    for (what, p99, max) in slo_measures(slo, v) {
        if p99 > max {
            breaches.push(breach(what, p99, max));
        }
        near |= (p99 / max - 1.0).abs() <= NEAR;
    }
    // Jobs never seen running are missing from the p99 of those that were:
    // when more than 1% never ran, the p99 of all of them is beyond the
    // drain (a probe whose cluster fell hopelessly behind would otherwise
    // pass on its first, fast jobs).
    if let Some(max) = slo.p99_running_ms {
        let never = v.stream.submitted.saturating_sub(v.stream.running);
        if never * 100 > v.stream.submitted {
            breaches.push(format!(
                "p99 time to running beyond the drain (> {max:.0} ms): {never} of {} jobs never ran",
                v.stream.submitted
            ));
        }
    }
    // A probe that placed nothing measured nothing: it cannot pass.
    if v.stream.placement_ms.count == 0 {
        breaches.push("nothing was placed".into());
    }
    (breaches.is_empty() && v.problems.is_empty(), near, breaches)
}

/// The scenario's SLO thresholds each variant breached, said in words.
pub fn slo_breaches(slo: &Slo, variants: &[VariantSummary]) -> Vec<String> {
    let mut slo_breaches = Vec::new();
    for v in variants {
        for (what, p99, max) in slo_measures(slo, v) {
            if p99 > max {
                slo_breaches.push(format!("{}: {}", v.name, breach(what, p99, max)));
            }
        }
    }
    slo_breaches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Audit;

    #[test]
    fn only_a_p99_above_its_threshold_breaches_the_slo() {
        let variant = |name: &str, placement: f64, running: f64| {
            let mut v = VariantSummary {
                name: name.into(),
                ..Default::default()
            };
            v.stream.placement_ms.p99 = placement;
            v.stream.time_to_running_ms.p99 = running;
            v
        };
        let variants = [variant("a", 900.0, 5000.0), variant("b", 1200.0, 4000.0)];
        let slo = Slo {
            p99_placement_ms: Some(1000.0),
            p99_running_ms: Some(4500.0),
        };
        assert_eq!(
            slo_breaches(&slo, &variants),
            [
                "a: p99 time to running 5000 ms > 4500 ms",
                "b: p99 placement 1200 ms > 1000 ms",
            ]
        );
        assert!(slo_breaches(&Slo::default(), &variants).is_empty());
    }

    #[test]
    fn an_audit_fails_on_lost_or_phantom_jobs_and_names_them() {
        let ok = Audit {
            acked: 10,
            submitted: 11,
            servers: 3,
            ..Default::default()
        };
        assert_eq!(ok.failure(), None);
        let lost = Audit {
            lost: 1,
            lost_jobs: vec!["web-3 (missing on server 2)".into()],
            ..ok.clone()
        };
        let phantom = Audit {
            phantom: 2,
            phantom_jobs: vec!["x".into(), "y".into()],
            ..ok.clone()
        };
        let variants = [
            VariantSummary {
                name: "a".into(),
                audit: Some(lost),
                ..Default::default()
            },
            VariantSummary {
                name: "b".into(),
                audit: Some(phantom),
                ..Default::default()
            },
            VariantSummary {
                name: "c".into(),
                audit: Some(ok),
                ..Default::default()
            },
            VariantSummary {
                name: "d".into(),
                ..Default::default()
            },
        ];
        assert_eq!(
            audit_failures(&variants),
            [
                "a: 1 acknowledged job(s) lost: web-3 (missing on server 2)",
                "b: 2 job(s) present that were never submitted: x, y",
            ]
        );
        // Without faults there is no audit, and no key in summary.json.
        let json = serde_json::to_value(&variants[3]).unwrap();
        assert!(json.get("audit").is_none() && json.get("faults").is_none());
        let json = serde_json::to_value(&variants[0]).unwrap();
        assert_eq!(json["audit"]["lost"], 1);
    }

    #[test]
    fn a_probe_passes_only_within_every_threshold_and_having_placed_something() {
        let slo = Slo {
            p99_placement_ms: Some(1000.0),
            p99_running_ms: None,
        };
        let probe = |p99: f64, count: u64| {
            let mut v = VariantSummary::default();
            v.stream.placement_ms.p99 = p99;
            v.stream.placement_ms.count = count;
            v
        };
        // Well within: passes, not near.
        assert_eq!(judge(&slo, &probe(500.0, 10)), (true, false, vec![]));
        // Within 10% below the threshold: passes, but near it.
        assert_eq!(judge(&slo, &probe(950.0, 10)), (true, true, vec![]));
        // Above: fails, said in words.
        let (passed, near, breaches) = judge(&slo, &probe(1050.0, 10));
        assert!(!passed && near);
        assert_eq!(breaches, ["p99 placement 1050 ms > 1000 ms"]);
        // Nothing placed measured nothing.
        let (passed, _, breaches) = judge(&slo, &probe(0.0, 0));
        assert!(!passed);
        assert_eq!(breaches, ["nothing was placed"]);
        // A problem fails a probe whatever its measures.
        let mut troubled = probe(500.0, 10);
        troubled.problems.push("nodesim stopped answering".into());
        assert!(!judge(&slo, &troubled).0);
    }

    #[test]
    fn a_probe_whose_jobs_did_not_all_run_breaks_a_time_to_running_slo() {
        let slo = Slo {
            p99_placement_ms: None,
            p99_running_ms: Some(10_000.0),
        };
        // 1,000 jobs submitted; the ones that ran did so fast.
        let probe = |running: u64| {
            let mut v = VariantSummary::default();
            v.stream.placement_ms = crate::stream::Percentiles {
                count: running,
                p99: 800.0,
                ..Default::default()
            };
            v.stream.time_to_running_ms.p99 = 2_000.0;
            (v.stream.submitted, v.stream.running) = (1000, running);
            v
        };
        assert_eq!(judge(&slo, &probe(1000)), (true, false, vec![]));
        // 1% never ran: the p99 is still among those that did.
        assert!(judge(&slo, &probe(990)).0);
        // 300 never ran: the p99 of all of them is beyond the drain.
        let (passed, _, breaches) = judge(&slo, &probe(700));
        assert!(!passed);
        assert_eq!(
            breaches,
            ["p99 time to running beyond the drain (> 10000 ms): 300 of 1000 jobs never ran"]
        );
        // Without a time-to-running SLO the placements alone are judged.
        let placement_only = Slo {
            p99_placement_ms: Some(1000.0),
            p99_running_ms: None,
        };
        assert!(judge(&placement_only, &probe(700)).0);
    }
}
