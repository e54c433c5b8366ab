//! Starts a cluster of real `cluster serve` processes on this machine, on free
//! 127.0.0.1 ports with their own data dirs: for `cluster dev`, tests and
//! capacity runs. Processes still running when the `LocalCluster` is dropped
//! are killed.
//!
//! Faults to inject: `kill` (kill -9) and `spawn` again on the same data dir,
//! `pause`/`resume` (SIGSTOP/SIGCONT), and, for a cluster started with
//! [`LocalCluster::start_with_links`], `partition`/`heal`, which cut a
//! server's peer links (the proxy in [`links`]).
//!
//! With the cargo feature `testing`, the module `testing` is the harness the
//! workspace's integration tests share.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stampede_proto::acl::{Acl, Scope};
use stampede_proto::security::{Role, Security, TlsArgs, TOKEN_FILE};

pub mod delay;
pub mod links;
pub mod ports;
#[cfg(feature = "testing")]
pub mod testing;

use links::PeerLinks;

/// A server's raft id.
pub type NodeId = u64;

/// The answer of a server's `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub id: NodeId,
    /// `None` while no leader is known.
    pub leader_id: Option<NodeId>,
    /// `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub state: String,
    pub term: u64,
    pub last_log_index: u64,
    pub applied_index: u64,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// Voting members: id to raft address.
    pub members: BTreeMap<NodeId, String>,
}

/// How often a wait re-reads a server's status.
const POLL: Duration = Duration::from_millis(25);
/// How long a server gets to stop on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot prepare {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("cannot start {bin}: {source}")]
    Spawn {
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("no `{name}` binary beside {near:?}: build it first (cargo build -p {name})")]
    MissingBin { name: String, near: PathBuf },
    #[error("no server with id {0} in this cluster")]
    UnknownServer(NodeId),
    #[error("server {0} is not running")]
    NotRunning(NodeId),
    #[error("this cluster was started without peer links (LocalCluster::start_with_links), so it cannot be partitioned")]
    NoLinks,
    #[error(
        "{0} has no `serve --peer-via` option, which peer links (partitions) need: rebuild it"
    )]
    NoPeerVia(PathBuf),
    #[error("server {id} at {addr}: {detail}")]
    Http {
        id: NodeId,
        addr: SocketAddr,
        detail: String,
    },
    #[error("cannot create the cluster's TLS files in {dir}: {detail}")]
    Tls { dir: PathBuf, detail: String },
    #[error("timed out after {after:?} waiting until {what}{}", last.as_ref().map(|l| format!(" (last seen: {l})")).unwrap_or_default())]
    Timeout {
        what: String,
        after: Duration,
        last: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The `cluster` binary to run.
    pub bin: PathBuf,
    pub servers: usize,
    /// Where data dirs and logs go; a temporary dir (removed on drop) if `None`.
    pub root: Option<PathBuf>,
    /// Extra `cluster serve` flags for every server.
    pub server_args: Vec<String>,
    /// Serve without TLS or ACLs (`cluster serve --insecure`). Otherwise
    /// the launcher makes a CA, certificates and a management token for the
    /// cluster (`cluster tls init`) and gives every server them.
    pub insecure: bool,
    /// Where the TLS files are kept (made there if missing): several
    /// clusters of one capacity run share them. Default: `ROOT/tls`.
    pub tls_dir: Option<PathBuf>,
}

/// One server process and where it lives.
#[derive(Debug)]
pub struct ServerProc {
    pub id: NodeId,
    pub rpc: SocketAddr,
    pub http: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    /// Stopped with SIGSTOP and not yet continued.
    paused: bool,
    /// RLIMIT_NOFILE (soft and hard) for its next start, if not inherited.
    nofile: Option<u64>,
}

pub struct LocalCluster {
    bin: PathBuf,
    root: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    server_args: Vec<String>,
    servers: Vec<ServerProc>,
    http: reqwest::Client,
    /// The fault proxy every peer connection goes through, if started with it.
    links: Option<PeerLinks>,
    /// Where the cluster's CA, certificates and token are; `None` when insecure.
    tls_dir: Option<PathBuf>,
}

impl LocalCluster {
    /// Starts every server. It returns once the processes are spawned; use
    /// [`LocalCluster::wait_for_leader`] to know the cluster has formed.
    pub fn start(opts: LaunchOptions) -> Result<Self, LaunchError> {
        Self::launch(opts, false)
    }

