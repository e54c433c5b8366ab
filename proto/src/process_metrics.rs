//! `process_*` metrics for every stampede binary: the prometheus crate's
//! process collector, with CPU time to the clock tick. The crate's collector
//! counts whole CPU seconds, too coarse to tell 0.05 cores from 0.1 over a
//! short capacity run or a dashboard's rate window.

use prometheus::core::{Collector, Desc};
use prometheus::process_collector::ProcessCollector;
use prometheus::proto::{Counter, MetricFamily};

/// The process collector of this process, its names under `namespace`
/// (`stampede` gives `stampede_process_cpu_seconds_total`; "" leaves them bare).
pub fn process_collector(namespace: &str) -> Box<dyn Collector> {
    let cpu_name = if namespace.is_empty() {
        "process_cpu_seconds_total".to_string()
    } else {
        format!("{namespace}_process_cpu_seconds_total")
    };
    Box::new(PreciseProcess {
        inner: ProcessCollector::new(std::process::id() as i32, namespace),
        cpu_name,
    })
}

struct PreciseProcess {
    inner: ProcessCollector,
    cpu_name: String,
}

impl Collector for PreciseProcess {
    fn desc(&self) -> Vec<&Desc> {
        self.inner.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.inner.collect();
        let Some(seconds) = cpu_seconds() else {
            return families;
        };
        for f in families.iter_mut().filter(|f| f.name() == self.cpu_name) {
            for m in f.mut_metric() {
                let mut c = Counter::default();
                c.set_value(seconds);
                m.set_counter(c);
            }
        }
        families
    }
}

/// User and system CPU time of this process, in seconds.
fn cpu_seconds() -> Option<f64> {
    let stat = procfs::process::Process::myself().ok()?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_counted_below_a_second() {
        let registry = prometheus::Registry::new();
        registry.register(process_collector("t")).unwrap();
        // Burn a little CPU: some tens of milliseconds, never a whole second.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let mut text = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut text,
        )
        .unwrap();
        let text = String::from_utf8(text).unwrap();
        let v: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("t_process_cpu_seconds_total "))
            .expect("the cpu series is there")
            .parse()
            .unwrap();
        assert!(v > 0.0 && v.fract() != 0.0, "{v}");
        assert!(text.contains("t_process_resident_memory_bytes "));
    }
}
