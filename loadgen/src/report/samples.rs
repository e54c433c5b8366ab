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

/// Adds a series into the sum at `key`, time by time: a process that did
/// not answer at a sample time (a killed server) leaves the sum of those that
/// did. Processes are sampled together, so their times are the same.
pub fn add(into: &mut BTreeMap<String, Points>, key: String, pts: Points) {
    let sum = into.entry(key).or_default();
    for (t, v) in pts {
        match sum.binary_search_by(|p| p.0.total_cmp(&t)) {
            Ok(i) => sum[i].1 += v,
            Err(i) => sum.insert(i, (t, v)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_add_up_time_by_time_when_a_process_missed_samples() {
        let mut sum = BTreeMap::new();
        add(&mut sum, "x".into(), vec![(1.0, 1.0), (3.0, 1.0)]);
        add(
            &mut sum,
            "x".into(),
            vec![(1.0, 2.0), (2.0, 2.0), (3.0, 2.0)],
        );
        assert_eq!(sum["x"], [(1.0, 3.0), (2.0, 2.0), (3.0, 3.0)]);
    }
}
