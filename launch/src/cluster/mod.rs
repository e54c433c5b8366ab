//! A local cluster of `cluster serve` processes: starting it, where each
//! server lives (ports, data dir, log), and (re)spawning a server. Its
//! faults and stops are in `faults.rs`, what its servers say over HTTP in
//! [`status`].

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use stampede_proto::security::{Role, Security, TlsArgs, TOKEN_FILE};

use crate::bins::serve_help;
use crate::credentials::{http_client, make_tls_dir, security_in};
use crate::error::LaunchError;
use crate::links::PeerLinks;
use crate::ports::free_ports;
use crate::process::colocated_threads;
pub use crate::server::{NodeId, ServerProc};

mod faults;
pub mod status;

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
    /// through a link of a fault proxy ([`PeerLinks`], running in this
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
        let ports = free_ports(opts.servers * 2).map_err(|e| LaunchError::Io(root.clone(), e))?;
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

    /// The server's log, for a failing test to show.
    pub fn log(&self, id: NodeId) -> String {
        self.server(id)
            .ok()
            .and_then(|s| std::fs::read_to_string(&s.log).ok())
            .unwrap_or_default()
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
