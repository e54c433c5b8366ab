//! `loadgen capacity`: a capacity-planning run. For each variant of the
//! scenario it starts a local cluster of real `cluster` processes and a
//! `nodesim` fleet (or uses the ones given), runs the job stream, samples
//! every process's `/metrics`, and writes a run directory: `summary.json`,
//! `samples.json`, a self-contained `report.html`, and each process's last
//! `/metrics` under `VARIANT/metrics/`. When Prometheus is installed it scrapes
//! the run too (`prometheus_run`), for the Grafana dashboards. A scenario with
//! `[[faults]]` has them injected during the stream (`faults`), and its run
//! ends with an audit of every acknowledged job on every server.
//!
//! This module runs things and builds the summary from what they measured;
//! the summary's model, its SLO checks and the baseline comparison are in
//! `summary`, and `report` renders it.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::Args;
use stampede_launch::{sibling_bin, LaunchOptions, LocalCluster};
use stampede_proto::client::ClusterClient;
use stampede_proto::security::{ClientSecurityArgs, Role, TlsArgs};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::faults::{self, FaultsConfig};
use crate::inventory::Inventory;
use crate::metrics::LoadMetrics;
use crate::prometheus_run::{self, PrometheusRun};
use crate::report;
use crate::sampler::{self, label, Series, Target, LOADGEN_TARGET};
use crate::scenario::{Arrival, Scenario, Variant};
use crate::search::{Probe, Search, SearchReport};
use crate::stream;
use crate::stream::StreamReport;
use crate::summary::{self, RunSummary, VariantSummary, SCHEMA_VERSION};

