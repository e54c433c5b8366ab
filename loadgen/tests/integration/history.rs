//! `loadgen history` end to end on a real SQLite file: run directories
//! imported (twice: nothing added the second time), listed, shown and
//! checked; a planted slowdown named by its commit range and stage, the
//! same history without it flagging nothing; bad input refused naming the
//! file with nothing written; and the trend page opened in headless
//! Chromium. The same history on a real PostgreSQL is `postgres.rs`'s.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{browser, json, LOADGEN};
use serde_json::{json, Value};

/// 20 builds, one run each, a minute apart; with `planted`, placements/s
/// 20% lower and the broker stage 6 ms slower from the 13th (c12) on.
pub fn twenty_builds(root: &Path, planted: bool) -> Vec<PathBuf> {
    (0..20)
        .map(|i| {
            let wobble = [1.0, 1.012, 0.991, 1.004, 0.996][i % 5];
            let slow = planted && i >= 12;
            let rate = if slow { 80.0 } else { 100.0 } * wobble;
            let broker = if slow { 9.0 } else { 3.0 };
            run_dir(
                root,
                &format!("c{i:02}"),
                1_800_000_000.0 + 60.0 * i as f64,
                rate,
                broker,
            )
        })
        .collect()
}

/// A run directory of the default scenario built from `commit`, started at
/// `started`, whose one repetition placed `rate` per second.
fn run_dir(root: &Path, commit: &str, started: f64, rate: f64, broker_ms: f64) -> PathBuf {
    let build = json!({"commit": commit, "dirty": false, "version": "0.1.0"});
    let summary = json!({
        "schema_version": 1,
        "scenario": serde_json::to_value(loadgen::Scenario::load("default").unwrap()).unwrap(),
        "variants": [{
            "name": "default",
            "build": {"cluster": build, "nodesim": build, "loadgen": build},
            "validity": {"valid": true, "reasons": []},
            "started_unix": started,
            "repetitions": [{"round": 1, "placements_per_s": rate, "p99_time_to_running_ms": 900.0, "valid": true}],
            "stages": [
                {"stage": "broker", "process": "leader", "p50_ms": broker_ms, "p99_ms": 3.0 * broker_ms},
                {"stage": "runner", "process": "nodesim", "p50_ms": 50.0, "p99_ms": 80.0},
            ],
        }],
    });
    let dir = root.join(commit);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    dir
}