    /// [`LocalCluster::start`], with every server reaching every other
    /// through a link of a fault proxy ([`links::PeerLinks`], running in this
    /// process), so that [`LocalCluster::partition`] can cut it off. Each
    /// server is told its links with `cluster serve --peer-via`.
    pub fn start_with_links(opts: LaunchOptions) -> Result<Self, LaunchError> {
        Self::launch(opts, true)
    }

    fn launch(opts: LaunchOptions, with_links: bool) -> Result<Self, LaunchError> {
        // What `serve` takes: a server built before `--peer-via` or
        // `--threads` does not take them.
        let serve_help = serve_help(&opts.bin)?;
        if with_links && !serve_help.contains("--peer-via") {
            return Err(LaunchError::NoPeerVia(opts.bin));
        }
        let (root, tmp) = match opts.root {
            Some(root) => (root, None),
            None => {
                let tmp = tempfile::Builder::new()
                    .prefix("stampede-cluster-")
                    .tempdir()
                    .map_err(|e| LaunchError::Io(std::env::temp_dir(), e))?;
                (tmp.path().to_path_buf(), Some(tmp))
            }
        };
        std::fs::create_dir_all(&root).map_err(|e| LaunchError::Io(root.clone(), e))?;
        let ports =
            ports::free_ports(opts.servers * 2).map_err(|e| LaunchError::Io(root.clone(), e))?;
        let servers = (0..opts.servers)
            .map(|i| {
                let id = i as NodeId + 1;
                ServerProc {
                    id,
                    rpc: ports[2 * i],
                    http: ports[2 * i + 1],
                    data_dir: root.join(format!("server-{id}")),
                    log: root.join(format!("server-{id}.log")),
                    child: None,
                    paused: false,
                    nofile: None,
                }
            })
            .collect::<Vec<ServerProc>>();
        let links = if with_links {
            let rpcs = servers.iter().map(|s| (s.id, s.rpc)).collect();
            Some(PeerLinks::start(&rpcs).map_err(|e| LaunchError::Io(root.clone(), e))?)
        } else {
            None
        };
        let mut server_args = opts.server_args;
        if !server_args.iter().any(|a| a == "--threads") && serve_help.contains("--threads") {
            let threads = colocated_threads(servers.len());
            server_args.extend(["--threads".to_string(), threads.to_string()]);
        }
        let tls_dir = if opts.insecure {
            server_args.push("--insecure".into());
            None
        } else {
            let dir = opts.tls_dir.unwrap_or_else(|| root.join("tls"));
            make_tls_dir(&opts.bin, &dir)?;
            server_args.extend(TlsArgs::in_dir(&dir, Role::Server).to_args());
            server_args.extend([
                "--acl-token-file".to_string(),
                dir.join(TOKEN_FILE).display().to_string(),
            ]);
            Some(dir)
        };
        // The launcher administers its cluster: a server certificate and the
        // management token pass every HTTP check, the worker admin calls too.
        let security = security_in(tls_dir.as_deref(), Role::Server)?;
        let mut cluster = Self {
            bin: opts.bin,
            root,
            _tmp: tmp,
            server_args,
            servers,
            http: http_client(&security, Duration::from_secs(5))?,
            links,
            tls_dir,
        };
        for id in cluster.ids() {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the cluster's CA, certificates and management token are
    /// (`ca.pem`, `operator.pem`, `token`, ...); `None` when insecure.
    pub fn tls_dir(&self) -> Option<&Path> {
        self.tls_dir.as_deref()
    }

    /// What a client of `role` presents to this cluster: that role's
    /// certificate, and the management token for an operator or a write
    /// token derived from it for a node client (nothing when insecure).
    pub fn security(&self, role: Role) -> Result<Security, LaunchError> {
        security_in(self.tls_dir.as_deref(), role)
    }

    /// The environment a client process (the CLI, nodesim, loadgen) needs to
    /// call this cluster as `role`: `STAMPEDE_TLS_*` and `STAMPEDE_TOKEN`;
    /// empty when insecure.
    pub fn client_env(&self, role: Role) -> Result<Vec<(&'static str, String)>, LaunchError> {
        let Some(dir) = &self.tls_dir else {
            return Ok(Vec::new());
        };
        let tls = TlsArgs::in_dir(dir, role);
        let path = |p: Option<PathBuf>| p.map(|p| p.display().to_string()).unwrap_or_default();
        let mut env = vec![
            ("STAMPEDE_TLS_CA", path(tls.tls_ca)),
            ("STAMPEDE_TLS_CERT", path(tls.tls_cert)),
            ("STAMPEDE_TLS_KEY", path(tls.tls_key)),
        ];
        if let Some(token) = self.security(role)?.token {
            env.push(("STAMPEDE_TOKEN", token));
        }
        Ok(env)
    }

    /// The HTTP client [`LocalCluster::request`] uses: a server certificate
    /// and the management token, when the cluster has TLS.
    pub fn http_client(&self) -> &reqwest::Client {
        &self.http
    }

    /// The URL of `path` on server `id`'s `--http` address.
    pub fn url(&self, id: NodeId, path: &str) -> Result<String, LaunchError> {
        Ok(format!(
            "{}://{}{path}",
            self.scheme(),
            self.server(id)?.http
        ))
    }

    /// `https` or `http`: how this cluster's addresses are dialled.
    pub fn scheme(&self) -> &'static str {
        if self.tls_dir.is_some() {
            "https"
        } else {
            "http"
        }
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.servers.iter().map(|s| s.id).collect()
    }

    pub fn servers(&self) -> &[ServerProc] {
        &self.servers
    }

    /// `--peers` as every server gets it.
    pub fn peers_arg(&self) -> String {
        let parts: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("{}={}", s.id, s.rpc))
            .collect();
        parts.join(",")
    }