#[derive(Debug, Clone, Args)]
pub struct CapacityOpts {
    /// A built-in scenario (default, client-updates, deployments, c2m-mini, faults, failover, tls, soak, churn, max-rate) or a TOML file.
    #[arg(long, default_value = "default")]
    pub scenario: String,
    /// How long jobs are submitted, overriding the scenario's `duration`
    /// (e.g. `30m` for a soak, `2m` in CI); at most 24h.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Search for the highest arrival rate whose measures all meet the
    /// scenario's SLOs: each probe is a whole run at one rate, doubling or
    /// halving until one passes and one fails, then narrowing to 10%.
    #[arg(long, conflicts_with = "servers")]
    pub find_max_rate: bool,
    /// With --find-max-rate or a scenario's [search]: how long the search may
    /// take in all; it stops before a probe that would not fit [default: the
    /// scenario's [search] budget, or 30m].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub budget: Option<Duration>,
    /// The run directory [default: runs/SCENARIO-UNIXTIME].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Drive an existing cluster at these gRPC addresses; nothing is spawned,
    /// and only the scenario's first variant runs.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    /// With --servers: every process's /metrics URL to sample (servers and nodesim shards).
    #[arg(long, value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// The servers and nodesim shards of a deployed run, from a TOML file
    /// (see `loadgen::inventory`): in place of --servers and --metrics, and
    /// the stream waits until the shards' whole fleet is ready.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["servers", "metrics", "find_max_rate"])]
    pub inventory: Option<PathBuf>,
    /// The nodesim shards' /metrics, from --inventory.
    #[arg(skip)]
    pub fleet_metrics: Vec<String>,
    /// With --servers: the TLS files and token to present to that cluster.
    #[command(flatten)]
    pub security: ClientSecurityArgs,
    /// An earlier run's summary.json: flag (and fail on) costs or latencies
    /// more than 10% above it, variant by variant.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// How often every process's /metrics is read.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub sample_every: Duration,
    /// Where loadgen serves its own /metrics (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub serve_metrics: SocketAddr,
    /// Do not start Prometheus even if it is installed.
    #[arg(long)]
    pub no_prometheus: bool,
    /// With [[faults]]: how long, past a fault's injection or its end
    /// (whichever is later), a leader may take to appear before the fault
    /// is reported without one.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub fault_leader_wait: Duration,
    /// With [[faults]]: how long the servers may take, after the stream, to
    /// answer and apply the same raft index before the audit gives up (and
    /// the run fails).
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub audit_wait: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    #[error("{0}")]
    Launch(#[from] stampede_launch::LaunchError),
    #[error(transparent)]
    Security(#[from] stampede_proto::security::SecurityError),
    #[error("--find-max-rate: scenario {0} has no [slo] (p99_placement_ms or p99_running_ms) to search against")]
    SearchNeedsSlo(String),
    #[error("cannot write {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error("cannot start nodesim ({0}): {1}")]
    Nodesim(PathBuf, std::io::Error),
    #[error("--servers: {0}")]
    Client(#[from] stampede_proto::client::ClientError),
    #[error("the fleet is not ready: {0}")]
    FleetNotReady(String),
    #[error("--servers needs --metrics, the /metrics URL of every process to sample")]
    NoMetrics,
    #[error("--baseline {0}: {1}")]
    Baseline(PathBuf, String),
    #[error("--serve-metrics {0}: {1}")]
    ServeMetrics(SocketAddr, std::io::Error),
    #[error("--sample-every must be at least 100ms")]
    SampleEvery,
    #[error("scenario {0} has [[faults]], which kill, pause and partition servers loadgen started itself; with --servers it drives a cluster it did not start: run it without --servers")]
    FaultsNeedLocal(String),
    #[error("scenario {0} is a search ([search]): each probe starts a cluster of its own, so it cannot run against --servers")]
    SearchNeedsLocal(String),
}

pub async fn run(mut opts: CapacityOpts) -> anyhow::Result<RunSummary> {
    if let Some(path) = &opts.inventory {
        let inventory = Inventory::load(path)?;
        opts.servers = inventory.server_addrs();
        opts.metrics = inventory.metrics_urls();
        opts.fleet_metrics = inventory.fleet_urls();
    }
    if opts.sample_every < Duration::from_millis(100) {
        return Err(CapacityError::SampleEvery.into());
    }
    let mut scenario = Scenario::load(&opts.scenario)?;
    if let Some(d) = opts.duration {
        scenario = scenario.with_duration(d)?;
    }
    if !scenario.faults.is_empty() && !opts.servers.is_empty() {
        return Err(CapacityError::FaultsNeedLocal(scenario.name.clone()).into());
    }
    if scenario.search.is_some() && !opts.servers.is_empty() {
        return Err(CapacityError::SearchNeedsLocal(scenario.name.clone()).into());
    }
    let baseline = match &opts.baseline {
        Some(path) => Some(load_baseline(path)?),
        None => None,
    };
    let out = opts.out.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from("runs").join(format!("{}-{now}", scenario.name))
    });
    std::fs::create_dir_all(&out).map_err(|e| CapacityError::Write(out.clone(), e))?;
    let metrics = LoadMetrics::new();
    metrics.set_slo(&scenario.slo);
    let own = metrics
        .serve(opts.serve_metrics)
        .await
        .map_err(|e| CapacityError::ServeMetrics(opts.serve_metrics, e))?;
    let tls_dir = out.join("tls");
    if opts.servers.is_empty() {
        stampede_launch::make_tls_dir(&sibling_bin("cluster")?, &tls_dir)?;
    }
    // Prometheus presents the operator certificate to servers with TLS.
    let scrape_tls = match opts.servers.is_empty() {
        true => TlsArgs::in_dir(&tls_dir, Role::Operator),
        false => opts.security.tls.clone(),
    };
    let prometheus = start_prometheus(&opts, &out, own, &scrape_tls).await;
    let ctx = Ctx {
        opts: &opts,
        metrics: &metrics,
        prometheus: prometheus.as_ref(),
        tls_dir,
        own_metrics: own_metrics_url(own),
    };
    let summary = match search_budget(&scenario, &opts) {
        Some(budget) => find_max_rate(&scenario, budget, &out, &ctx, baseline.as_ref()).await?,
        None => run_variants(&scenario, &opts, &out, &ctx, baseline.as_ref()).await?,
    };
    let loadgen_metrics = out.join("loadgen.prom");
    std::fs::write(&loadgen_metrics, metrics.render())
        .map_err(|e| CapacityError::Write(loadgen_metrics, e))?;
    if let Some(p) = prometheus {
        p.stop();
    }
    println!("{}", report::table(&summary));
    println!("report: {}", out.join("report.html").display());
    if let Some(p) = &summary.prometheus {
        println!("prometheus data: {}", p.browse);
    }
    if !summary.audit_failures.is_empty() {
        anyhow::bail!("audit failed: {}", summary.audit_failures.join("; "));
    }
    Ok(summary)
}

/// Every variant of the scenario in turn (only the first with --servers).
async fn run_variants(
    scenario: &Scenario,
    opts: &CapacityOpts,
    out: &Path,
    ctx: &Ctx<'_>,
    baseline: Option<&serde_json::Value>,
) -> Result<RunSummary, CapacityError> {
    let runs = if opts.servers.is_empty() {
        scenario.runs()
    } else {
        scenario.runs().into_iter().take(1).collect()
    };
    let mut variants = Vec::new();
    let finish = |variants: &[VariantSummary]| {
        finish(scenario, variants, out, runs.len(), ctx, baseline, None)
    };
    for (i, v) in runs.iter().enumerate() {
        let scenario_v = scenario.for_variant(v);
        eprintln!(
            "loadgen: {} {}/{}: {} ({} nodes, {} of jobs)",
            scenario.name,
            i + 1,
            runs.len(),
            v.name,
            scenario_v.nodes,
            humantime::format_duration(scenario.duration)
        );
        let dir = out.join(&v.name);
        let summary = match opts.servers.is_empty() {
            true => run_local(&scenario_v, v, &dir, ctx).await?,
            false => run_remote(&scenario_v, v, &dir, ctx).await?,
        };
        // Written after every variant, so a later failure leaves this one.
        variants.push(summary);
        let partial = finish(&variants)?;
        if !partial.complete && variants.last().is_some_and(|v| !v.problems.is_empty()) {
            break;
        }
    }
    finish(&variants)
}

/// What every variant of a run shares.
struct Ctx<'a> {
    opts: &'a CapacityOpts,
    metrics: &'a LoadMetrics,
    prometheus: Option<&'a PrometheusRun>,
    /// The CA, certificates and token every local cluster of the run uses
    /// (so that Prometheus, set up once, can scrape them all).
    tls_dir: PathBuf,
    /// loadgen's own `/metrics`, sampled like every other process's so that
    /// its CPU counts in the run's cost.
    own_metrics: String,
}

