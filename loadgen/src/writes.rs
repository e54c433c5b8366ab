//! `loadgen writes`: closed-loop raft write throughput. Each of `--writers`
//! concurrent writers registers a node, waits for the acknowledgement, and
//! registers the next; every acknowledged write is one committed raft entry.

use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde::Serialize;
use stampede_proto::client::ClusterClient;
use stampede_proto::{Node, Resources};

#[derive(Debug, Clone, Args)]
pub struct WritesOpts {
    /// Servers' gRPC addresses, comma-separated (HOST:PORT,...).
    #[arg(long, value_delimiter = ',', required = true)]
    pub servers: Vec<String>,
    /// TLS files and the ACL token to present (or STAMPEDE_TLS_* and STAMPEDE_TOKEN).
    #[command(flatten)]
    pub security: stampede_proto::security::ClientSecurityArgs,
    /// Concurrent writers, each with one write in flight.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub writers: u64,
    /// How long to measure, after the warm-up.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Writes before this long has passed are not counted.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Distinct node ids each writer cycles through (each write upserts one).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub ids_per_writer: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct WritesReport {
    pub writers: u64,
    pub seconds: f64,
    pub writes: u64,
    pub errors: u64,
    pub writes_per_second: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_max_ms: f64,
}

impl std::fmt::Display for WritesReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "writers {:>4}  writes {:>7} in {:.1}s  {:>8.1} writes/s  latency p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  errors {}",
            self.writers,
            self.writes,
            self.seconds,
            self.writes_per_second,
            self.latency_p50_ms,
            self.latency_p99_ms,
            self.latency_max_ms,
            self.errors
        )
    }
}

pub async fn run(opts: WritesOpts) -> anyhow::Result<WritesReport> {
    let client = ClusterClient::new(&opts.servers, &opts.security.load()?)?;
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let end = measure_from + opts.duration;
    let mut tasks = Vec::new();
    for w in 0..opts.writers {
        let client = client.clone();
        let ids = opts.ids_per_writer;
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("3 significant figures is valid");
            let mut errors = 0u64;
            let mut k = 0u64;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let node = Node {
                    id: format!("bench-{w}-{}", k % ids),
                    datacenter: "dc1".into(),
                    resources: Some(Resources {
                        cpu_mhz: 4000,
                        memory_mb: 8192,
                    }),
                    ..Default::default()
                };
                k += 1;
                let ok = client.register_node(node).await.is_ok();
                if sent >= measure_from && Instant::now() <= end {
                    if ok {
                        hist.record(sent.elapsed().as_micros() as u64).ok();
                    } else {
                        errors += 1;
                    }
                }
            }
            (hist, errors)
        }));
    }
    let mut hist = Histogram::<u64>::new(3).expect("3 significant figures is valid");
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await?;
        hist.add(h).expect("histograms with the same bounds add");
        errors += e;
    }
    let seconds = opts.duration.as_secs_f64();
    Ok(WritesReport {
        writers: opts.writers,
        seconds,
        writes: hist.len(),
        errors,
        writes_per_second: hist.len() as f64 / seconds,
        latency_p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        latency_p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        latency_max_ms: hist.max() as f64 / 1000.0,
    })
}
