//! Defining metrics: each helper builds one metric, registers it on the
//! process's registry and hands it back, so a component declares a metric in
//! one expression. A name or label set that is invalid, or registered twice,
//! is a programming error caught by the first test that builds the component,
//! so it panics with the metric's name.

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    Counter, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// Registers `metric` on `registry` and returns it.
pub fn register<C: Collector + Clone + 'static>(registry: &Registry, metric: C) -> C {
    let name = metric
        .desc()
        .first()
        .map_or_else(String::new, |d| d.fq_name.clone());
    registry
        .register(Box::new(metric.clone()))
        .unwrap_or_else(|e| panic!("registering metric {name}: {e}"));
    metric
}

fn built<T>(name: &str, m: prometheus::Result<T>) -> T {
    m.unwrap_or_else(|e| panic!("defining metric {name}: {e}"))
}

pub fn int_counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(registry, built(name, IntCounter::new(name, help)))
}

pub fn counter(registry: &Registry, name: &str, help: &str) -> Counter {
    register(registry, built(name, Counter::new(name, help)))
}

pub fn gauge(registry: &Registry, name: &str, help: &str) -> Gauge {
    register(registry, built(name, Gauge::new(name, help)))
}

pub fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    register(registry, built(name, IntGauge::new(name, help)))
}

/// Registers a labelled metric, with each of `zero` present from the start.
fn labelled<P>(
    registry: &Registry,
    name: &str,
    metric: prometheus::Result<MetricVec<P>>,
    zero: &[&str],
) -> MetricVec<P>
where
    P: MetricVecBuilder + 'static,
{
    let m = register(registry, built(name, metric));
    for v in zero {
        m.with_label_values(&[v]);
    }
    m
}

/// A counter per value of `label`; pass every value a dashboard expects to
/// see as `zero`, so each shows 0 rather than no data until its first count.
pub fn int_counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    label: &str,
    zero: &[&str],
) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), &[label]);
    labelled(registry, name, m, zero)
}

/// A gauge per value of `label`, each of `zero` present from the start.
pub fn int_gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    label: &str,
    zero: &[&str],
) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), &[label]);
    labelled(registry, name, m, zero)
}

/// A histogram with exponential buckets: `count` of them from `start`, each
/// `factor` times the last.
pub fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    (start, factor, count): (f64, f64, usize),
) -> Histogram {
    let buckets = built(name, prometheus::exponential_buckets(start, factor, count));
    register(
        registry,
        built(
            name,
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)),
        ),
    )
}

/// A histogram per value of `label`, with exponential buckets as [`histogram`].
pub fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    label: &str,
    (start, factor, count): (f64, f64, usize),
) -> HistogramVec {
    let buckets = built(name, prometheus::exponential_buckets(start, factor, count));
    register(
        registry,
        built(
            name,
            HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), &[label]),
        ),
    )
}

/// `stampede_job_stage_seconds`: the stages of jobs' critical paths that
/// this process ends (each process registers the ones it measures, so a
/// stage is never counted twice). From 100 µs to about 100 s.
pub fn job_stage_seconds(registry: &Registry, stages: &[crate::labels::JobStage]) -> HistogramVec {
    let h = histogram_vec(
        registry,
        "stampede_job_stage_seconds",
        "Time jobs spent in each stage of their path from submission to running, in the process that ends the stage.",
        "stage",
        (0.0001, 2.0, 21),
    );
    for s in stages {
        h.with_label_values(&[s.label()]);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defines_registers_and_zeroes_the_expected_labels() {
        let r = Registry::new();
        let c = int_counter_vec(&r, "t_total", "A test counter.", "kind", &["a", "b"]);
        c.with_label_values(&["a"]).inc();
        let h = histogram(&r, "t_seconds", "A test histogram.", (0.001, 2.0, 4));
        h.observe(0.003);
        let text = crate::render_metrics(&r);
        assert!(text.contains("t_total{kind=\"a\"} 1"), "{text}");
        assert!(text.contains("t_total{kind=\"b\"} 0"), "{text}");
        assert!(text.contains("t_seconds_bucket{le=\"0.004\"} 1"), "{text}");
    }

    #[test]
    #[should_panic(expected = "registering metric t_total")]
    fn a_name_registered_twice_names_the_metric() {
        let r = Registry::new();
        int_counter(&r, "t_total", "A test counter.");
        int_counter(&r, "t_total", "A test counter.");
    }
}