/// The URL of loadgen's own `/metrics`, served at `addr` (on every address
/// when it is unspecified: then read on loopback).
fn own_metrics_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => std::net::Ipv4Addr::LOCALHOST.into(),
        ip if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    format!("http://{}/metrics", SocketAddr::new(ip, addr.port()))
}

/// loadgen itself, as a process to sample.
fn loadgen_target(ctx: &Ctx<'_>) -> Target {
    Target {
        name: LOADGEN_TARGET.into(),
        url: ctx.own_metrics.clone(),
    }
}

/// Starts Prometheus in the run directory if it is installed and wanted. A
/// Prometheus that fails to start is reported and the run goes on without it:
/// the run's own numbers do not depend on it.
async fn start_prometheus(
    opts: &CapacityOpts,
    out: &Path,
    own: SocketAddr,
    tls: &TlsArgs,
) -> Option<PrometheusRun> {
    if opts.no_prometheus {
        return None;
    }
    let Some(bin) = prometheus_run::installed() else {
        eprintln!("loadgen: prometheus is not installed; the run is not scraped for Grafana (scripts/setup-debian.sh --tests installs it)");
        return None;
    };
    match PrometheusRun::start(&bin, out, opts.sample_every, own.to_string(), tls).await {
        Ok(p) => {
            eprintln!("loadgen: prometheus at {}", p.info().url);
            Some(p)
        }
        Err(e) => {
            eprintln!("loadgen: prometheus not started: {e}");
            None
        }
    }
}

/// The search's time budget when the run is a search (`--find-max-rate`, or
/// a scenario with `[search]`): `--budget` first, then the scenario's.
fn search_budget(scenario: &Scenario, opts: &CapacityOpts) -> Option<Duration> {
    if !opts.find_max_rate && scenario.search.is_none() {
        return None;
    }
    let from_scenario = scenario.search.as_ref().map(|s| s.budget);
    Some(
        opts.budget
            .or(from_scenario)
            .unwrap_or(crate::scenario::DEFAULT_SEARCH_BUDGET),
    )
}

