//! `loadgen writes --etcd-endpoints`, the etcd half of
//! `scripts/compare-etcd.sh`: against a real 3-member etcd cluster started
//! here (skipped, saying so, where the `etcd` binary is not installed:
//! `scripts/setup-debian.sh --tests` installs Debian's etcd-server), and
//! refusing endpoints that are not etcd's.

use crate::common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use common::LOADGEN;
use prost::Message;
use stampede_launch::testing::eventually_ok;

/// A local etcd cluster: its members stopped, and their logs printed if
/// the test failed, on drop; their data in a temporary directory.
struct EtcdCluster {
    members: Vec<Child>,
    clients: Vec<String>,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `n` members on free 127.0.0.1 ports, or `None` when etcd is
    /// not installed.
    fn start(n: usize) -> Option<Self> {
        if Command::new("etcd").arg("--version").output().is_err() {
            eprintln!(
                "skipped: no etcd binary on PATH (scripts/setup-debian.sh --tests installs Debian's etcd-server)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = || {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (port(), port())).collect();
        let initial: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let mut cluster = EtcdCluster {
            members: Vec::new(),
            clients: Vec::new(),
            dir,
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(cluster.log(i)).unwrap();
            let child = Command::new("etcd")
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(cluster.dir.path().join(format!("m{i}")))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial.join(",")])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "loadgen-test"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("etcd starts");
            cluster.members.push(child);
            cluster.clients.push(client_url);
        }
        Some(cluster)
    }

    fn log(&self, i: usize) -> std::path::PathBuf {
        self.dir.path().join(format!("m{i}.log"))
    }

    /// Waits until every member answers and names the same leader.
    async fn wait_for_leader(&self) {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        eventually_ok(
            "every etcd member names the same leader",
            Duration::from_secs(60),
            || async {
                let mut leaders = Vec::new();
                for url in &self.clients {
                    let status = post(&http, url, "/v3/maintenance/status", "{}").await?;
                    match status["leader"].as_str() {
                        Some(l) if l != "0" => leaders.push(l.to_string()),
                        _ => return Err(format!("{url}: no leader yet: {status}")),
                    }
                }
                leaders.dedup();
                match leaders.len() {
                    1 => Ok(()),
                    _ => Err(format!("members disagree: {leaders:?}")),
                }
            },
        )
        .await;
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            let _ = m.kill();
            let _ = m.wait();
        }
        if std::thread::panicking() {
            for i in 0..self.members.len() {
                let log = std::fs::read_to_string(self.log(i)).unwrap_or_default();
                eprintln!("--- etcd member m{i} log ---\n{log}");
            }
        }
    }
}

/// A POST to etcd's JSON gateway, its answer as JSON.
async fn post(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    body: &str,
) -> Result<serde_json::Value, String> {
    let reply = http
        .post(format!("{base}{path}"))
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("{base}{path}: {e}"))?;
    let status = reply.status();
    let json: serde_json::Value = reply.json().await.map_err(|e| e.to_string())?;
    match status.is_success() {
        true => Ok(json),
        false => Err(format!("{base}{path}: HTTP {status}: {json}")),
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(s: &serde_json::Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s.as_str().unwrap())
        .unwrap()
}

fn loadgen_writes(args: &[&str]) -> std::process::Output {
    Command::new(LOADGEN)
        .arg("writes")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_three_member_etcd_are_counted_and_read_back() {
    let Some(etcd) = EtcdCluster::start(3) else {
        return;
    };
    etcd.wait_for_leader().await;
    let endpoints = etcd.clients.join(",");
    let (writers, ids) = (4u64, 10u64);
    let run = loadgen_writes(&[
        "--etcd-endpoints",
        &endpoints,
        "--writers",
        &writers.to_string(),
        "--ids-per-writer",
        &ids.to_string(),
        "--warmup",
        "500ms",
        "--duration",
        "2s",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["system"], "etcd", "{report}");
    assert_eq!(report["writers"], writers, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let writes = report["writes"].as_u64().unwrap();
    // Two seconds of four writers on a local cluster: hundreds at least.
    assert!(writes >= writers * ids, "{report}");
    let per_second = report["writes_per_second"].as_f64().unwrap();
    assert!((per_second - writes as f64 / 2.0).abs() < 1e-6, "{report}");
    for q in ["latency_p50_ms", "latency_p99_ms"] {
        assert!(report[q].as_f64().unwrap() > 0.0, "{q}: {report}");
    }

    // Every writer cycled through its ids: all of them are there, read back
    // from each member, each value the node stampede's writer registers.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let prefix = "/stampede-writes/";
    let range = serde_json::json!({
        "key": b64(prefix.as_bytes()),
        "range_end": b64(b"/stampede-writes0"),
    })
    .to_string();
    let mut expected: Vec<String> = (0..writers)
        .flat_map(|w| (0..ids).map(move |i| format!("{prefix}bench-{w}-{i}")))
        .collect();
    expected.sort();
    for member in &etcd.clients {
        let found = post(&http, member, "/v3/kv/range", &range).await.unwrap();
        let kvs = found["kvs"].as_array().unwrap();
        let mut keys: Vec<String> = kvs
            .iter()
            .map(|kv| String::from_utf8(unb64(&kv["key"])).unwrap())
            .collect();
        keys.sort();
        assert_eq!(keys, expected, "{member}");
        for kv in kvs {
            let key = String::from_utf8(unb64(&kv["key"])).unwrap();
            let node = stampede_proto::Node::decode(unb64(&kv["value"]).as_slice()).unwrap();
            assert_eq!(format!("{prefix}{}", node.id), key);
            assert!(
                kv["version"].as_str().unwrap().parse::<u64>().unwrap() >= 1,
                "{kv}"
            );
        }
    }
}

/// A port nothing listens on (it was free a moment ago).
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn endpoints_that_are_not_etcd_are_refused_naming_them() {
    let refused = |endpoints: &str| {
        let run = loadgen_writes(&["--etcd-endpoints", endpoints, "--duration", "1s"]);
        assert!(!run.status.success(), "{endpoints} was taken");
        assert!(run.stdout.is_empty(), "no report for {endpoints}");
        String::from_utf8_lossy(&run.stderr).into_owned()
    };
    // Not a URL: refused before anything is sent.
    let err = refused("127.0.0.1:2379");
    assert!(
        err.contains("--etcd-endpoints")
            && err.contains("\"127.0.0.1:2379\"")
            && err.contains("http://HOST:PORT"),
        "{err}"
    );
    let err = refused("http://127.0.0.1:2379/v3/kv");
    assert!(err.contains("no path"), "{err}");
    // Nothing listening on one of them: the check before the run names it.
    let dead = format!("http://127.0.0.1:{}", closed_port());
    let err = refused(&dead);
    assert!(
        err.contains(&format!("etcd at {dead} did not answer"))
            && err.contains("Connection refused"),
        "{err}"
    );
    // Something answers, but not as etcd does: any other HTTP server.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let not_etcd = format!("http://{}", listener.local_addr().unwrap());
    let answering = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf);
        let _ = conn.write_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found",
        );
    });
    let err = refused(&not_etcd);
    answering.join().unwrap();
    assert!(
        err.contains(&format!("etcd at {not_etcd} did not answer")) && err.contains("404"),
        "{err}"
    );
}
