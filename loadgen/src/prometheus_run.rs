//! A real Prometheus beside a capacity run, when one is installed: it scrapes
//! every process the run starts (and loadgen itself) into `RUN/prometheus/`,
//! so the Grafana dashboards in `dashboards/` can show the run, live or later.
//!
//! Targets change with every variant (new processes, new ports), so they are
//! given through file-based discovery: one JSON file per scrape job, each
//! group labelled with its variant, rewritten atomically between variants.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Serialize;
use stampede_proto::security::{TlsArgs, SERVER_NAME};

use crate::summary::PrometheusInfo;

/// The scrape jobs, as the dashboards' `job` variable names them.
pub const CLUSTER_JOB: &str = "stampede-cluster";
pub const NODESIM_JOB: &str = "stampede-nodesim";
pub const LOADGEN_JOB: &str = "stampede-loadgen";

/// Where a run's Prometheus keeps its things, relative to the run directory.
pub const CONFIG_FILE: &str = "prometheus.yml";
pub const DATA_DIR: &str = "prometheus";
const TARGETS_DIR: &str = "prometheus-targets";

/// A run's data is kept until the run directory is deleted: a run browsed
/// months later must not have been pruned by Prometheus's 15-day default.
pub const RETENTION: &str = "100y";

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("cannot write {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error("cannot start {0}: {1}")]
    Spawn(PathBuf, std::io::Error),
    #[error("prometheus did not become ready within 30 s (see {0})")]
    NotReady(PathBuf),
    #[error("prometheus exited at start (see {0})")]
    Exited(PathBuf),
}

/// A running Prometheus, stopped on drop.
pub struct PrometheusRun {
    child: Option<Child>,
    dir: PathBuf,
    info: PrometheusInfo,
    loadgen: String,
}

#[derive(Serialize)]
struct TargetGroup<'a> {
    targets: &'a [String],
    labels: std::collections::BTreeMap<&'static str, &'a str>,
}

/// The `prometheus` binary on PATH, if any.
pub fn installed() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
}

/// The scrape configuration: one job per kind of process, every `every`.
/// Servers with TLS are scraped presenting `tls` (target groups say
/// `__scheme__: https`); nodesim and loadgen serve plain HTTP.
pub fn config(every: Duration, tls: &TlsArgs) -> String {
    let secs = every.as_secs().max(1);
    let mut yml = format!(
        "# Written by loadgen capacity. Targets are in {TARGETS_DIR}/ (one file per job,\n\
         # rewritten for every variant); the data is in {DATA_DIR}/.\n\
         global:\n  scrape_interval: {secs}s\n  scrape_timeout: {secs}s\n  evaluation_interval: 15s\n\
         scrape_configs:\n"
    );
    for job in [CLUSTER_JOB, NODESIM_JOB, LOADGEN_JOB] {
        yml.push_str(&format!(
            "  - job_name: {job}\n    file_sd_configs:\n      - files: ['{TARGETS_DIR}/{job}.json']\n        refresh_interval: 1s\n"
        ));
        if let (CLUSTER_JOB, Some(ca), Some(cert), Some(key)) =
            (job, &tls.tls_ca, &tls.tls_cert, &tls.tls_key)
        {
            let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
            yml.push_str(&format!(
                "    tls_config:\n      ca_file: '{}'\n      cert_file: '{}'\n      key_file: '{}'\n      server_name: {SERVER_NAME}\n",
                abs(ca).display(),
                abs(cert).display(),
                abs(key).display()
            ));
        }
    }
    yml
}