/// `--find-max-rate` or `[search]`: probes of the whole scenario at one rate each (see
/// [`crate::search`]), every probe a variant of the run and the search's
/// outcome in `summary.json`'s `search`.
async fn find_max_rate(
    scenario: &Scenario,
    budget: Duration,
    out: &Path,
    ctx: &Ctx<'_>,
    baseline: Option<&serde_json::Value>,
) -> Result<RunSummary, CapacityError> {
    if scenario.slo.p99_placement_ms.is_none() && scenario.slo.p99_running_ms.is_none() {
        return Err(CapacityError::SearchNeedsSlo(scenario.name.clone()));
    }
    let start = match scenario.arrival {
        Arrival::Constant { rate } | Arrival::Poisson { rate } => rate,
        Arrival::Ramp { to, .. } => to,
    };
    let budget_s = budget.as_secs_f64();
    let began = Instant::now();
    let mut search = Search::new(start);
    let mut variants: Vec<VariantSummary> = Vec::new();
    let mut longest = Duration::ZERO;
    let mut again: Option<f64> = None;
    let mut out_of_budget = false;
    loop {
        let (value, repeat) = match again.take() {
            Some(v) => (v, true),
            None => match search.next() {
                Some(v) => (v, false),
                None => break,
            },
        };
        if began.elapsed() + longest > budget {
            out_of_budget = true;
            break;
        }
        let v = Variant {
            name: format!("rate-{value}{}", if repeat { "-again" } else { "" }),
            nodes: None,
            rate: Some(value),
            server_args: vec![],
            nodesim_args: vec![],
            tls: None,
        };
        eprintln!(
            "loadgen: search probe {}: {value} jobs/s{} ({} of the {} budget left)",
            variants.len() + 1,
            if repeat {
                ", again: near a threshold"
            } else {
                ""
            },
            humantime::format_duration(Duration::from_secs(
                budget.saturating_sub(began.elapsed()).as_secs()
            )),
            humantime::format_duration(budget)
        );
        let t0 = Instant::now();
        let summary = run_local(&scenario.for_variant(&v), &v, &out.join(&v.name), ctx).await?;
        longest = longest.max(t0.elapsed());
        let (passed, near, breaches) = summary::judge(&scenario.slo, &summary);
        eprintln!(
            "loadgen:   {value} jobs/s {}",
            if passed {
                "met every SLO".to_string()
            } else {
                format!("failed: {}", breaches.join("; "))
            }
        );
        search.record(Probe {
            value,
            passed,
            p99_placement_ms: summary.stream.placement_ms.p99,
            p99_running_ms: summary.stream.time_to_running_ms.p99,
            breaches,
            repeat,
            seconds: t0.elapsed().as_secs_f64(),
        });
        if passed && near && !repeat {
            again = Some(value);
        }
        variants.push(summary);
        let so_far = search.report(budget_s, began.elapsed().as_secs_f64(), false);
        finish(
            scenario,
            &variants,
            out,
            variants.len(),
            ctx,
            baseline,
            Some(so_far),
        )?;
    }
    let report = search.report(budget_s, began.elapsed().as_secs_f64(), out_of_budget);
    eprintln!("loadgen: search: {}", report.confidence);
    finish(
        scenario,
        &variants,
        out,
        variants.len(),
        ctx,
        baseline,
        Some(report),
    )
}

/// Writes summary.json, samples.json and report.html for what has run so far.
fn finish(
    scenario: &Scenario,
    variants: &[VariantSummary],
    out: &Path,
    planned: usize,
    ctx: &Ctx,
    baseline: Option<&serde_json::Value>,
    search: Option<SearchReport>,
) -> Result<RunSummary, CapacityError> {
    let first = variants.first();
    let summary = RunSummary {
        schema_version: SCHEMA_VERSION,
        scenario: scenario.clone(),
        raft_entries_by_type: first
            .map(|v| v.raft_entries_by_type.clone())
            .unwrap_or_default(),
        blocking_queries_by_source: first
            .map(|v| v.blocking_queries_by_source.clone())
            .unwrap_or_default(),
        variants: variants.to_vec(),
        regressions: baseline
            .map(|b| summary::regressions(b, &serde_json::to_value(variants).unwrap_or_default()))
            .unwrap_or_default(),
        slo_breaches: summary::slo_breaches(&scenario.slo, variants),
        audit_failures: summary::audit_failures(variants),
        complete: variants.len() == planned && variants.iter().all(|v| v.problems.is_empty()),
        prometheus: ctx.prometheus.map(|p| p.info().clone()),
        search,
    };
    let write = |name: &str, body: String| {
        let path = out.join(name);
        std::fs::write(&path, body).map_err(|e| CapacityError::Write(path, e))
    };
    write(
        "summary.json",
        serde_json::to_string_pretty(&summary).expect("the summary serializes"),
    )?;
    let samples: BTreeMap<&str, &Vec<Series>> = variants
        .iter()
        .map(|v| (v.name.as_str(), &v.series))
        .collect();
    write(
        "samples.json",
        serde_json::to_string(&samples).expect("samples serialize"),
    )?;
    write("report.html", report::html(&summary))?;
    Ok(summary)
}

/// Reads `--baseline`: an earlier run's summary.json (see `summary::parse_baseline`).
fn load_baseline(path: &Path) -> Result<serde_json::Value, CapacityError> {
    let bad = |m: String| CapacityError::Baseline(path.to_path_buf(), m);
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    summary::parse_baseline(&text).map_err(|e| bad(e.to_string()))
}

/// Names as the cluster takes them in ids: letters, digits and `-_.:`.
fn id_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// A port that was free a moment ago.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Stops nodesim when the run ends, early or not: SIGTERM, so it flushes
/// and prints its summary.
struct NodesimProc(Option<Child>);

impl Drop for NodesimProc {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            stampede_launch::terminate(child);
        }
    }
}

