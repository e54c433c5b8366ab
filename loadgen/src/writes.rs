//! `loadgen writes`: closed-loop write throughput. Each of `--writers`
//! concurrent writers makes one write, waits for the acknowledgement, and
//! makes the next; writes go round-robin across the cluster's members.
//! Writes made after the warm-up and acknowledged before the end of the
//! measured window count.
//!
//! Against stampede (`--address`) each write registers a node: one committed
//! raft entry. Against etcd (`--etcd-endpoints`, for a side-by-side with
//! `scripts/compare-etcd.sh`) each write is a put through etcd's v3 JSON
//! gateway whose value is the bytes of the node the stampede writer would
//! register; each writer has HTTP/1.1 keep-alive connections of its own.
//! Both run on the same loop ([`closed_loop`]) and give the same report.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use futures::future::BoxFuture;
use hdrhistogram::Histogram;
use prost::Message;
use serde::Serialize;
use stampede_proto::address::{ServerAddresses, ADDRESS_ARG};
use stampede_proto::client::ClusterClient;
use stampede_proto::node_secret::NodeKey;
use stampede_proto::{Node, Resources};

#[derive(Debug, Clone, Args)]
#[command(mut_arg(ADDRESS_ARG, |a| a.required_unless_present("etcd_endpoints")))]
pub struct WritesOpts {
    /// Servers' gRPC addresses, comma-separated (HOST:PORT,...).
    #[command(flatten)]
    pub servers: ServerAddresses,
    /// Write to an etcd cluster instead: its members' client URLs,
    /// comma-separated (http://HOST:PORT,...). Each write is a put through
    /// etcd's v3 JSON gateway (POST /v3/kv/put) of a node registration's
    /// bytes. The stampede addresses are not used then (so an exported
    /// STAMPEDE_ADDRESS may stay).
    #[arg(long, value_delimiter = ',', value_name = "URL")]
    pub etcd_endpoints: Vec<String>,
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
    /// Distinct node ids (etcd: keys) each writer cycles through (each write upserts one).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub ids_per_writer: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct WritesReport {
    /// What was written to: `stampede` or `etcd`.
    pub system: &'static str,
    pub writers: u64,
    pub seconds: f64,
    pub writes: u64,
    pub errors: u64,
    pub writes_per_second: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_max_ms: f64,
    /// What the first failed write said, when one failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl std::fmt::Display for WritesReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: writers {:>4}  writes {:>7} in {:.1}s  {:>8.1} writes/s  latency p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  errors {}",
            self.system,
            self.writers,
            self.writes,
            self.seconds,
            self.writes_per_second,
            self.latency_p50_ms,
            self.latency_p99_ms,
            self.latency_max_ms,
            self.errors
        )?;
        if let Some(e) = &self.first_error {
            write!(f, " (first: {e})")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WritesError {
    #[error("--duration must be more than 0")]
    NoDuration,
    #[error("--etcd-endpoints: {0:?} is not an etcd client URL (http://HOST:PORT): {1}")]
    BadEndpoint(String, String),
    #[error(
        "etcd at {0} did not answer on its v3 JSON gateway (POST {0}/v3/maintenance/status): {1}"
    )]
    EtcdUnreachable(String, String),
    #[error("cannot make an HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    Security(#[from] stampede_proto::security::SecurityError),
    #[error("--address: {0}")]
    Client(#[from] stampede_proto::client::ClientError),
    #[error("a writer stopped: {0}")]
    Writer(#[from] tokio::task::JoinError),
}

pub async fn run(opts: WritesOpts) -> Result<WritesReport, WritesError> {
    if opts.duration.is_zero() {
        return Err(WritesError::NoDuration);
    }
    let ids = opts.ids_per_writer;
    let (system, writers): (&'static str, Vec<Write>) = if opts.etcd_endpoints.is_empty() {
        let client = ClusterClient::new(&opts.servers, &opts.security.load()?)?;
        let run = Run::new();
        let writers = (0..opts.writers)
            .map(|w| stampede_writer(client.clone(), w, ids, run.clone()))
            .collect();
        ("stampede", writers)
    } else {
        let etcd = Etcd::connect(&opts.etcd_endpoints).await?;
        let writers = (0..opts.writers)
            .map(|w| etcd.writer(w, ids))
            .collect::<Result<_, _>>()?;
        ("etcd", writers)
    };
    let mut report = closed_loop(writers, opts.warmup, opts.duration).await?;
    report.system = system;
    Ok(report)
}

/// The node writer `w` registers at its `k`th write: stampede's write, and
/// the value etcd's writer puts.
pub fn bench_node(w: u64, k: u64, ids: u64) -> Node {
    Node {
        id: format!("bench-{w}-{}", k % ids),
        datacenter: "dc1".into(),
        resources: Some(Resources {
            cpu_mhz: 4000,
            memory_mb: 8192,
        }),
        ..Default::default()
    }
}

/// One writer: its `k`th write (from 0), acknowledged or what went wrong.
pub type Write = Box<dyn FnMut(u64) -> BoxFuture<'static, Result<(), String>> + Send>;

/// One run's node identity: each node registers with a secret derived from
/// the run's key, so its ids are the run's own (`RUN-bench-W-I`): a later
/// run against the same cluster could not register an earlier run's nodes.
#[derive(Clone)]
struct Run {
    prefix: String,
    key: NodeKey,
}

impl Run {
    fn new() -> Self {
        Self {
            prefix: format!("{:08x}", rand::random::<u32>()),
            key: NodeKey::random(),
        }
    }
}

fn stampede_writer(client: ClusterClient, w: u64, ids: u64, run: Run) -> Write {
    Box::new(move |k| {
        let client = client.clone();
        let mut node = bench_node(w, k, ids);
        node.id = format!("{}-{}", run.prefix, node.id);
        let secret = run.key.secret(&node.id);
        Box::pin(async move {
            client
                .register_node(node, &secret)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    })
}

/// Runs `writers` closed-loop, each with one write in flight, for `warmup`
/// and then `duration`; writes sent after the warm-up and answered before
/// the end count, in the latency histogram if acknowledged, as errors if not.
pub async fn closed_loop(
    writers: Vec<Write>,
    warmup: Duration,
    duration: Duration,
) -> Result<WritesReport, WritesError> {
    let count = writers.len() as u64;
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let mut tasks = Vec::new();
    for mut write in writers {
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("3 significant figures is valid");
            let mut errors = 0u64;
            let mut first_error = None;
            let mut k = 0u64;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let result = write(k).await;
                k += 1;
                if sent >= measure_from && Instant::now() <= end {
                    match result {
                        Ok(()) => {
                            hist.record(sent.elapsed().as_micros() as u64).ok();
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
            (hist, errors, first_error)
        }));
    }
    let mut hist = Histogram::<u64>::new(3).expect("3 significant figures is valid");
    let mut errors = 0;
    let mut first_error = None;
    for t in tasks {
        let (h, e, first) = t.await?;
        hist.add(h).expect("histograms with the same bounds add");
        errors += e;
        first_error = first_error.or(first);
    }
    let seconds = duration.as_secs_f64();
    Ok(WritesReport {
        system: "",
        writers: count,
        seconds,
        writes: hist.len(),
        errors,
        writes_per_second: hist.len() as f64 / seconds,
        latency_p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        latency_p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        latency_max_ms: hist.max() as f64 / 1000.0,
        first_error,
    })
}

/// Where the etcd writer puts its keys.
pub const ETCD_PREFIX: &str = "/stampede-writes/";

/// How long one etcd request may take before it counts as an error.
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);

/// An etcd cluster's members, checked to answer on the v3 JSON gateway.
pub struct Etcd {
    endpoints: Arc<Vec<String>>,
    /// The next member to write to, shared by every writer: round-robin,
    /// as `ClusterClient` sends stampede's writes.
    next: Arc<AtomicUsize>,
}

impl Etcd {
    /// Checks every URL and asks each member for its status, so that a
    /// wrong address fails at once, naming it, instead of as errors.
    pub async fn connect(urls: &[String]) -> Result<Self, WritesError> {
        let endpoints = urls
            .iter()
            .map(|u| endpoint(u))
            .collect::<Result<Vec<_>, _>>()?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(ETCD_TIMEOUT)
            .build()?;
        for e in &endpoints {
            let unreachable = |why: String| WritesError::EtcdUnreachable(e.clone(), why);
            let reply = http
                .post(format!("{e}/v3/maintenance/status"))
                .body("{}")
                .send()
                .await
                .map_err(|err| unreachable(error_chain(&err)))?;
            let status = reply.status();
            let body: serde_json::Value = reply
                .json()
                .await
                .map_err(|err| unreachable(format!("HTTP {status}, not etcd's JSON: {err}")))?;
            if !status.is_success() || body.get("version").is_none() {
                return Err(unreachable(format!("HTTP {status}: {body}")));
            }
        }
        Ok(Self {
            endpoints: Arc::new(endpoints),
            next: Arc::default(),
        })
    }

    /// Writer `w`: puts keys `ETCD_PREFIX` + `bench-W-I`, each value the
    /// encoded node stampede's writer registers, over HTTP/1.1 connections
    /// of its own kept alive (one per member, one in use at a time).
    pub fn writer(&self, w: u64, ids: u64) -> Result<Write, WritesError> {
        let http = reqwest::Client::builder()
            .http1_only()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(1)
            .timeout(ETCD_TIMEOUT)
            .build()?;
        let endpoints = self.endpoints.clone();
        let next = self.next.clone();
        Ok(Box::new(move |k| {
            let node = bench_node(w, k, ids);
            let body = serde_json::json!({
                "key": b64(format!("{ETCD_PREFIX}{}", node.id).as_bytes()),
                "value": b64(&node.encode_to_vec()),
            })
            .to_string();
            let i = next.fetch_add(1, Ordering::Relaxed) % endpoints.len();
            let request = http
                .post(format!("{}/v3/kv/put", endpoints[i]))
                .header("content-type", "application/json")
                .body(body);
            Box::pin(async move {
                let reply = request.send().await.map_err(|e| error_chain(&e))?;
                let status = reply.status();
                // Read to the end, so the connection is kept for the next write.
                let body = reply.bytes().await.map_err(|e| error_chain(&e))?;
                match status.is_success() {
                    true => Ok(()),
                    false => Err(format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    )),
                }
            })
        }))
    }
}

/// An etcd client URL as given (`http://HOST:PORT`), without a trailing `/`.
fn endpoint(url: &str) -> Result<String, WritesError> {
    let bad = |why: &str| WritesError::BadEndpoint(url.to_string(), why.to_string());
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if parsed.scheme() != "http" {
        return Err(bad("only http:// is supported (etcd without TLS)"));
    }
    if parsed.host_str().is_none_or(str::is_empty) || parsed.port_or_known_default().is_none() {
        return Err(bad("no host"));
    }
    if parsed.path() != "/" || parsed.query().is_some() {
        return Err(bad("a client URL has no path"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// An error with its causes, which reqwest keeps apart ("error sending
/// request": "connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_endpoint_is_an_http_url_with_a_host_and_port() {
        assert_eq!(
            endpoint("http://127.0.0.1:2379/").unwrap(),
            "http://127.0.0.1:2379"
        );
        assert_eq!(
            endpoint("http://localhost:2379").unwrap(),
            "http://localhost:2379"
        );
        for (bad, why) in [
            ("127.0.0.1:2379", "relative URL without a base"),
            ("https://127.0.0.1:2379", "only http://"),
            ("http://127.0.0.1:2379/v3", "no path"),
            ("", "relative URL"),
        ] {
            let e = endpoint(bad).unwrap_err().to_string();
            assert!(
                e.contains("--etcd-endpoints")
                    && e.contains(&format!("{bad:?}"))
                    && e.contains(why),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn an_etcd_value_is_the_node_stampede_registers() {
        let node = bench_node(3, 107, 100);
        assert_eq!(node.id, "bench-3-7");
        let bytes = node.encode_to_vec();
        assert_eq!(Node::decode(bytes.as_slice()).unwrap(), node);
        // About 25 bytes, as BENCHMARKS.md says.
        let largest = bench_node(255, 99, 100).encode_to_vec().len();
        assert!(
            (20..=30).contains(&bytes.len()) && largest <= 30,
            "{} {largest}",
            bytes.len()
        );
        assert_eq!(b64(b"foo"), "Zm9v");
    }
}
