//! The Grafana dashboards in `dashboards/` against a real Prometheus: a short
//! capacity run (real cluster, nodesim and loadgen processes) is scraped by
//! the Prometheus it starts; then that Prometheus is started again on the
//! run's data, as a user browsing a finished run would, and every panel's
//! query, its variables substituted, must return data. Every process's
//! `/metrics`, as the run kept it, must pass `promtool check metrics`.
//!
//! Needs `prometheus` and `promtool` on PATH; when they are missing the test
//! installs them with `scripts/setup-debian.sh --tests` (Debian's package).

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common;

use common::{capacity, json, succeeded};
use serde_json::Value;
use stampede_launch::testing::eventually_ok;

/// Every kind of job, rolling updates (deployments) and an SLO, so that every
/// panel has something to show.
const SCENARIO: &str = r#"
name = "dashboards"
description = "a short stream that gives every dashboard panel data"
nodes = 30
duration = "15s"
drain = "60s"
arrival = { process = "constant", rate = 2.0 }
update_share = 0.3

[slo]
p99_placement_ms = 60000
p99_running_ms = 120000

[[jobs]]
name = "web"
type = "service"
count = 3
cpu_mhz = 100
max_parallel = 1
min_healthy_time_ms = 200

[[jobs]]
name = "batch"
type = "batch"
count = 2
cpu_mhz = 100

[[jobs]]
name = "agent"
type = "system"
weight = 1
cpu_mhz = 50
"#;

/// What `$__rate_interval` becomes: Grafana uses at least four scrape
/// intervals (1 s in a capacity run); a little more rides over a late scrape.
const RATE_INTERVAL: &str = "10s";

fn dashboards_dir() -> PathBuf {
    common::package_dir().join("../dashboards")
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
        .unwrap_or(false)
}

/// Every panel, rows' collapsed children included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        if p["type"] == "row" {
            out.extend(p["panels"].as_array().into_iter().flatten());
        } else {
            out.push(p);
        }
    }
    out
}

fn variable<'a>(dashboard: &'a Value, name: &str) -> Option<&'a Value> {
    dashboard["templating"]["list"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

/// The rules a dashboard keeps before it is sent anywhere.
fn lint(file: &str, d: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for name in ["datasource", "job", "instance", "variant"] {
        if variable(d, name).is_none() {
            problems.push(format!("{file}: no `{name}` variable"));
        }
    }
    let allowed: BTreeSet<&str> = ["$job", "$instance", "$variant", "$__rate_interval"].into();
    for p in panels(d) {
        let title = p["title"].as_str().unwrap_or("?");
        let here = format!("{file}: panel {title:?}");
        if p["description"]
            .as_str()
            .is_none_or(|s| s.trim().is_empty())
        {
            problems.push(format!("{here} has no description"));
        }
        if p["fieldConfig"]["defaults"]["unit"]
            .as_str()
            .is_none_or(|s| s.is_empty())
        {
            problems.push(format!("{here} has no unit"));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{here} has no query"));
        }
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or("");
            for m in [
                "job=~\"$job\"",
                "instance=~\"$instance\"",
                "variant=~\"$variant\"",
            ] {
                if !expr.contains(m) {
                    problems.push(format!("{here}: no {m} in {expr}"));
                }
            }
            for var in expr.split('$').skip(1).map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                format!("${}", &rest[..end])
            }) {
                if !allowed.contains(var.as_str()) {
                    problems.push(format!("{here}: unknown variable {var} in {expr}"));
                }
            }
            for f in ["rate(", "irate(", "increase("] {
                for (i, _) in expr.match_indices(f) {
                    // The range closing this call's selector.
                    let rest = &expr[i..];
                    let range = rest.find('[').map(|a| &rest[a..]).unwrap_or("");
                    if !range.starts_with("[$__rate_interval]") {
                        problems.push(format!("{here}: {f}..) without [$__rate_interval]: {expr}"));
                    }
                }
            }
        }
    }
    problems
}

/// A dashboard's query as Grafana would send it with the variables at their
/// defaults: the dashboard's job, all instances, all variants.
fn substitute(expr: &str, job: &str) -> String {
    expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$job", job)
        .replace("$instance", ".*")
        .replace("$variant", ".*")
}

/// Prometheus started again on a finished run's data; stopped on drop.
struct Prometheus {
    child: Child,
    url: String,
}