async fn run_local(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    ctx: &Ctx<'_>,
) -> Result<VariantSummary, CapacityError> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| CapacityError::Write(dir.into(), e))?;
    let server_args: Vec<String> = scenario
        .server_args
        .iter()
        .chain(&v.server_args)
        .cloned()
        .collect();
    let launch = LaunchOptions {
        bin: sibling_bin("cluster")?,
        servers: scenario.servers as usize,
        root: Some(dir.join("cluster")),
        server_args,
        insecure: !scenario.tls,
        tls_dir: Some(ctx.tls_dir.clone()),
    };
    // Partitions cut the peer links: the servers reach each other through
    // loadgen's fault proxy.
    let mut cluster = match scenario.partitions() {
        true => LocalCluster::start_with_links(launch)?,
        false => LocalCluster::start(launch)?,
    };
    cluster.wait_for_leader(Duration::from_secs(60)).await?;

    let nodesim_bin = sibling_bin("nodesim")?;
    let port = free_port().map_err(|e| CapacityError::Nodesim(nodesim_bin.clone(), e))?;
    let log = std::fs::File::create(dir.join("nodesim.log"))
        .map_err(|e| CapacityError::Write(dir.join("nodesim.log"), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| CapacityError::Write(dir.join("nodesim.log"), e))?;
    // nodesim presents the client certificate and a write token (through
    // its environment, so that it does not show in `ps`).
    let mut nodesim_cmd = Command::new(&nodesim_bin);
    // Only what this cluster asks for: not the caller's own STAMPEDE_* settings.
    for var in [
        "STAMPEDE_TLS_CA",
        "STAMPEDE_TLS_CERT",
        "STAMPEDE_TLS_KEY",
        "STAMPEDE_TOKEN",
    ] {
        nodesim_cmd.env_remove(var);
    }
    if let Some(tls_dir) = cluster.tls_dir() {
        nodesim_cmd.args(TlsArgs::in_dir(tls_dir, Role::Client).to_args());
    }
    if let Some(token) = cluster.security(Role::Client)?.token {
        nodesim_cmd.env("STAMPEDE_TOKEN", token);
    }
    let child = nodesim_cmd
        .args(["--nodes", &scenario.nodes.to_string()])
        .args(["--servers", &cluster.rpc_addrs().join(",")])
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .args([
            "--id-prefix",
            &id_safe(&format!("{}-{}", scenario.name, v.name)),
        ])
        .args(scenario.nodesim_args.iter().chain(&v.nodesim_args))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| CapacityError::Nodesim(nodesim_bin.clone(), e))?;
    let nodesim = NodesimProc(Some(child));

    let mut targets: Vec<Target> = cluster
        .servers()
        .iter()
        .map(|s| Target {
            name: format!("server-{}", s.id),
            url: format!("{}://{}/metrics", cluster.scheme(), s.http),
        })
        .collect();
    let nodesim_url = format!("http://127.0.0.1:{port}/metrics");
    targets.push(Target {
        name: "nodesim".into(),
        url: nodesim_url.clone(),
    });
    targets.push(loadgen_target(ctx));
    if let Some(p) = ctx.prometheus {
        let servers: Vec<String> = cluster
            .servers()
            .iter()
            .map(|s| s.http.to_string())
            .collect();
        let scheme = cluster.scheme();
        if let Err(e) = p.set_targets(
            &v.name,
            scheme,
            &servers,
            Some(&[format!("127.0.0.1:{port}")]),
        ) {
            eprintln!("loadgen: {e}");
        }
    }
    let mut problems = Vec::new();
    let operator = cluster.security(Role::Operator)?;
    let http = stampede_launch::http_client(&operator, Duration::from_secs(5))?;
    if let Err(e) = wait_for_fleet(&http, &[nodesim_url], scenario.nodes).await {
        problems.push(e);
    }
    let client = ClusterClient::new(&cluster.rpc_addrs(), &operator)?;
    let mut summary = drive(
        scenario,
        v,
        Driving {
            client,
            http,
            targets,
            tls: scenario.tls,
        },
        dir,
        ctx,
        problems,
        Some(&mut cluster),
    )
    .await?;
    for s in &summary.series {
        if let Some(t) = s.lost_at {
            summary.problems.push(format!(
                "{} stopped answering {t:.0}s into the run",
                s.target.name
            ));
        }
    }
    drop(nodesim);
    cluster.stop_all();
    Ok(summary)
}