    /// Every server's gRPC address, as clients dial it.
    pub fn rpc_addrs(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.rpc.to_string()).collect()
    }

    pub fn server(&self, id: NodeId) -> Result<&ServerProc, LaunchError> {
        self.servers
            .iter()
            .find(|s| s.id == id)
            .ok_or(LaunchError::UnknownServer(id))
    }

    fn server_mut(&mut self, id: NodeId) -> Result<&mut ServerProc, LaunchError> {
        self.servers
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or(LaunchError::UnknownServer(id))
    }

    /// Starts server `id` (again), appending to its log file.
    pub fn spawn(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.spawn_with(id, &[])
    }

    /// Starts server `id` (again) with `extra` flags after everyone's
    /// `server_args`, e.g. to make one server different from the rest.
    pub fn spawn_with(&mut self, id: NodeId, extra: &[&str]) -> Result<(), LaunchError> {
        let peers = self.peers_arg();
        let bin = self.bin.clone();
        let mut args = self.server_args.clone();
        if let Some(via) = self.links.as_ref().map(|l| l.via_arg(id)) {
            // A cluster of one has no peers to reach.
            if !via.is_empty() {
                args.extend(["--peer-via".to_string(), via]);
            }
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        let s = self.server_mut(id)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&s.log)
            .map_err(|e| LaunchError::Io(s.log.clone(), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| LaunchError::Io(s.log.clone(), e))?;
        let mut cmd = Command::new(&bin);
        if let Some(n) = s.nofile {
            let limit = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            // SAFETY: between fork and exec the closure only calls
            // setrlimit, which is async-signal-safe, on a local value.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd
            .arg("serve")
            .args(["--id", &id.to_string()])
            .args(["--rpc", &s.rpc.to_string()])
            .args(["--http", &s.http.to_string()])
            .arg("--data-dir")
            .arg(&s.data_dir)
            .args(["--peers", &peers])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|source| LaunchError::Spawn { bin, source })?;
        s.child = Some(child);
        s.paused = false;
        Ok(())
    }

    /// Starts server `id` (again) under a limit of `n` open file
    /// descriptors, soft and hard: a host whose limit is low, which the
    /// server cannot raise.
    pub fn spawn_with_nofile(&mut self, id: NodeId, n: u64) -> Result<(), LaunchError> {
        self.server_mut(id)?.nofile = Some(n);
        let spawned = self.spawn(id);
        if let Ok(s) = self.server_mut(id) {
            s.nofile = None;
        }
        spawned
    }

    /// Server `id`'s process id, while it runs.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.server(id).ok()?.child.as_ref().map(|c| c.id())
    }

    /// Whether server `id`'s process is alive.
    pub fn is_running(&mut self, id: NodeId) -> bool {
        match self.server_mut(id).ok().and_then(|s| s.child.as_mut()) {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// `kill -9`: the server gets no chance to flush anything.
    pub fn kill(&mut self, id: NodeId) -> Result<(), LaunchError> {
        let s = self.server_mut(id)?;
        s.paused = false;
        if let Some(mut child) = s.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        Ok(())
    }

    /// `kill -9`, then the server started again on its own data dir.
    pub fn restart(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.kill(id)?;
        self.spawn(id)
    }

    /// SIGSTOP: the process stays, frozen; its sockets stay open and its
    /// peers' messages queue up, as with a long GC pause or a hung VM.
    pub fn pause(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.signal(id, libc::SIGSTOP)?;
        self.server_mut(id)?.paused = true;
        Ok(())
    }

    /// SIGCONT: a paused server runs on.
    pub fn resume(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.signal(id, libc::SIGCONT)?;
        self.server_mut(id)?.paused = false;
        Ok(())
    }

    /// Whether server `id` is paused (SIGSTOP without SIGCONT yet).
    pub fn is_paused(&self, id: NodeId) -> bool {
        self.server(id).is_ok_and(|s| s.paused)
    }

    fn signal(&mut self, id: NodeId, sig: libc::c_int) -> Result<(), LaunchError> {
        if !self.is_running(id) {
            return Err(LaunchError::NotRunning(id));
        }
        let pid = self
            .server(id)?
            .child
            .as_ref()
            .ok_or(LaunchError::NotRunning(id))?
            .id();
        // SAFETY: kill(2) with a pid we spawned and have not reaped (it is running).
        unsafe { libc::kill(pid as i32, sig) };
        Ok(())
    }

    /// Cuts every peer link to and from server `id`: the others cannot
    /// reach it and it cannot reach them (raft and forwarded writes both
    /// ways), while clients still can. Needs [`LocalCluster::start_with_links`].
    pub fn partition(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.server(id)?;
        self.links.as_ref().ok_or(LaunchError::NoLinks)?.isolate(id);
        Ok(())
    }

    /// Heals every peer link to and from server `id`.
    pub fn heal(&mut self, id: NodeId) -> Result<(), LaunchError> {
        self.server(id)?;
        self.links.as_ref().ok_or(LaunchError::NoLinks)?.rejoin(id);
        Ok(())
    }

    /// Whether any peer link of server `id` is cut.
    pub fn is_partitioned(&self, id: NodeId) -> bool {
        self.links.as_ref().is_some_and(|l| l.is_isolated(id))
    }

    /// The fault proxy on the peer links, when started with it.
    pub fn links(&self) -> Option<&PeerLinks> {
        self.links.as_ref()
    }

    /// SIGTERM, then SIGKILL if the server has not stopped within the grace period.
    pub fn stop(&mut self, id: NodeId) -> Result<(), LaunchError> {
        let s = self.server_mut(id)?;
        s.paused = false;
        if let Some(child) = s.child.take() {
            terminate(child);
        }
        Ok(())
    }

    /// Stops every server, all at once.
    pub fn stop_all(&mut self) {
        let children: Vec<Child> = self
            .servers
            .iter_mut()
            .filter_map(|s| s.child.take())
            .collect();
        for child in &children {
            // SAFETY: kill(2) with a pid we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            // A paused server takes the SIGTERM once it runs again.
            unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        }
        for s in &mut self.servers {
            s.paused = false;
        }
        for child in children {
            terminate(child);
        }
    }

    /// The server's log, for a failing test to show.
    pub fn log(&self, id: NodeId) -> String {
        self.server(id)
            .ok()
            .and_then(|s| std::fs::read_to_string(&s.log).ok())
            .unwrap_or_default()
    }

    /// An HTTP call to server `id`'s `--http` address; a non-2xx answer is an error.
    pub async fn request(
        &self,
        id: NodeId,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::Response, LaunchError> {
        let addr = self.server(id)?.http;
        let http_err = |detail: String| LaunchError::Http { id, addr, detail };
        let resp = self
            .http
            .request(method.clone(), format!("{}://{addr}{path}", self.scheme()))
            .send()
            .await
            .map_err(|e| http_err(e.to_string()))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            return Err(http_err(format!(
                "{method} {path} answered {status}: {body}"
            )));
        }
        Ok(resp)
    }

    async fn get(&self, id: NodeId, path: &str) -> Result<reqwest::Response, LaunchError> {
        self.request(id, reqwest::Method::GET, path).await
    }

    pub async fn status(&self, id: NodeId) -> Result<StatusReport, LaunchError> {
        let addr = self.server(id)?.http;
        self.get(id, "/v1/status")
            .await?
            .json()
            .await
            .map_err(|e| LaunchError::Http {
                id,
                addr,
                detail: e.to_string(),
            })
    }

    /// The value of one series on `/metrics`, e.g. `stampede_raft_term` or
    /// `stampede_raft_entries_total{type="node_register"}`; 0 if absent.
    pub async fn metric(&self, id: NodeId, series: &str) -> Result<f64, LaunchError> {
        let addr = self.server(id)?.http;
        let text = self
            .get(id, "/metrics")
            .await?
            .text()
            .await
            .map_err(|e| LaunchError::Http {
                id,
                addr,
                detail: e.to_string(),
            })?;
        Ok(metric_value(&text, series).unwrap_or(0.0))
    }

    /// Waits until server `id`'s status satisfies `pred`.
    pub async fn wait_for_status(
        &self,
        id: NodeId,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&StatusReport) -> bool,
    ) -> Result<StatusReport, LaunchError> {
        let start = Instant::now();
        loop {
            let last = match self.status(id).await {
                Ok(s) if pred(&s) => return Ok(s),
                Ok(s) => format!("{s:?}"),
                Err(e) => e.to_string(),
            };
            if start.elapsed() > timeout {
                return Err(LaunchError::Timeout {
                    what: format!("server {id}: {what}"),
                    after: timeout,
                    last: Some(last),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every running server (paused ones aside) names the same
    /// leader, and that leader says it leads. Returns its id.
    pub async fn wait_for_leader(&mut self, timeout: Duration) -> Result<NodeId, LaunchError> {
        let start = Instant::now();
        let mut last = None;
        loop {
            let running: Vec<NodeId> = self
                .ids()
                .into_iter()
                .filter(|id| self.is_running(*id) && !self.is_paused(*id))
                .collect();
            let mut leaders = Vec::new();
            for id in &running {
                match self.status(*id).await {
                    Ok(s) => {
                        leaders.push((s.leader_id, s.state == "Leader" && s.leader_id == Some(*id)))
                    }
                    Err(e) => last = Some(e.to_string()),
                }
            }
            if leaders.len() == running.len() && !running.is_empty() {
                if let Some(leader) = leaders[0].0 {
                    let agreed = leaders.iter().all(|(l, _)| *l == Some(leader));
                    let confirmed = leaders.iter().any(|(_, is_leader)| *is_leader);
                    if agreed && confirmed && running.contains(&leader) {
                        return Ok(leader);
                    }
                }
                last = Some(format!(
                    "leaders seen: {:?}",
                    leaders.iter().map(|l| l.0).collect::<Vec<_>>()
                ));
            }
            if start.elapsed() > timeout {
                return Err(LaunchError::Timeout {
                    what: "the running servers agree on a leader".into(),
                    after: timeout,
                    last,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for s in &mut self.servers {
            if let Some(mut child) = s.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Stops a child process gracefully: SIGTERM, then SIGKILL if it is still
/// running after a grace period; reaps it either way. A stopped (paused)
/// process is continued, so that it can take the SIGTERM.
pub fn terminate(mut child: Child) {
    // SAFETY: kill(2) with a pid we spawned and have not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
        libc::kill(child.id() as i32, libc::SIGCONT);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Makes the cluster's CA, certificates and token with `bin tls init`,
/// unless a previous run left them in `dir`.
pub fn make_tls_dir(bin: &Path, dir: &Path) -> Result<(), LaunchError> {
    if dir.join(TOKEN_FILE).exists() {
        return Ok(());
    }
    let tls_err = |detail: String| LaunchError::Tls {
        dir: dir.to_path_buf(),
        detail,
    };
    let out = Command::new(bin)
        .args(["tls", "init"])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| tls_err(format!("cannot run {} tls init: {e}", bin.display())))?;
    if !out.status.success() {
        return Err(tls_err(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

/// The security of `role` from a directory written by `cluster tls init`.
pub fn security_in(dir: Option<&Path>, role: Role) -> Result<Security, LaunchError> {
    let Some(dir) = dir else {
        return Ok(Security::insecure());
    };
    let tls_err = |detail: String| LaunchError::Tls {
        dir: dir.to_path_buf(),
        detail,
    };
    let tls = TlsArgs::in_dir(dir, role)
        .load()
        .map_err(|e| tls_err(e.to_string()))?;
    let management = std::fs::read_to_string(dir.join(TOKEN_FILE))
        .map_err(|e| tls_err(format!("{TOKEN_FILE}: {e}")))?;
    let token = match role {
        Role::Client => Acl::new(&management)
            .map_err(|e| tls_err(e.to_string()))?
            .derive(Scope::Write),
        Role::Server | Role::Operator => management.trim().to_string(),
    };
    Ok(Security {
        tls,
        token: Some(token),
    })
}

/// An HTTP client of the servers' `--http` addresses, presenting
/// `security`, whose requests give up after `timeout`.
pub fn http_client(security: &Security, timeout: Duration) -> Result<reqwest::Client, LaunchError> {
    // A server closes a connection that sends no request for its
    // header-read timeout (10 s by default); a pooled connection kept
    // longer than that races the close and fails the next request.
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .pool_idle_timeout(Duration::from_secs(5));
    let tls_err = |detail: String| LaunchError::Tls {
        dir: PathBuf::new(),
        detail,
    };
    if let Some(tls) = &security.tls {
        let ca = reqwest::Certificate::from_pem(&tls.ca).map_err(|e| tls_err(e.to_string()))?;
        let identity = reqwest::Identity::from_pem(&[tls.cert.as_slice(), &tls.key].concat())
            .map_err(|e| tls_err(e.to_string()))?;
        builder = builder
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .identity(identity);
    }
    if let Some(bearer) = security.bearer() {
        let mut headers = reqwest::header::HeaderMap::new();
        let mut value = reqwest::header::HeaderValue::from_str(&bearer)
            .map_err(|e| tls_err(format!("the token: {e}")))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
        builder = builder.default_headers(headers);
    }
    builder.build().map_err(|e| tls_err(e.to_string()))
}

/// What `bin serve --help` prints: the flags that server takes.
fn serve_help(bin: &Path) -> Result<String, LaunchError> {
    let help = Command::new(bin)
        .args(["serve", "--help"])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LaunchError::Spawn {
            bin: bin.to_path_buf(),
            source,
        })?;
    Ok(String::from_utf8_lossy(&help.stdout).into_owned())
}

/// A binary of this workspace built beside the running executable: in the
/// same dir (a binary), or one up (a test or bench under `deps/`). A test or
/// bench runs from cargo's build directory (`.cargo/config.toml`), while the
/// binaries are copied into the target directory, so that is looked at next:
/// `$CARGO_TARGET_DIR`, else the workspace's `target/`, in the same profile.
pub fn sibling_bin(name: &str) -> Result<PathBuf, LaunchError> {
    let exe = std::env::current_exe().map_err(|e| LaunchError::Io(PathBuf::from(name), e))?;
    let beside = exe.ancestors().skip(1).take(2).map(|dir| dir.join(name));
    let in_target = target_profile_dir(&exe).map(|dir| dir.join(name));
    beside
        .chain(in_target)
        .find(|candidate| candidate.is_file())
        .ok_or(LaunchError::MissingBin {
            name: name.into(),
            near: exe,
        })
}

/// The target directory's folder for the profile `exe` was built in (the
/// name of the folder above `deps/`, e.g. `debug` or `release`).
fn target_profile_dir(exe: &Path) -> Option<PathBuf> {
    let profile = exe
        .ancestors()
        .skip(1)
        .find(|dir| dir.file_name().is_some_and(|n| n == "deps"))?
        .parent()?
        .file_name()?
        .to_owned();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    };
    Some(target.join(profile))
}

/// `n` distinct ports that were free a moment ago: all bound at once, then released.
/// Reads one series from Prometheus text: `name` or `name{labels}` exactly as printed.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// API threads (`cluster serve --threads`) for each of `servers` servers
/// sharing this machine: their share of its cores, at least one. Each
/// taking every core put more threads than cores on the machine, and their
/// wake-ups and handovers cost CPU for no work (BENCHMARKS.md, the write
/// path, thirteenth round).
pub fn colocated_threads(servers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / servers.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colocated_servers_share_the_cores_and_each_keeps_one() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(colocated_threads(1), cores);
        assert_eq!(colocated_threads(0), cores);
        assert_eq!(colocated_threads(cores * 2 + 1), 1);
        for servers in 1..=8 {
            let each = colocated_threads(servers);
            assert!(each >= 1);
            assert!(
                each * servers <= cores.max(servers),
                "{servers} servers: {each} each"
            );
        }
    }

    #[test]
    fn reads_a_series_by_its_exact_name() {
        let text =
            "# HELP x y\nstampede_raft_term 3\nstampede_raft_entries_total{type=\"blank\"} 2\n";
        assert_eq!(metric_value(text, "stampede_raft_term"), Some(3.0));
        assert_eq!(
            metric_value(text, "stampede_raft_entries_total{type=\"blank\"}"),
            Some(2.0)
        );
        assert_eq!(metric_value(text, "stampede_raft_entries_total"), None);
    }
}