/// `loadgen history ARGS... --history AT`.
pub fn history(at: &str, args: &[&str], paths: &[PathBuf]) -> Output {
    Command::new(LOADGEN)
        .env_remove(common::HISTORY_ENV)
        .arg("history")
        .args(args)
        .args(paths)
        .args(["--history", at])
        .output()
        .unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Imports the planted history into `at`, then checks it: the slowdown is
/// named by its commits, size and stage, and fails the placements/s gate.
pub fn planted_history_is_found(root: &Path, at: &str) {
    let runs = twenty_builds(root, true);
    let first = history(at, &["import"], &runs);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stdout(&first).contains("imported 20 runs"),
        "{}",
        stdout(&first)
    );
    let again = history(at, &["import"], &runs);
    assert!(
        stdout(&again).contains("imported 0 runs") && stdout(&again).contains("20 already there")
    );

    let list = history(at, &["list"], &[]);
    assert!(list.status.success(), "{}", stderr(&list));
    assert_eq!(
        stdout(&list).matches("\n  ").count(),
        21,
        "a header and 20 builds: {}",
        stdout(&list)
    );

    let out = root.join("check");
    let out_s = out.to_str().unwrap();
    let check = history(
        at,
        &["check", "--gate", "placements_per_s", "--out", out_s],
        &[],
    );
    assert_eq!(
        check.status.code(),
        Some(1),
        "{}{}",
        stdout(&check),
        stderr(&check)
    );
    let changes = json(&out.join("changes.json"));
    let drop: Vec<&Value> = (changes.as_array().unwrap().iter())
        .filter(|c| c["measure"] == "placements_per_s")
        .collect();
    assert_eq!(drop.len(), 1, "{changes:#}");
    let c = drop[0];
    assert_eq!(
        (c["from_commit"].as_str(), c["to_commit"].as_str()),
        (Some("c11"), Some("c12"))
    );
    assert_eq!(
        (c["scenario"].as_str(), c["variant"].as_str()),
        (Some("default"), Some("default"))
    );
    assert_eq!(c["stage"], "broker");
    let ratio = c["ratio"].as_f64().unwrap();
    assert!((0.78..0.82).contains(&ratio), "{c}");
    let interval: Vec<f64> = (c["interval"].as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(
        interval[0] <= ratio && ratio <= interval[1] && interval[1] < 0.97,
        "{c}"
    );
    assert!(c["p_value"].as_f64().unwrap() <= 0.01);
    assert!(stdout(&check).contains("c11..c12"), "{}", stdout(&check));

    // Gated on a measure that did not move: exit 0, the change still written.
    let other = history(
        at,
        &["check", "--gate", "p99_time_to_running_ms", "--out", out_s],
        &[],
    );
    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    assert_eq!(json(&out.join("changes.json")), changes);

    let show = history(
        at,
        &["show", "placements_per_s", "--scenario", "default"],
        &[],
    );
    let text = stdout(&show);
    let (mark, c12) = (
        text.find("--- change: c11..c12").unwrap(),
        text.find(" c12 ").unwrap(),
    );
    assert!(mark < c12 && text.find(" c11 ").unwrap() < mark, "{text}");
}

#[test]
fn a_planted_slowdown_is_named_by_commit_range_size_and_stage() {
    let root = tempfile::tempdir().unwrap();
    let at = root.path().join("h.sqlite");
    planted_history_is_found(root.path(), at.to_str().unwrap());
}

#[test]
fn the_same_history_without_the_plant_flags_nothing() {
    let root = tempfile::tempdir().unwrap();
    let at = root.path().join("h.sqlite");
    let at = at.to_str().unwrap();
    let runs = twenty_builds(root.path(), false);
    assert!(history(at, &["import"], &runs).status.success());
    let mut args = vec!["check", "--out", root.path().to_str().unwrap()];
    for m in ["placements_per_s", "p99_time_to_running_ms"] {
        args.extend(["--gate", m]);
    }
    let check = history(at, &args, &[]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    assert_eq!(json(&root.path().join("changes.json")), json!([]));
}

/// The history file's bytes, to see that a refusal wrote nothing.
fn bytes(p: &Path) -> Option<Vec<u8>> {
    std::fs::read(p).ok()
}

#[test]
fn bad_input_is_refused_naming_the_file_and_nothing_is_written() {
    let root = tempfile::tempdir().unwrap();
    let at = root.path().join("h.sqlite");
    let at_s = at.to_str().unwrap();
    let good = twenty_builds(root.path(), false);

    // A run directory without a summary, among good ones: nothing made.
    let empty = root.path().join("empty-run");
    std::fs::create_dir_all(&empty).unwrap();
    let o = history(at_s, &["import"], &[good[0].clone(), empty.clone()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("{}: not a run directory", empty.display())),
        "{}",
        stderr(&o)
    );
    assert!(!at.exists(), "no history made");

    // A corrupt history: refused, untouched.
    std::fs::write(&at, b"this is not a database, just some bytes".repeat(200)).unwrap();
    let before = bytes(&at);
    let o = history(at_s, &["import"], &good[..1]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(at_s) && stderr(&o).contains("not a database"),
        "{}",
        stderr(&o)
    );
    assert_eq!(bytes(&at), before);
    let o = history(at_s, &["check"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // A history from a newer loadgen: refused, untouched.
    std::fs::remove_file(&at).unwrap();
    assert!(history(at_s, &["import"], &good[..2]).status.success());
    let c = rusqlite::Connection::open(&at).unwrap();
    c.execute("UPDATE history_schema SET version = 99", [])
        .unwrap();
    drop(c);
    let before = bytes(&at);
    let o = history(at_s, &["import"], &good);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(at_s) && stderr(&o).contains("newer loadgen (schema version 99"),
        "{}",
        stderr(&o)
    );
    assert_eq!(bytes(&at), before);

    // No history at all: reading one is an error, and makes none.
    let none = root.path().join("none.sqlite");
    let o = history(none.to_str().unwrap(), &["list"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no history here yet"), "{}", stderr(&o));
    assert!(!none.exists());

    // A measure that does not exist.
    let o = history(at_s, &["show", "placements", "--scenario", "default"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no measure \"placements\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_trend_page_draws_every_measure_with_the_change_marked() {
    let root = tempfile::tempdir().unwrap();
    let at = root.path().join("h.sqlite");
    let at = at.to_str().unwrap();
    assert!(history(at, &["import"], &twenty_builds(root.path(), true))
        .status
        .success());
    let out = root.path().join("page");
    let o = history(at, &["report", "--out", out.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = out.join("history.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<h1>Run history</h1>") && html.contains("<code>c12</code>"));
    let d = browser::drawn(&page, "");
    // placements/s and the p99 time to running are the measures recorded.
    assert_eq!(d.places, 2, "{d:?}");
    assert_eq!(d.charts, d.places, "{d:?}");
    assert_eq!(d.drawn, d.charts, "{d:?}");
    let start = html.find("id=\"chart-specs\">").unwrap() + "id=\"chart-specs\">".len();
    let specs: Value =
        serde_json::from_str(&html[start..start + html[start..].find("</script>").unwrap()])
            .unwrap();
    let rate = (specs.as_array().unwrap().iter())
        .find(|c| c["title"] == "placements/s")
        .unwrap();
    assert_eq!(
        rate["marks"][0]["x"], 12.5,
        "between build 12 (c11) and 13 (c12)"
    );
    assert!(rate["marks"][0]["label"].as_str().unwrap().contains("c12"));
}

/// A PostgreSQL server of the test's own, on a free port of loopback,
/// trusting its one user; stopped (and its files removed) on drop.
struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    _dir: tempfile::TempDir,
    url: String,
}

impl Postgres {
    /// Debian's server binaries (`postgresql`, installed by
    /// `scripts/setup-debian.sh --tests` when missing).
    fn bin_dir() -> PathBuf {
        let newest = || {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join("bin"))
                .filter(|b| b.join("initdb").is_file())
                .collect();
            dirs.sort();
            dirs.pop()
        };
        if let Some(b) = newest() {
            return b;
        }
        let setup = common::package_dir().join("../scripts/setup-debian.sh");
        let status = Command::new("bash").arg(&setup).arg("--tests").status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "{} could not install postgresql",
            setup.display()
        );
        newest().expect("postgresql's binaries after setup")
    }

    /// Runs a server binary as the user that owns the data: `postgres`
    /// when the test runs as root (the server refuses root).
    fn command(&self, tool: &str) -> Command {
        // SAFETY: geteuid has no preconditions.
        let mut cmd = match unsafe { libc::geteuid() } == 0 {
            true => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(self.bin.join(tool));
                c
            }
            false => Command::new(self.bin.join(tool)),
        };
        // A directory that user may enter (the test's own may be private).
        cmd.current_dir(self._dir.path());
        cmd
    }

    fn start() -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut pg = Postgres {
            bin: Self::bin_dir(),
            data: dir.path().join("data"),
            _dir: dir,
            url: format!("postgres://stampede@127.0.0.1:{port}/postgres"),
        };
        let root = pg._dir.path().to_path_buf();
        if unsafe { libc::geteuid() } == 0 {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&root)
                .status();
            assert!(chown.is_ok_and(|s| s.success()));
        }
        let init = pg
            .command("initdb")
            .args(["-U", "stampede", "--auth=trust", "-E", "UTF8", "-D"])
            .arg(&pg.data)
            .output()
            .unwrap();
        assert!(init.status.success(), "initdb: {}", stderr(&init));
        // -w: pg_ctl returns once the server accepts connections.
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            root.display()
        );
        let start = pg
            .command("pg_ctl")
            .args(["-w", "-D"])
            .arg(&pg.data)
            .args(["-l"])
            .arg(root.join("postgres.log"))
            .args(["-o", &opts, "start"])
            .output()
            .unwrap();
        if !start.status.success() {
            let log = std::fs::read_to_string(root.join("postgres.log")).unwrap_or_default();
            pg.data = PathBuf::new();
            panic!("pg_ctl start: {}\n{log}", stderr(&start));
        }
        pg
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if !self.data.as_os_str().is_empty() {
            let _ = self
                .command("pg_ctl")
                .args(["-m", "immediate", "-D"])
                .arg(&self.data)
                .arg("stop")
                .output();
        }
    }
}

#[test]
fn the_same_history_on_a_real_postgresql() {
    let pg = Postgres::start();
    let root = tempfile::tempdir().unwrap();
    planted_history_is_found(root.path(), &pg.url);
    // The page reads it too.
    let out = root.path().join("page");
    let o = history(&pg.url, &["report", "--out", out.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(out.join("history.html"))
        .unwrap()
        .contains("<code>c12</code>"));
}

/// A dashboard query as Grafana sends it for the planted history: the
/// time filter over all time, scenario `default`, All variants, one measure.
fn grafana_sql(sql: &str) -> String {
    let mut out = String::new();
    let mut rest = sql;
    while let Some(i) = rest.find("$__unixEpochFilter(") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "$__unixEpochFilter(".len()..];
        let end = after.find(')').unwrap();
        out.push_str(&format!("{} BETWEEN 0 AND 4102444800", &after[..end]));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out.replace("$scenario", "default")
        .replace("$variant", "'default'")
        .replace("$measure", "placements_per_s")
}

#[test]
fn every_history_dashboard_query_returns_data_from_a_real_postgresql() {
    let dashboard = json(&common::package_dir().join("../dashboards/history.json"));
    let provisioned = std::fs::read_to_string(
        common::package_dir().join("../dashboards/provisioning/datasources/stampede.yaml"),
    )
    .unwrap();
    assert!(
        provisioned.contains("uid: stampede-history")
            && provisioned.contains("type: grafana-postgresql-datasource")
    );
    let pg = Postgres::start();
    let root = tempfile::tempdir().unwrap();
    let o = history(&pg.url, &["import"], &twenty_builds(root.path(), true));
    assert!(o.status.success(), "{}", stderr(&o));
    let mut db = postgres::Client::connect(&pg.url, postgres::NoTls).unwrap();
    let mut queries: Vec<(String, String)> = Vec::new();
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            queries.push((
                format!("variable {}", v["name"]),
                v["query"].as_str().unwrap().into(),
            ));
        }
    }
    let panels = dashboard["panels"].as_array().unwrap();
    assert_eq!(panels.len(), 5);
    for p in panels {
        let title = p["title"].as_str().unwrap();
        assert!(
            p["description"].as_str().is_some_and(|d| d.len() > 20),
            "{title}: a description"
        );
        assert!(
            p["fieldConfig"]["defaults"]["unit"]
                .as_str()
                .is_some_and(|u| !u.is_empty()),
            "{title}: a unit"
        );
        assert_eq!(
            p["datasource"]["type"], "grafana-postgresql-datasource",
            "{title}"
        );
        for t in p["targets"].as_array().unwrap() {
            queries.push((
                format!("panel {title:?}"),
                t["rawSql"].as_str().unwrap().into(),
            ));
        }
    }
    for (what, sql) in queries {
        let sql = grafana_sql(&sql);
        assert!(!sql.contains('$'), "{what}: a variable left in {sql}");
        let rows = db
            .query(sql.as_str(), &[])
            .unwrap_or_else(|e| panic!("{what}: {e}\n{sql}"));
        assert!(!rows.is_empty(), "{what} returned nothing:\n{sql}");
    }
}

