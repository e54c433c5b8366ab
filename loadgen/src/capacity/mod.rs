//! `loadgen capacity`: a capacity-planning run. For each variant of the
//! scenario it starts a local cluster of real `cluster` processes and a
//! `nodesim` fleet (or uses the ones given), runs the job stream, samples
//! every process's `/metrics`, and writes a run directory: `summary.json`,
//! `samples.json`, `traces.json` (the slowest jobs' critical paths), a
//! self-contained `report.html`, and each process's last
//! `/metrics` under `VARIANT/metrics/`. When Prometheus is installed it scrapes
//! the run too (`prometheus_run`), for the Grafana dashboards. A scenario with
//! `[[faults]]` has them injected during the stream (`faults`), and its run
//! ends with an audit of every acknowledged job on every server.
//!
//! This module only runs things and wires the pipeline together; the
//! figures are computed in `summary` and rendered by `report`. Its parts,
//! each importing only from those listed before it (and none from this
//! file, which only starts the run):
//!
//! - [`error`] and [`options`]: what can go wrong, and the flags with what
//!   they decide before anything runs.
//! - [`builds`]: which `cluster` and `nodesim` each variant runs (another
//!   build's directory, or a git revision built here).
//! - [`output`]: the run directory's files.
//! - [`ctx`]: what every variant shares, and the summary written after each.
//! - [`fleet`]: waiting for nodesim's nodes to be ready.
//! - [`drive`]: one run: stream, samples, faults, audit, summary.
//! - [`local`] (a cluster and fleet of loadgen's own) or [`remote`] (a
//!   given cluster): one variant's processes, driven.
//! - [`variants`] and [`search`]: a plain run, round by round (every
//!   variant once per round, in a random order; with `--until-conclusive`
//!   until the comparison is decided), or the max-rate search, probe by
//!   probe.

mod builds;
mod ctx;
mod drive;
mod error;
mod fleet;
mod local;
mod options;
mod output;
mod remote;
mod search;
mod variants;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use stampede_launch::sibling_bin;
use stampede_proto::security::{Role, TlsArgs, CA_KEY_FILE, TOKEN_FILE};

pub use error::CapacityError;
pub use options::CapacityOpts;

use crate::history;
use crate::metrics::LoadMetrics;
use crate::prometheus_run::{self, PrometheusRun};
use crate::report;
use crate::scenario::Scenario;
use crate::summary::RunSummary;
use ctx::Ctx;

/// `loadgen capacity` on a runtime of its own, until the run ends or
/// Ctrl-C or SIGTERM stops it. Stopped, the run is dropped where it
/// stands: the servers, nodesim and Prometheus it started stop with it
/// (their `Drop`s) rather than outlive it. Here rather than in the binary
/// so that the run's async code is compiled once, in this crate: an
/// optimised build compiles an async fn's body again in each crate that
/// polls it.
pub fn run_until_stopped(opts: CapacityOpts) -> anyhow::Result<RunSummary> {
    stampede_proto::block_on(async {
        tokio::select! {
            summary = run(opts) => summary,
            () = stampede_proto::shutdown_signal() => {
                anyhow::bail!("interrupted: the servers and fleet this run started are stopped; the report is not finished")
            }
        }
    })
}