async fn run_remote(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    ctx: &Ctx<'_>,
) -> Result<VariantSummary, CapacityError> {
    let opts = ctx.opts;
    if opts.metrics.is_empty() {
        return Err(CapacityError::NoMetrics);
    }
    let servers = opts.metrics.len() - opts.fleet_metrics.len();
    let targets = opts
        .metrics
        .iter()
        .enumerate()
        .map(|(i, url)| Target {
            // An inventory says which processes are servers (its servers'
            // URLs come first), so their CPU and memory are the servers'.
            name: match opts.inventory.is_some() {
                true if i < servers => format!("server-{}", i + 1),
                true => format!("nodesim-{}", i - servers),
                false => format!("process-{}", i + 1),
            },
            url: url.clone(),
        })
        .chain([loadgen_target(ctx)])
        .collect();
    let security = opts.security.load()?;
    let http = stampede_launch::http_client(&security, Duration::from_secs(5))?;
    if let Some(p) = ctx.prometheus {
        let (nodesim, servers) = classify(&http, &opts.metrics).await;
        if let Err(e) = p.set_targets(&v.name, security.scheme(), &servers, Some(&nodesim)) {
            eprintln!("loadgen: {e}");
        }
    }
    if !opts.fleet_metrics.is_empty() {
        wait_for_fleet(&http, &opts.fleet_metrics, scenario.nodes)
            .await
            .map_err(CapacityError::FleetNotReady)?;
    }
    let client = ClusterClient::new(&opts.servers, &security)?;
    let driving = Driving {
        client,
        http,
        targets,
        tls: security.tls.is_some(),
    };
    drive(scenario, v, driving, dir, ctx, Vec::new(), None).await
}

/// Splits `/metrics` URLs into nodesim shards and servers (host:port each,
/// as Prometheus targets), by what each serves; one that does not answer
/// counts as a server.
async fn classify(http: &reqwest::Client, urls: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut nodesim, mut servers) = (Vec::new(), Vec::new());
    for url in urls {
        let host = url
            .split_once("://")
            .map_or(url.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let text = match http.get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if text.contains("stampede_nodesim_") {
            nodesim.push(host);
        } else {
            servers.push(host);
        }
    }
    (nodesim, servers)
}