#[test]
fn two_imports_into_a_new_history_at_once_both_succeed() {
    let root = tempfile::tempdir().unwrap();
    let at = root.path().join("h.sqlite");
    let runs = twenty_builds(root.path(), false);
    let import = |paths: &[PathBuf]| {
        Command::new(LOADGEN)
            .env_remove(common::HISTORY_ENV)
            .args(["history", "import"])
            .args(paths)
            .arg("--history")
            .arg(&at)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (import(&runs[..10]), import(&runs[10..]));
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let list = history(at.to_str().unwrap(), &["list"], &[]);
    assert_eq!(
        stdout(&list).matches("\n  ").count(),
        21,
        "{}",
        stdout(&list)
    );
}

#[test]
fn a_capacity_run_with_a_history_it_cannot_write_stops_before_it_starts() {
    let root = tempfile::tempdir().unwrap();
    let at = root.path().join("h.sqlite");
    std::fs::write(&at, b"not a database".repeat(500)).unwrap();
    let out = root.path().join("run");
    let o = Command::new(LOADGEN)
        .env_remove(stampede_proto::address::ADDRESS_ENV)
        .env(common::HISTORY_ENV, &at)
        .args(["capacity", "--scenario", "default", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(at.to_str().unwrap()) && stderr(&o).contains("not a database"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "nothing ran");
}

#[test]
fn compare_records_both_runs_it_reads() {
    let root = tempfile::tempdir().unwrap();
    let at = root.path().join("h.sqlite");
    let runs = twenty_builds(root.path(), false);
    let o = Command::new(LOADGEN)
        .env_remove(common::HISTORY_ENV)
        .arg("compare")
        .args(&runs[..2])
        .arg("--history")
        .arg(&at)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let list = stdout(&history(at.to_str().unwrap(), &["list"], &[]));
    assert!(list.contains(" c00 ") && list.contains(" c01 "), "{list}");
    // --no-history: nothing recorded, nothing made.
    let none = root.path().join("none.sqlite");
    let o = Command::new(LOADGEN)
        .env(common::HISTORY_ENV, &none)
        .arg("compare")
        .args(&runs[2..4])
        .arg("--no-history")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!none.exists());
}