/// Runs `loadgen capacity`: checks the options and the scenario, sets up
/// what every variant shares (the run directory, loadgen's own metrics,
/// TLS files, Prometheus), runs the variants or the search, and prints the
/// table. An audit that failed is an error; breaches and regressions are
/// in the summary for the caller to judge.
pub async fn run(mut opts: CapacityOpts) -> anyhow::Result<RunSummary> {
    opts.check_address()?;
    opts.read_inventory()?;
    if opts.sample_every < Duration::from_millis(100) {
        return Err(CapacityError::SampleEvery.into());
    }
    let mut scenario = checked_scenario(&opts)?;
    let baseline = match &opts.baseline {
        Some(path) => Some(output::load_baseline(path)?),
        None => None,
    };
    let out = opts.out_dir(&scenario);
    // Before anything runs: a history that cannot be written to stops the
    // run at once, not after it.
    let history = check_history(&opts).await?;
    std::fs::create_dir_all(&out).map_err(|e| CapacityError::Write(out.clone(), e))?;
    // Before anything starts: a variant's build that is missing or fails
    // to build stops the run at once.
    let binaries = builds::resolve(&mut scenario, &opts, &out)?;
    let metrics = LoadMetrics::new();
    metrics.set_slo(&scenario.slo);
    let own = metrics
        .serve(opts.serve_metrics)
        .await
        .map_err(|e| CapacityError::ServeMetrics(opts.serve_metrics, e))?;
    let tls_dir = out.join("tls");
    let _secrets = Secrets(tls_dir.clone());
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
        baseline,
        binaries,
        machine: history::this_machine(),
    };
    let summary = match options::search_budget(&scenario, &opts) {
        Some(budget) => search::find_max_rate(&scenario, budget, &out, &ctx).await?,
        None => variants::run_variants(&scenario, &out, &ctx).await?,
    };
    output::write(out.join("loadgen.prom"), metrics.render())?;
    if let Some(p) = prometheus {
        p.stop();
    }
    if let Some(at) = history {
        record(at, &summary, &out).await?;
    }
    crate::say(report::table(&summary));
    crate::say(format!("report: {}", out.join("report.html").display()));
    if let Some(p) = &summary.prometheus {
        crate::say(format!("prometheus data: {}", p.browse));
    }
    if !summary.audit_failures.is_empty() {
        anyhow::bail!("audit failed: {}", summary.audit_failures.join("; "));
    }
    Ok(summary)
}

/// The run's history, opened (and made or migrated) before the run so
/// that one that cannot be written to stops it at once; none with
/// `--no-history`. It is opened again to record: a database connection
/// held through a long run could be closed under it.
async fn check_history(opts: &CapacityOpts) -> anyhow::Result<Option<history::Location>> {
    if opts.no_history {
        return Ok(None);
    }
    let at = opts.history.location();
    let opened = at.clone();
    tokio::task::spawn_blocking(move || history::Store::open(&opened)).await??;
    Ok(Some(at))
}

/// Records the finished run in the history: every variant it can (one
/// without a start, which never ran, is named and left out).
async fn record(at: history::Location, summary: &RunSummary, out: &Path) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for variant in history::rows_by_variant(summary, &out.join("summary.json")) {
        match variant {
            Ok(r) => rows.extend(r),
            Err(e) => eprintln!("loadgen: not recorded in the history: {e}"),
        }
    }
    let label = at.label();
    let added =
        tokio::task::spawn_blocking(move || history::Store::open(&at)?.insert(&rows)).await??;
    crate::say(format!("history: {added} runs recorded in {label}"));
    Ok(())
}

/// The scenario as the options change it (duration, repeats, traces,
/// server arguments), once the options are known to fit it.
fn checked_scenario(opts: &CapacityOpts) -> Result<Scenario, CapacityError> {
    let mut scenario = Scenario::load(&opts.scenario)?;
    if let Some(d) = opts.duration {
        scenario = scenario.with_duration(d)?;
    }
    if let Some(n) = opts.repeat {
        scenario.repeat = n;
    }
    if let Some(k) = opts.trace_slowest {
        scenario.trace_slowest = k;
    }
    scenario
        .server_args
        .extend(opts.server_args.iter().cloned());
    if !scenario.faults.is_empty() && !opts.servers.is_empty() {
        return Err(CapacityError::FaultsNeedLocal(
            scenario.name.clone(),
            opts.address_source(),
        ));
    }
    if scenario.search.is_some() && !opts.servers.is_empty() {
        return Err(CapacityError::SearchNeedsLocal(
            scenario.name.clone(),
            opts.address_source(),
        ));
    }
    if opts.until_conclusive && options::search_budget(&scenario, opts).is_some() {
        return Err(CapacityError::SearchNotSequential(scenario.name.clone()));
    }
    for g in &opts.gates {
        crate::summary::measures::by_name(g)
            .ok_or_else(|| CapacityError::UnknownGate(g.clone()))?;
    }
    Ok(scenario)
}

/// Removes the CA's key and the management token from the run's TLS
/// directory when the run ends, however it ends: the run directory is made
/// to be shared, and with them anyone could mint certificates or call with
/// every scope. The certificates stay, and so do the keys of the run's own
/// identities (its `prometheus.yml` names the operator's), which only a
/// cluster of that CA, gone with the run, would take.
struct Secrets(PathBuf);

impl Drop for Secrets {
    fn drop(&mut self) {
        for name in [CA_KEY_FILE, TOKEN_FILE] {
            let _ = std::fs::remove_file(self.0.join(name));
        }
    }
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