/// Waits until nodesim's shards (one locally, every shard of a deployed
/// fleet with --inventory) together say `nodes` nodes are ready, or until
/// they say the cluster refused them all.
async fn wait_for_fleet(http: &reqwest::Client, urls: &[String], nodes: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let ready_series = "stampede_nodesim_nodes{state=\"ready\"}";
    let refused_series = "stampede_nodesim_errors_total{kind=\"register\"}";
    // Per shard: (ready, refused), or None while it does not answer.
    let mut shards: Vec<Option<(u64, u64)>> = Vec::new();
    if urls.len() > 1 {
        eprintln!(
            "loadgen: waiting for {nodes} nodes in {} nodesim shards",
            urls.len()
        );
    }
    while Instant::now() < deadline {
        shards.clear();
        for url in urls {
            let text = match http.get(url).send().await {
                Ok(r) => r.text().await.ok(),
                Err(_) => None,
            };
            shards.push(text.map(|text| {
                let values = sampler::parse(&text);
                let get = |series| values.get(series).copied().unwrap_or(0.0) as u64;
                (get(ready_series), get(refused_series))
            }));
        }
        let (ready, refused) = shards
            .iter()
            .flatten()
            .fold((0, 0), |(r, f), (ready, refused)| (r + ready, f + refused));
        if ready >= nodes {
            return Ok(());
        }
        if refused >= nodes {
            return Err("the cluster refused nodesim's nodes (see nodesim.log)".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let each: Vec<String> = urls
        .iter()
        .zip(&shards)
        .map(|(url, shard)| match shard {
            Some((ready, _)) => format!("{url}: {ready} ready"),
            None => format!("{url}: not answering"),
        })
        .collect();
    Err(format!(
        "fewer than the scenario's {nodes} nodes were ready after 5 minutes ({})",
        each.join(", ")
    ))
}

/// Runs the stream while sampling (and, given the local `cluster`, injects
/// the scenario's faults meanwhile and audits after), keeps each process's
/// last `/metrics` in `dir/metrics/`, and sums up.
#[allow(clippy::too_many_arguments)]
/// How a variant reaches its cluster: the gRPC client, an HTTP client for
/// `/metrics` (with the cluster's certificate when it has TLS), what to sample.
struct Driving {
    client: ClusterClient,
    http: reqwest::Client,
    targets: Vec<Target>,
    tls: bool,
}

async fn drive(
    scenario: &Scenario,
    v: &Variant,
    driving: Driving,
    dir: &Path,
    ctx: &Ctx<'_>,
    mut problems: Vec<String>,
    mut cluster: Option<&mut LocalCluster>,
) -> Result<VariantSummary, CapacityError> {
    let start = Instant::now();
    let started_unix = unix_now();
    let (stop, stopped) = watch::channel(false);
    let Driving {
        client,
        http,
        targets,
        tls,
    } = driving;
    let sampling = tokio::spawn(sampler::run(
        http,
        targets,
        ctx.opts.sample_every,
        start,
        stopped,
    ));
    let prefix = id_safe(&format!("{}-{}", scenario.name, v.name));
    let progress = crate::progress::Progress::start(scenario, ctx.metrics);
    let fault_cfg = FaultsConfig {
        leader_wait: ctx.opts.fault_leader_wait,
        audit_wait: ctx.opts.audit_wait,
        ..FaultsConfig::default()
    };
    let stream = stream::run(client, scenario, &prefix, ctx.metrics, start);
    let ((report, journal), injected) = match cluster.as_deref_mut() {
        Some(cluster) if !scenario.faults.is_empty() => {
            let injecting = faults::inject(cluster, &scenario.faults, start, &fault_cfg);
            let (stream, (injected, fault_problems)) = tokio::join!(stream, injecting);
            problems.extend(fault_problems);
            (stream, injected)
        }
        _ => (stream.await, Vec::new()),
    };
    progress.finish();
    if let Some(p) = ctx.prometheus {
        p.settle(ctx.opts.sample_every).await;
    }
    let _ = stop.send(true);
    let series = sampling.await.unwrap_or_default();
    let metrics_dir = dir.join("metrics");
    std::fs::create_dir_all(&metrics_dir)
        .map_err(|e| CapacityError::Write(metrics_dir.clone(), e))?;
    for s in &series {
        if let Some(text) = &s.last_text {
            let path = metrics_dir.join(format!("{}.prom", s.target.name));
            std::fs::write(&path, text).map_err(|e| CapacityError::Write(path, e))?;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let ended_unix = unix_now();
    let mut summary = summarize(v, report, series, seconds, problems);
    summary.tls = tls;
    summary.started_unix = started_unix;
    summary.ended_unix = ended_unix;
    if let Some(cluster) = cluster.as_deref().filter(|_| !scenario.faults.is_empty()) {
        let stream_s = scenario.duration.as_secs_f64();
        summary.faults =
            faults::measure(&injected, &journal, stream_s, fault_cfg.throughput_window);
        summary.acks_per_second = faults::acks_per_second(&journal, seconds);
        eprintln!(
            "loadgen: auditing {} acknowledged jobs on every server",
            journal.acked.len()
        );
        summary.audit = Some(faults::audit(cluster, &journal, &fault_cfg).await);
    }
    Ok(summary)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A counter's growth by `type` label; every server applies every entry, so
/// the most any server counted is the run's.
fn most_by_type(servers: &[&Series], metric: &str) -> BTreeMap<String, u64> {
    most_by_label(servers, metric, "type")
}

/// A counter's growth by one label, the most any server counted.
fn most_by_label(servers: &[&Series], metric: &str, key: &str) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for s in servers {
        for name in s.names_of(metric) {
            let t = label(&name, key).unwrap_or("?").to_string();
            let n = s.delta(&name).max(0.0) as u64;
            let e = by.entry(t).or_insert(0);
            *e = (*e).max(n);
        }
    }
    by
}

/// When a soak's memory should have settled: its growth after this is what
/// `server_rss_growth_after_10m` reports.
pub const SOAK_SETTLE: Duration = Duration::from_secs(600);

fn summarize(
    v: &Variant,
    stream: StreamReport,
    series: Vec<Series>,
    seconds: f64,
    problems: Vec<String>,
) -> VariantSummary {
    let servers: Vec<&Series> = series
        .iter()
        .filter(|s| !s.names_of("stampede_raft_entries_total").is_empty())
        .collect();
    let raft_entries_by_type = most_by_type(&servers, "stampede_raft_entries_total");
    let raft_bytes_by_type = most_by_type(&servers, "stampede_raft_entry_bytes_total");
    // Queries are served by whichever server got them: add up.
    let mut blocking_queries_by_source = BTreeMap::new();
    for s in &servers {
        for name in s.names_of("stampede_blocking_queries_started_total") {
            let src = label(&name, "source").unwrap_or("?").to_string();
            *blocking_queries_by_source.entry(src).or_insert(0) += s.delta(&name).max(0.0) as u64;
        }
    }
    let deployment_query_wait_seconds = servers
        .iter()
        .map(|s| {
            s.delta("stampede_deployment_watcher_limiter_wait_seconds_sum")
                .max(0.0)
        })
        .sum();
    let mut client_update_rpcs = BTreeMap::new();
    for s in &series {
        for name in s.names_of("stampede_nodesim_update_rpcs_total") {
            let p = label(&name, "priority").unwrap_or("?").to_string();
            *client_update_rpcs.entry(p).or_insert(0) += s.delta(&name).max(0.0) as u64;
        }
    }
    let share = |by_type: &BTreeMap<String, u64>| {
        let total: u64 = by_type.values().sum();
        let updates = by_type.get("alloc_client_update").copied().unwrap_or(0);
        if total > 0 {
            updates as f64 / total as f64
        } else {
            0.0
        }
    };
    let (client_update_share, client_update_byte_share) =
        (share(&raft_entries_by_type), share(&raft_bytes_by_type));
    // Every process's own CPU counter (servers, nodesim, loadgen), read
    // over the stream: as average cores each, and in all per placement.
    let mut cpu_cores = BTreeMap::new();
    let mut cpu_seconds = 0.0;
    let mut rss_mib = BTreeMap::new();
    for s in &series {
        let span = match (s.points.first(), s.points.last()) {
            (Some(a), Some(b)) if b.t > a.t => b.t - a.t,
            _ => continue,
        };
        let cpu = s.increase("process_cpu_seconds_total");
        cpu_seconds += cpu;
        cpu_cores.insert(s.target.name.clone(), cpu / span);
        let peak = s
            .points
            .iter()
            .filter_map(|p| p.values.get("process_resident_memory_bytes"))
            .fold(0.0f64, |a, b| a.max(*b));
        rss_mib.insert(s.target.name.clone(), peak / 1048576.0);
    }
    // The steepest server's memory growth over the second half of the run:
    // what a soak must keep near zero.
    let server_rss_slope_mib_per_min = servers
        .iter()
        .filter_map(|s| {
            let end = s.points.last()?.t;
            s.slope_per_minute("process_resident_memory_bytes", end / 2.0)
        })
        .map(|bytes| bytes / 1048576.0)
        .reduce(f64::max);
    // What the state holds and what garbage collection took: every server
    // applies every entry, so the most any server saw is the cluster's.
    let mut state_objects = BTreeMap::new();
    let mut state_objects_peak = BTreeMap::new();
    for s in &servers {
        for name in s.names_of("stampede_state_objects") {
            let table = label(&name, "table").unwrap_or("?").to_string();
            let last = s.last(&name).max(0.0) as u64;
            let peak = s
                .points
                .iter()
                .filter_map(|p| p.values.get(&name))
                .fold(0.0f64, |a, b| a.max(*b)) as u64;
            let e = state_objects.entry(table.clone()).or_insert(0);
            *e = (*e).max(last);
            let e = state_objects_peak.entry(table).or_insert(0);
            *e = (*e).max(peak);
        }
    }
    let gc_collected = most_by_label(&servers, "stampede_gc_collected_total", "kind");
    // How much a server's memory grew after ten minutes: a soak's check.
    let server_rss_growth_after_10m = servers
        .iter()
        .filter_map(|s| {
            let end = s.points.last()?;
            if end.t < SOAK_SETTLE.as_secs_f64() {
                return None;
            }
            let at = s
                .points
                .iter()
                .find(|p| p.t >= SOAK_SETTLE.as_secs_f64())?
                .values
                .get("process_resident_memory_bytes")?;
            let last = end.values.get("process_resident_memory_bytes")?;
            (*at > 0.0).then(|| last / at - 1.0)
        })
        .reduce(f64::max);
    let cpu_seconds_per_1000_placements =
        summary::cpu_seconds_per_1000_placements(cpu_seconds, stream.allocations_placed);
    VariantSummary {
        name: v.name.clone(),
        tls: false,
        cpu_seconds_per_1000_placements,
        server_rss_slope_mib_per_min,
        server_rss_growth_after_10m,
        state_objects,
        state_objects_peak,
        gc_collected,
        server_args: v.server_args.clone(),
        nodesim_args: v.nodesim_args.clone(),
        raft_entries_by_type,
        raft_bytes_by_type,
        blocking_queries_by_source,
        deployment_query_wait_seconds,
        client_update_rpcs,
        client_update_share,
        client_update_byte_share,
        stream,
        cpu_cores,
        rss_mib,
        seconds,
        started_unix: 0.0,
        ended_unix: 0.0,
        problems,
        faults: Vec::new(),
        audit: None,
        series,
        acks_per_second: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: CapacityOpts,
    }

    fn budget(scenario: &str, args: &[&str]) -> Option<Duration> {
        let cli = Cli::parse_from(["capacity"].iter().chain(args));
        search_budget(&Scenario::load(scenario).unwrap(), &cli.opts)
    }

    #[test]
    fn a_search_runs_with_the_flag_or_the_scenarios_block_and_budget_comes_from_the_flag_first() {
        let min = |m: u64| Some(Duration::from_secs(60 * m));
        assert_eq!(budget("default", &[]), None);
        assert_eq!(budget("default", &["--find-max-rate"]), min(30));
        assert_eq!(
            budget("default", &["--find-max-rate", "--budget", "5m"]),
            min(5)
        );
        assert_eq!(budget("max-rate", &[]), min(30));
        assert_eq!(budget("max-rate", &["--budget", "12m"]), min(12));
    }
}
