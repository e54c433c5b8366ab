//! The probes of a caller out to exhaust a server, each rerun at a small
//! scale against real `cluster serve` processes with TLS: connections past
//! the per-address cap, connections that open and say nothing (or half a
//! request), messages of hundreds of MiB, raft's port without a server
//! certificate, SIGTERM with calls in flight, and a server whose raft has
//! stopped. Each time the server refuses with a clear answer and stays
//! healthy, or, for the last, says it is not.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stampede_launch::testing::{eventually, eventually_ok, node, Harness, CATCH_UP};
use stampede_proto::security::{Role, SERVER_NAME};
use stampede_proto::{
    AllocsGetRequest, Job, JobListRequest, JobRegisterRequest, NodeRegisterRequest, QueryOptions,
    TaskGroup,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tonic::Code;

/// How long a closed connection may take to show as closed to its client.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// A TCP connection to `addr` from the loopback address `from`
/// (127.0.0.2, ...: a client IP of its own, for the per-address cap).
async fn tcp_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A TLS client of the cluster's CA, with `role`'s certificate or none.
fn tls(c: &Harness, role: Option<Role>) -> TlsConnector {
    let dir = c.tls_dir().unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    for cert in rustls_pemfile::certs(&mut &ca[..]) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match role {
        None => builder.with_no_client_auth(),
        Some(role) => {
            let read = |ext: &str| std::fs::read(dir.join(format!("{}.{ext}", role.file_stem())));
            let certs = rustls_pemfile::certs(&mut &read("pem").unwrap()[..])
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = rustls_pemfile::private_key(&mut &read("key").unwrap()[..])
                .unwrap()
                .unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
    };
    TlsConnector::from(Arc::new(config))
}

/// Waits until the server closes `conn` (EOF or reset); how long it took.
async fn closed_within<S: AsyncRead + Unpin>(conn: &mut S, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((start + limit).into(), conn.read(&mut buf)).await {
            Err(_) => panic!("the connection was still open after {limit:?}"),
            Ok(Ok(0) | Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

/// Asserts `conn` stays open for `wait` (nothing read, no EOF).
async fn stays_open<S: AsyncRead + Unpin>(conn: &mut S, wait: Duration) {
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(wait, conn.read(&mut buf)).await;
    assert!(read.is_err(), "the connection ended: {read:?}");
}

async fn answers(c: &Harness) {
    let jobs = c.client_as(Role::Operator).jobs();
    jobs.clone()
        .list(JobListRequest::default())
        .await
        .expect("a fresh client is answered");
    let status = c.status(1).await.expect("/v1/status answers");
    assert_eq!(status.state, "Leader");
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_past_the_per_address_cap_are_closed_and_others_answered() {
    let (c, _) = Harness::with_leader(
        1,
        &["--max-conns-per-ip", "8", "--tls-handshake-timeout", "60s"],
    )
    .await;
    let rpc = c.server(1).unwrap().rpc;
    let http = c.server(1).unwrap().http;
    let open = |port: &'static str| {
        let c = &c;
        async move {
            let series = format!("stampede_connections_open{{listener=\"{port}\"}}");
            c.metric(1, &series).await.unwrap()
        }
    };
    let (rpc_before, http_before) = (open("rpc").await, open("http").await);
    // Eight silent connections from 127.0.0.2, over both ports, are held...
    let mut held = Vec::new();
    for i in 0..8 {
        held.push(tcp_from("127.0.0.2", if i % 2 == 0 { rpc } else { http }).await);
    }
    eventually("the server has taken all eight", CATCH_UP, || async {
        open("rpc").await >= rpc_before + 4.0 && open("http").await >= http_before + 4.0
    })
    .await;
    // ...the ninth is closed at once, on either port.
    for addr in [rpc, http] {
        let mut over = tcp_from("127.0.0.2", addr).await;
        let took = closed_within(&mut over, CLOSE_WAIT).await;
        assert!(took < Duration::from_secs(5), "closed after {took:?}");
    }
    stays_open(&mut held[0], Duration::from_millis(500)).await;
    let refused = c
        .metric(1, r#"stampede_connections_refused_total{reason="per_ip"}"#)
        .await
        .unwrap();
    assert!(refused >= 2.0, "refusals counted: {refused}");
    assert!(
        c.metric(1, "stampede_connections_open").await.is_ok(),
        "the gauge of open connections is served"
    );
    // Callers from any other address are answered all the while.
    answers(&c).await;
    // Closing one makes room again.
    held.truncate(7);
    eventually(
        "a closed connection's place is given back",
        CATCH_UP,
        || async {
            let mut again = tcp_from("127.0.0.2", rpc).await;
            let mut buf = [0u8; 1];
            tokio::time::timeout(Duration::from_millis(300), again.read(&mut buf))
                .await
                .is_err()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn silent_and_half_sent_connections_are_closed_after_the_header_timeout() {
    let (c, _) = Harness::with_leader(1, &["--header-timeout", "1s"]).await;
    let rpc = c.server(1).unwrap().rpc;
    let http = c.server(1).unwrap().http;
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();

    // HTTP: half a request's headers, with no client certificate.
    let mut half = tls(&c, None)
        .connect(name.clone(), TcpStream::connect(http).await.unwrap())
        .await
        .unwrap();
    half.write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow")
        .await
        .unwrap();
    // HTTP: an operator that opens a connection and never asks anything.
    let mut quiet_http = tls(&c, Some(Role::Operator))
        .connect(name.clone(), TcpStream::connect(http).await.unwrap())
        .await
        .unwrap();
    // gRPC: a caller with no certificate, and a raw TCP connection that
    // never starts its TLS handshake.
    let mut anonymous = tls(&c, None)
        .connect(name.clone(), TcpStream::connect(rpc).await.unwrap())
        .await
        .unwrap();
    anonymous
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let mut silent = TcpStream::connect(rpc).await.unwrap();

    for (what, took) in [
        ("half-sent HTTP", closed_within(&mut half, CLOSE_WAIT).await),
        (
            "idle HTTP",
            closed_within(&mut quiet_http, CLOSE_WAIT).await,
        ),
        // The server answers HTTP/2's preface with its settings first.
        (
            "gRPC, no certificate",
            closed_within(&mut anonymous, CLOSE_WAIT).await,
        ),
        ("silent TCP", closed_within(&mut silent, CLOSE_WAIT).await),
    ] {
        eprintln!("{what}: closed after {took:?}");
        assert!(
            took < Duration::from_secs(8),
            "{what}: closed after {took:?}"
        );
    }
    answers(&c).await;
}

/// RSS of server 1, from its `/metrics`.
async fn rss(c: &Harness) -> f64 {
    c.metric(1, "stampede_process_resident_memory_bytes")
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_message_is_refused_naming_the_limit_and_memory_stays_bounded() {
    let (c, _) = Harness::with_leader(1, &[]).await;
    let client = c.client_as(Role::Operator);
    let before = rss(&c).await;
    eprintln!(
        "decoded from 2 bytes when empty: a TaskGroup takes {} bytes, an Allocation {}",
        std::mem::size_of::<TaskGroup>(),
        std::mem::size_of::<stampede_proto::Allocation>()
    );

    // 120 MiB of allocation ids, to a read call.
    let ids = vec!["x".repeat(1024 * 1024); 120];
    let err = client
        .nodes()
        .get_allocs(AllocsGetRequest {
            alloc_ids: ids,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("--max-request-bytes") && err.message().contains("1048576"),
        "the limit is named: {}",
        err.message()
    );

    // 24 MiB, to Register (refused before a byte of it is decoded, so what
    // the bytes hold does not matter; the probe's were empty task groups).
    let job = Job {
        id: "j".repeat(24 << 20),
        task_groups: vec![TaskGroup::default()],
        ..Default::default()
    };
    let err = client
        .jobs()
        .register(JobRegisterRequest { job: Some(job) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");

    // The largest message allowed, all empty task groups (144 bytes each
    // decoded from 2 on the wire): refused by validation, and the memory
    // its decoding took is bounded by the limit.
    let groups = (1 << 20) / 2 - 16;
    let job = Job {
        id: "many".into(),
        task_groups: vec![TaskGroup::default(); groups],
        ..Default::default()
    };
    let err = client
        .jobs()
        .register(JobRegisterRequest { job: Some(job) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let after = rss(&c).await;
    let grew = (after - before) / (1024.0 * 1024.0);
    eprintln!(
        "RSS {:.0} MiB -> {:.0} MiB",
        before / 1048576.0,
        after / 1048576.0
    );
    assert!(grew < 256.0, "RSS grew by {grew:.0} MiB");
    answers(&c).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_raft_connection_without_a_server_certificate_never_reaches_raft() {
    let (c, _) = Harness::with_leader(1, &[]).await;
    let rpc = c.server(1).unwrap().rpc;
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    let raft_refused = r#"stampede_connections_refused_total{reason="raft_not_server"}"#;
    for role in [None, Some(Role::Operator), Some(Role::Client)] {
        let mut tcp = TcpStream::connect(rpc).await.unwrap();
        tcp.write_all(&[cluster::raft::RAFT_CONNECTION_MARKER])
            .await
            .unwrap();
        let mut conn = tls(&c, role).connect(name.clone(), tcp).await.unwrap();
        // HTTP/2's preface and a vote would follow; the server has hung up.
        let _ = conn.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
        let took = closed_within(&mut conn, CLOSE_WAIT).await;
        assert!(
            took < Duration::from_secs(2),
            "{role:?}: closed after {took:?}"
        );
    }
    let refused = c.metric(1, raft_refused).await.unwrap();
    assert_eq!(refused, 3.0, "each counted");
    answers(&c).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_a_server_with_calls_in_flight_within_five_seconds() {
    let (mut c, _) = Harness::with_leader(1, &[]).await;
    let jobs = c.client_as(Role::Operator).jobs();
    // A blocking query that would wait ten minutes, and a connection idle
    // in between calls.
    let waiting = tokio::spawn(async move {
        jobs.clone()
            .list(JobListRequest {
                query: Some(QueryOptions {
                    min_index: 1 << 40,
                    max_wait_ms: 600_000,
                    ..Default::default()
                }),
            })
            .await
    });
    let idle = TcpStream::connect(c.server(1).unwrap().rpc).await.unwrap();
    eventually("the blocking query is in flight", CATCH_UP, || async {
        c.metric(1, "stampede_connections_open{listener=\"rpc\"}")
            .await
            .unwrap_or(0.0)
            >= 2.0
    })
    .await;
    let start = Instant::now();
    c.stop(1).unwrap();
    let took = start.elapsed();
    eprintln!("SIGTERM to exit: {took:?}");
    assert!(took < Duration::from_secs(5), "stopped after {took:?}");
    let answer = tokio::time::timeout(CLOSE_WAIT, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        answer.is_err(),
        "the blocking query ended without an answer"
    );
    drop(idle);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_whose_raft_stopped_is_unhealthy() {
    // Snapshots every 20 entries; the snapshot directory then gives way
    // under the server (a real storage failure: the next snapshot cannot
    // be written, and openraft stops on it).
    let (c, _) = Harness::with_leader(1, &["--snapshot-entries", "20"]).await;
    let health = |leader: bool| {
        let mut cmd = std::process::Command::new(stampede_launch::testing::cluster_bin());
        cmd.args(["health", &format!("--http={}", c.server(1).unwrap().http)]);
        if leader {
            cmd.arg("--leader");
        }
        cmd.envs(c.client_env(Role::Operator).unwrap());
        cmd.output().unwrap()
    };
    assert!(health(true).status.success(), "healthy at first");
    let snapshots = c.server(1).unwrap().data_dir.join("snapshots");
    std::fs::remove_dir_all(&snapshots).unwrap();
    std::fs::write(&snapshots, "not a directory").unwrap();
    let client = c.client();
    for i in 0..40 {
        // Writes past the snapshot threshold; once raft stops they fail.
        let _ = client
            .nodes()
            .register(NodeRegisterRequest {
                node: Some(node(&format!("n{i}"))),
                secret_id: stampede_launch::testing::secret_of(&format!("n{i}")),
            })
            .await;
    }
    let report = eventually_ok("raft stops", CATCH_UP, || async {
        match c.status(1).await {
            Ok(s) => Err(format!("still {}", s.state)),
            Err(e) if e.to_string().contains("503") => Ok(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    assert!(report.contains("Shutdown"), "{report}");
    for leader in [false, true] {
        let out = health(leader);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "health --leader={leader} passed");
        assert!(stderr.contains("raft has stopped"), "{stderr}");
    }
}

#[test]
fn insecure_refuses_a_token_file_it_could_not_enforce_on_raft() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef").unwrap();
    let out = std::process::Command::new(stampede_launch::testing::cluster_bin())
        .args([
            "serve",
            "--insecure",
            "--id",
            "1",
            "--peers",
            "1=127.0.0.1:4647",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--acl-token-file")
        .arg(&token)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--insecure cannot take --acl-token-file"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "it stopped before opening anything"
    );
}

/// The probe that shut raft down, at a real low limit: a server started
/// under 1,024 descriptors (soft and hard, so it cannot raise them) gets
/// 4,000 connection attempts from 40 addresses, held open, while the other
/// servers restart (so their raft connections to it are new) and jobs are
/// written through them, which it applies, building its snapshots. Past the
/// reserve, connections are closed at accept, but its peers' raft
/// connections are let into it; raft's storage never fails; and once the
/// connections go, the server is healthy and holds every write.
#[tokio::test(flavor = "multi_thread")]
async fn under_1024_descriptors_4000_connections_never_fail_raft_storage() {
    const ATTEMPTS: usize = 4_000;
    // This test process holds them all: its own limit up to the hard one,
    // as the server raises its own.
    let own = cluster::api::limits::raise_nofile_limit().unwrap();
    assert!(
        own > ATTEMPTS as u64 + 1_000,
        "this test holds {ATTEMPTS} connections"
    );
    // Held connections stay until the test lets them go (no handshake
    // timeout closes them first); a snapshot every 20 entries.
    let args = [
        "--tls-handshake-timeout",
        "120s",
        "--snapshot-entries",
        "20",
    ];
    let (mut c, _) = Harness::with_leader(3, &args).await;
    c.kill(3).unwrap();
    c.spawn_with_nofile(3, 1_024).unwrap();
    let before = eventually_ok("server 3 is back", CATCH_UP, || async {
        match c.status(3).await {
            Ok(s) if s.leader_id.is_some() => Ok(s),
            Ok(s) => Err(format!("no leader yet: {s:?}")),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", c.pid(3).unwrap())).unwrap();
    let nofile = limits.lines().find(|l| l.starts_with("Max open files"));
    assert_eq!(
        nofile.map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["Max", "open", "files", "1024", "1024", "files"]),
        "server 3 runs under 1,024 descriptors"
    );

    let (rpc, http) = (c.server(3).unwrap().rpc, c.server(3).unwrap().http);
    let mut held = Vec::with_capacity(ATTEMPTS);
    for i in 0..ATTEMPTS {
        let from = format!("127.0.0.{}", 2 + i / 100);
        held.push(tcp_from(&from, if i % 2 == 0 { rpc } else { http }).await);
    }

    // The other two start again: their raft connections to server 3 are
    // new ones, made while it is at its limit.
    for id in [1, 2] {
        c.restart(id).unwrap();
    }
    c.leader().await;
    // Writes through them, while server 3 is at its limit.
    let others = c.client_of(&[1, 2]);
    let mut last = 0;
    for i in 0..200 {
        let job = stampede_launch::testing::service_job(&format!("held-{i}"), 1, 10, 16);
        last = stampede_launch::testing::register_job(&others, job)
            .await
            .index;
    }
    // Server 3 applies them all and snapshots past them, its ports still
    // full: this status comes over the connection it already had.
    eventually_ok(
        "server 3 applies and snapshots every write",
        CATCH_UP,
        || async {
            let s = c.status(3).await.map_err(|e| e.to_string())?;
            let snapshot = s.snapshot_index.unwrap_or(0);
            if s.applied_index >= last && snapshot > before.applied_index + 100 {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await;
    // The count is read once the held connections are let go: a new
    // connection (the HTTP client's pooled one may have been closed) would
    // itself be refused at the limit.
    drop(held);
    let refused = eventually_ok("server 3's metrics are read", CATCH_UP, || async {
        c.metric(
            3,
            r#"stampede_connections_refused_total{reason="descriptors"}"#,
        )
        .await
        .map_err(|e| e.to_string())
    })
    .await;
    assert!(
        refused >= 1_000.0,
        "connections past the reserve were closed at accept ({refused})"
    );

    let status = c.status(3).await.unwrap();
    assert!(
        matches!(status.state.as_str(), "Follower" | "Leader"),
        "{status:?}"
    );
    let log = std::fs::read_to_string(c.server(3).unwrap().log.clone()).unwrap();
    for bad in ["Too many open files", "StorageError", "panicked"] {
        assert!(!log.contains(bad), "server 3's log says {bad:?}");
    }
    eventually("a new caller is answered again", CATCH_UP, || async {
        c.client_of(&[3])
            .jobs()
            .list(JobListRequest::default())
            .await
            .is_ok_and(|r| r.into_inner().jobs.len() == 200)
    })
    .await;
}

/// `--max-jobs`: past it a new job is refused with `ResourceExhausted`
/// naming the flag, through the leader or a follower; an update of a job
/// already there is not a new one; purging one makes room.
#[tokio::test(flavor = "multi_thread")]
async fn jobs_past_the_quota_are_refused_naming_it_until_one_is_purged() {
    use stampede_launch::testing::{register_job, service_job};
    let (c, leader) = Harness::with_leader(3, &["--max-jobs", "3"]).await;
    let follower = c.ids_except(leader)[0];
    let (via_leader, via_follower) = (c.client_of(&[leader]), c.client_of(&[follower]));
    for i in 0..3 {
        register_job(&via_leader, service_job(&format!("j{i}"), 1, 10, 16)).await;
    }
    for client in [&via_leader, &via_follower] {
        let err = client
            .register_job(service_job("j3", 1, 10, 16))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(Code::ResourceExhausted), "{err}");
        let refused = err.to_string();
        assert!(
            refused.contains("3 jobs are registered") && refused.contains("--max-jobs"),
            "{refused}"
        );
    }
    // An update of a registered job is not one more.
    register_job(&via_follower, service_job("j1", 2, 10, 16)).await;
    via_leader
        .jobs()
        .deregister(stampede_proto::JobDeregisterRequest {
            job_id: "j0".into(),
            purge: true,
        })
        .await
        .unwrap();
    register_job(&via_follower, service_job("j3", 1, 10, 16)).await;
    let jobs = via_leader
        .jobs()
        .list(JobListRequest::default())
        .await
        .unwrap()
        .into_inner()
        .jobs;
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["j1", "j2", "j3"]);
}

/// The liveness echo on the `--rpc` port's UDP: a datagram that is not a
/// probe (longer, shorter, another magic) gets nothing back, a probe gets
/// its own 16 bytes and no more (the port amplifies nothing), and the
/// server answers its gRPC callers throughout.
#[tokio::test(flavor = "multi_thread")]
async fn the_liveness_echo_answers_only_probes_and_never_larger() {
    use stampede_proto::liveness::{MAGIC, PROBE_LEN};
    let (c, _) = Harness::with_leader(1, &[]).await;
    let rpc = c.server(1).unwrap().rpc;
    let caller = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    caller
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut probe = [0u8; PROBE_LEN];
    probe[..4].copy_from_slice(&MAGIC);
    let mut wrong = probe;
    wrong[0] ^= 0xff;
    for bad in [&[7u8; 1200][..], &probe[..PROBE_LEN - 1], &wrong[..]] {
        caller.send_to(bad, rpc).unwrap();
    }
    caller.send_to(&probe, rpc).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = caller.recv_from(&mut buf).expect("the probe is echoed");
    assert_eq!(
        (&buf[..n], from),
        (&probe[..], rpc),
        "its own bytes, from the port"
    );
    assert!(
        caller.recv_from(&mut buf).is_err(),
        "nothing for the datagrams that are not probes"
    );
    answers(&c).await;
}