impl Prometheus {
    async fn browse(run: &Path) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let log = std::fs::File::create(run.join("prometheus-browse.log")).unwrap();
        let child = Command::new("prometheus")
            .current_dir(run)
            .args([
                "--config.file=prometheus.yml",
                "--storage.tsdb.path=prometheus",
                "--storage.tsdb.retention.time=100y",
            ])
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let p = Self { child, url };
        let ready = format!("{}/-/ready", p.url);
        eventually_ok(
            "prometheus on the run's data is ready",
            Duration::from_secs(60),
            || async {
                match reqwest::get(&ready).await {
                    Ok(r) if r.status().is_success() => Ok(()),
                    _ => Err(std::fs::read_to_string(run.join("prometheus-browse.log"))
                        .unwrap_or_default()),
                }
            },
        )
        .await;
        p
    }

    async fn get(&self, path: &str, params: &[(&str, String)]) -> Value {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .query(params)
            .send()
            .await
            .expect("prometheus answers");
        r.json().await.expect("prometheus answers JSON")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_returns_data_from_a_real_prometheus() {
    if !on_path("prometheus") || !on_path("promtool") {
        // Installs the Debian package `prometheus` (needs root or sudo).
        let setup = common::package_dir().join("../scripts/setup-debian.sh");
        let status = Command::new("bash").arg(&setup).arg("--tests").status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "prometheus is not installed and {} could not install it",
            setup.display()
        );
    }
    for bin in ["prometheus", "promtool"] {
        assert!(on_path(bin), "{bin} is still not on PATH after setup");
    }
    let mut dashboards = Vec::new();
    for entry in std::fs::read_dir(dashboards_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            dashboards.push((name, json(&path)));
        }
    }
    dashboards.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = dashboards.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "cluster.json",
            "control-plane.json",
            "fleet.json",
            "history.json",
            "load.json"
        ]
    );
    // The run history's dashboard reads PostgreSQL, not Prometheus: its
    // queries run against a real PostgreSQL in history.rs.
    dashboards.retain(|(name, _)| name != "history.json");
    let problems: Vec<String> = dashboards.iter().flat_map(|(f, d)| lint(f, d)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The local-run configuration the dashboards' README gives, beside the
    // TLS files `cluster dev --tls-dir dashboards/tls` makes (promtool
    // checks that they exist).
    let local = tempfile::tempdir().unwrap();
    std::fs::copy(
        dashboards_dir().join("prometheus.yml"),
        local.path().join("prometheus.yml"),
    )
    .unwrap();
    stampede_launch::make_tls_dir(
        &stampede_launch::testing::cluster_bin(),
        &local.path().join("tls"),
    )
    .unwrap();
    let check = Command::new("promtool")
        .args(["check", "config"])
        .arg(local.path().join("prometheus.yml"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "dashboards/prometheus.yml: {}",
        String::from_utf8_lossy(&check.stdout)
    );

    // A short capacity run, scraped by the Prometheus it starts.
    let (_dir, run, mut cmd) = capacity(SCENARIO, "dashboards");
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    succeeded(&out, &run);
    let check = Command::new("promtool")
        .args(["check", "config"])
        .arg(run.join("prometheus.yml"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "the run's prometheus.yml: {}",
        String::from_utf8_lossy(&check.stdout)
    );
    let summary = json(&run.join("summary.json"));
    assert!(
        summary["prometheus"]["url"].is_string(),
        "the run started no Prometheus: {stderr}"
    );
    let variant = &summary["variants"][0];
    let (start, end) = (
        variant["started_unix"].as_f64().unwrap(),
        variant["ended_unix"].as_f64().unwrap(),
    );
    assert!(end > start + 10.0, "{variant}");

    // Every process's /metrics as it served it, and loadgen's own.
    let mut exposed: Vec<PathBuf> = std::fs::read_dir(run.join("dashboards/metrics"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    exposed.push(run.join("loadgen.prom"));
    assert_eq!(
        exposed.len(),
        6,
        "three servers, nodesim, loadgen as scraped and as written at the end: {exposed:?}"
    );
    for path in &exposed {
        let text = std::fs::read(path).unwrap();
        assert!(text.len() > 1000, "{} is nearly empty", path.display());
        let mut check = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut check.stdin.take().unwrap(), &text).unwrap();
        let got = check.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&got.stdout),
            String::from_utf8_lossy(&got.stderr)
        );
        assert!(
            got.status.success() && said.trim().is_empty(),
            "promtool on {}: {said}",
            path.display()
        );
    }

    // The finished run, browsed: every panel's queries over the run's window.
    let prom = Prometheus::browse(&run).await;
    let window = |q: &str| {
        vec![
            ("query", q.to_string()),
            ("start", format!("{:.3}", start - 30.0)),
            ("end", format!("{:.3}", end + 10.0)),
            ("step", "2".to_string()),
        ]
    };
    let mut empty = Vec::new();
    let mut asked = 0;
    for (file, d) in &dashboards {
        let job = variable(d, "job").unwrap()["current"]["value"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: the job variable has no default"))
            .to_string();
        // The variables' own queries: the job, its instances and the variant.
        let jobs = prom
            .get("/api/v1/label/job/values", &[("match[]", "up".to_string())])
            .await;
        assert!(
            jobs["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|j| j == job.as_str()),
            "{file}: no job {job} in {jobs}"
        );
        for label in ["instance", "variant"] {
            let got = prom
                .get(
                    &format!("/api/v1/label/{label}/values"),
                    &[("match[]", format!("up{{job=~\"{job}\"}}"))],
                )
                .await;
            assert!(
                !got["data"].as_array().unwrap().is_empty(),
                "{file}: no {label} of {job}: {got}"
            );
        }
        for p in panels(d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = substitute(t["expr"].as_str().unwrap(), &job);
                asked += 1;
                let got = prom.get("/api/v1/query_range", &window(&expr)).await;
                let has_data = got["status"] == "success"
                    && got["data"]["result"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .flat_map(|s| s["values"].as_array().into_iter().flatten())
                        .any(|v| v[1].as_str().is_some_and(|x| x != "NaN"));
                if !has_data {
                    empty.push(format!("{file}: {:?}: {expr} -> {got}", p["title"]));
                }
            }
        }
    }
    assert!(asked >= 40, "only {asked} queries in the dashboards");
    assert!(
        empty.is_empty(),
        "{} of {asked} panel queries returned no data:\n{}",
        empty.len(),
        empty.join("\n")
    );
}