impl PrometheusRun {
    /// Starts `bin` with its config and data in `dir`, scraping loadgen's
    /// own `/metrics` at `loadgen` (host:port), and waits until it is ready.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        every: Duration,
        loadgen: String,
        tls: &TlsArgs,
    ) -> Result<Self, PrometheusError> {
        let write = |path: PathBuf, body: String| {
            std::fs::write(&path, body).map_err(|e| PrometheusError::Write(path, e))
        };
        let targets = dir.join(TARGETS_DIR);
        std::fs::create_dir_all(&targets).map_err(|e| PrometheusError::Write(targets, e))?;
        write(dir.join(CONFIG_FILE), config(every, tls))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| PrometheusError::Spawn(bin.into(), e))?
            .port();
        let listen = format!("127.0.0.1:{port}");
        let log_path = dir.join("prometheus.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| PrometheusError::Write(log_path.clone(), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| PrometheusError::Write(log_path.clone(), e))?;
        let child = Command::new(bin)
            .current_dir(dir)
            .args(Self::args(&listen))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| PrometheusError::Spawn(bin.into(), e))?;
        let mut run = Self {
            child: Some(child),
            dir: dir.to_path_buf(),
            info: PrometheusInfo {
                url: format!("http://{listen}"),
                browse: format!(
                    "cd {} && prometheus {}",
                    dir.display(),
                    Self::args("127.0.0.1:9090").join(" ")
                ),
            },
            loadgen,
        };
        run.set_targets("", "http", &[], None)?;
        run.wait_ready(&log_path).await?;
        Ok(run)
    }

    fn args(listen: &str) -> Vec<String> {
        vec![
            format!("--config.file={CONFIG_FILE}"),
            format!("--storage.tsdb.path={DATA_DIR}"),
            format!("--storage.tsdb.retention.time={RETENTION}"),
            format!("--web.listen-address={listen}"),
        ]
    }

    async fn wait_ready(&mut self, log: &Path) -> Result<(), PrometheusError> {
        let ready = format!("{}/-/ready", self.info.url);
        for _ in 0..300 {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(PrometheusError::Exited(log.into()));
            }
            if let Ok(r) = reqwest::get(&ready).await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(PrometheusError::NotReady(log.into()))
    }

    pub fn info(&self) -> &PrometheusInfo {
        &self.info
    }

    /// Points the scrape jobs at one variant's processes (host:port of each
    /// `/metrics`); loadgen is always scraped, labelled with the variant.
    pub fn set_targets(
        &self,
        variant: &str,
        server_scheme: &str,
        servers: &[String],
        nodesim: Option<&[String]>,
    ) -> Result<(), PrometheusError> {
        let loadgen = [self.loadgen.clone()];
        let nodesim = nodesim.unwrap_or(&[]);
        for (job, targets, scheme) in [
            (CLUSTER_JOB, servers, server_scheme),
            (NODESIM_JOB, nodesim, "http"),
            (LOADGEN_JOB, &loadgen[..], "http"),
        ] {
            let groups: Vec<TargetGroup> = if targets.is_empty() {
                Vec::new()
            } else {
                vec![TargetGroup {
                    targets,
                    labels: [("variant", variant), ("__scheme__", scheme)].into(),
                }]
            };
            let path = self.dir.join(TARGETS_DIR).join(format!("{job}.json"));
            let body = serde_json::to_string_pretty(&groups).expect("target groups serialize");
            // Written aside and renamed, so Prometheus never reads half a file.
            let tmp = path.with_extension("json.tmp");
            std::fs::write(&tmp, body).map_err(|e| PrometheusError::Write(tmp.clone(), e))?;
            std::fs::rename(&tmp, &path).map_err(|e| PrometheusError::Write(path, e))?;
        }
        Ok(())
    }

    /// Lets Prometheus take one more scrape of the current targets, so the
    /// last moments of a variant are in its data.
    pub async fn settle(&self, every: Duration) {
        tokio::time::sleep(every.max(Duration::from_secs(1)) + Duration::from_millis(500)).await;
    }

    /// Empties the targets (a later `prometheus` on this directory scrapes
    /// nothing that is gone) and stops Prometheus, which flushes its data.
    pub fn stop(self) {
        let _ = self.set_targets("", "http", &[], None);
    }
}

impl Drop for PrometheusRun {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            stampede_launch::terminate(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_scrapes_each_job_from_its_own_targets_file() {
        let yml = config(Duration::from_secs(2), &TlsArgs::default());
        assert!(yml.contains("scrape_interval: 2s"));
        for job in [CLUSTER_JOB, NODESIM_JOB, LOADGEN_JOB] {
            assert!(yml.contains(&format!("job_name: {job}")));
            assert!(yml.contains(&format!("prometheus-targets/{job}.json")));
        }
        assert!(!yml.contains("tls_config"));
    }

    #[test]
    fn servers_are_scraped_with_the_operator_certificate() {
        let tls = TlsArgs::in_dir(
            Path::new("/run/tls"),
            stampede_proto::security::Role::Operator,
        );
        let yml = config(Duration::from_secs(1), &tls);
        assert_eq!(yml.matches("tls_config:").count(), 1, "{yml}");
        let cluster_job = yml.split("job_name: ").nth(1).unwrap();
        assert!(cluster_job.starts_with(CLUSTER_JOB));
        assert!(cluster_job.contains("cert_file: '/run/tls/operator.pem'"));
        assert!(cluster_job.contains("server_name: server.stampede"));
    }
}
