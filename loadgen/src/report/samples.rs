//! Lines read from a run's samples: counters as rates, gauges as they were,
//! summed over processes or split by a label.

use std::collections::BTreeMap;

use crate::sampler::{label, Series};

/// Points of one line: `(x, y)`, x in seconds from the start of the run.
pub type Points = Vec<(f64, f64)>;

/// A rate per second of a counter between consecutive points.
pub fn rate(s: &Series, name: &str) -> Points {
    s.points
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let dt = b.t - a.t;
            let (x, y) = (a.values.get(name)?, b.values.get(name)?);
            (dt > 0.0).then(|| (b.t, ((y - x) / dt).max(0.0)))
        })
        .collect()
}

pub fn gauge(s: &Series, name: &str) -> Points {
    s.points
        .iter()
        .filter_map(|p| Some((p.t, *p.values.get(name)?)))
        .collect()
}

/// Adds series point by point (they share sample times within a run).
pub fn add(into: &mut BTreeMap<String, Points>, key: String, pts: Points) {
    let e = into.entry(key).or_default();
    if e.is_empty() {
        *e = pts;
    } else {
        for (a, b) in e.iter_mut().zip(pts) {
            a.1 += b.1;
        }
    }
}

/// Per label value of `metric`, summed over `series`, as rates or gauges.
pub fn by_label(
    series: &[&Series],
    metric: &str,
    lbl: &str,
    as_rate: bool,
) -> Vec<(String, Points)> {
    let mut out = BTreeMap::new();
    for s in series {
        for name in s.names_of(metric) {
            let key = label(&name, lbl).unwrap_or(metric).to_string();
            let pts = if as_rate {
                rate(s, &name)
            } else {
                gauge(s, &name)
            };
            add(&mut out, key, pts);
        }
    }
    out.into_iter().collect()
}
