//! Who may call what, tried as an outsider would: a real 3-server cluster
//! with mutual TLS and ACL tokens (what the harness starts by default), and
//! callers with each role's certificate, with none, with a certificate of
//! another CA, with and without tokens of each scope.

use std::path::Path;
use std::process::Command;

use stampede_launch::testing::{cluster_bin, node, service_job, Harness, CATCH_UP};
use stampede_launch::{http_client, make_tls_dir, LaunchOptions, LocalCluster};
use stampede_proto::acl::{Acl, Scope};
use stampede_proto::client::ClusterClient;
use stampede_proto::eval_service_client::EvalServiceClient;
use stampede_proto::plan_service_client::PlanServiceClient;
use stampede_proto::raft_service_client::RaftServiceClient;
use stampede_proto::security::{Role, Security, TlsArgs, TlsMaterial, TOKEN_FILE};
use stampede_proto::{
    Empty, EvalAckRequest, EvalDequeueRequest, EvalReapRequest, EvalUpdateRequest, Evaluation,
    ForwardRequest, JobListRequest, JobRegisterRequest, NodeRegisterRequest, Plan,
    PlanSubmitRequest, RaftPayload,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::Code;

fn material(dir: &Path, role: Role) -> TlsMaterial {
    TlsArgs::in_dir(dir, role).load().unwrap().unwrap()
}

fn management_token(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(TOKEN_FILE))
        .unwrap()
        .trim()
        .to_string()
}

/// A channel to `addr` over TLS checking the server against `ca`, presenting
/// `identity` if given.
async fn channel(addr: &str, ca: &[u8], identity: Option<&TlsMaterial>) -> Channel {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(stampede_proto::security::SERVER_NAME);
    if let Some(m) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(&m.cert, &m.key));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Every internal call, made with `ch`: each must be refused with `code`.
async fn internal_calls_refused(ch: Channel, code: Code) {
    let mut raft = RaftServiceClient::new(ch.clone());
    let forged = RaftPayload { data: vec![0; 64] };
    let mut answers = vec![
        (
            "AppendEntries",
            raft.append_entries(forged.clone()).await.map(|_| ()),
        ),
        (
            "AppendEntriesStream",
            raft.append_entries_stream(tokio_stream::iter([forged.clone()]))
                .await
                .map(|_| ()),
        ),
        ("Vote", raft.vote(forged.clone()).await.map(|_| ())),
        (
            "InstallSnapshot",
            raft.install_snapshot(forged).await.map(|_| ()),
        ),
        (
            "Forward",
            raft.forward(ForwardRequest {
                write: None,
                ticket: 0,
            })
            .await
            .map(|_| ()),
        ),
        (
            "ForwardStream",
            raft.forward_stream(tokio_stream::iter([ForwardRequest {
                write: None,
                ticket: 1,
            }]))
            .await
            .map(|_| ()),
        ),
    ];
    let mut evals = EvalServiceClient::new(ch.clone());
    answers.push((
        "Dequeue",
        evals
            .dequeue(EvalDequeueRequest::default())
            .await
            .map(|_| ()),
    ));
    answers.push((
        "Ack",
        evals.ack(EvalAckRequest::default()).await.map(|_| ()),
    ));
    answers.push((
        "Nack",
        evals.nack(EvalAckRequest::default()).await.map(|_| ()),
    ));
    answers.push((
        "Update",
        evals
            .update(EvalUpdateRequest {
                token: String::new(),
                evals: vec![Evaluation::default()],
            })
            .await
            .map(|_| ()),
    ));
    answers.push((
        "Reap",
        evals.reap(EvalReapRequest::default()).await.map(|_| ()),
    ));
    answers.push(("ForceGc", evals.force_gc(Empty {}).await.map(|_| ())));
    let mut plans = PlanServiceClient::new(ch);
    answers.push((
        "Submit",
        plans
            .submit(PlanSubmitRequest {
                plan: Some(Plan::default()),
            })
            .await
            .map(|_| ()),
    ));
    for (call, answer) in answers {
        let status = answer.expect_err(call);
        assert_eq!(status.code(), code, "{call}: {status:?}");
        assert!(
            status.message().contains(call),
            "{call}: {}",
            status.message()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn only_servers_reach_raft_and_the_internal_calls() {
    let (c, leader) = Harness::with_leader(3, &[]).await;
    let dir = c
        .tls_dir()
        .expect("the harness starts clusters with TLS")
        .to_path_buf();
    let ca = std::fs::read(dir.join("ca.pem")).unwrap();
    let client = c.client();
    client
        .register_job(service_job("before", 1, 100, 64))
        .await
        .unwrap();
    let term = c.status(leader).await.unwrap().term;
    let addr = c.server(leader).unwrap().rpc.to_string();

    // Operators and node clients are refused, by role.
    for role in [Role::Operator, Role::Client] {
        let ch = channel(&addr, &ca, Some(&material(&dir, role))).await;
        internal_calls_refused(ch, Code::PermissionDenied).await;
    }
    // No certificate at all: unauthenticated.
    internal_calls_refused(channel(&addr, &ca, None).await, Code::Unauthenticated).await;

    // A certificate from another CA fails the handshake.
    let other = tempfile::tempdir().unwrap();
    make_tls_dir(&cluster_bin(), other.path()).unwrap();
    let stranger = material(other.path(), Role::Server);
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca))
        .identity(tonic::transport::Identity::from_pem(
            &stranger.cert,
            &stranger.key,
        ))
        .domain_name(stampede_proto::security::SERVER_NAME);
    let connected = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await;
    if let Ok(ch) = connected {
        // TLS 1.3 reports a refused client certificate on the first read.
        let answer = RaftServiceClient::new(ch)
            .vote(RaftPayload { data: vec![] })
            .await
            .unwrap_err();
        assert_ne!(answer.code(), Code::Ok);
        assert!(!answer.message().contains("Vote"), "{answer:?}");
    }

    // The cluster is unchanged: same term, same leader, the one job.
    let after = c.status(leader).await.unwrap();
    assert_eq!((after.term, after.leader_id), (term, Some(leader)));
    let jobs = client
        .jobs()
        .list(JobListRequest { query: None })
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert_eq!(
        jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["before"]
    );

    // And it still takes writes from those allowed to make them.
    client
        .register_job(service_job("after", 1, 100, 64))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_public_api_needs_a_token_of_the_right_scope() {
    let (c, _) = Harness::with_leader(1, &[]).await;
    let dir = c.tls_dir().unwrap().to_path_buf();
    let acl = Acl::new(&management_token(&dir)).unwrap();
    let operator = |token: Option<String>| {
        let security = Security {
            tls: Some(material(&dir, Role::Operator)),
            token,
        };
        ClusterClient::new(&c.rpc_addrs(), &security)
            .unwrap()
            .with_retry_for(std::time::Duration::ZERO)
    };
    let register = |client: ClusterClient, id: &'static str| async move {
        client
            .jobs()
            .register(JobRegisterRequest {
                job: Some(service_job(id, 1, 100, 64)),
            })
            .await
    };

    let none = register(operator(None), "a").await.unwrap_err();
    assert_eq!(none.code(), Code::Unauthenticated, "{none:?}");
    assert!(none.message().contains("write scope"), "{}", none.message());

    let read = register(operator(Some(acl.derive(Scope::Read))), "b")
        .await
        .unwrap_err();
    assert_eq!(read.code(), Code::PermissionDenied, "{read:?}");
    assert!(
        read.message().contains("has the read scope"),
        "{}",
        read.message()
    );

    let forged = register(operator(Some("st1.write.00.00".into())), "c")
        .await
        .unwrap_err();
    assert_eq!(forged.code(), Code::Unauthenticated, "{forged:?}");

    // A read token reads; a write token and the management token write.
    operator(Some(acl.derive(Scope::Read)))
        .jobs()
        .list(JobListRequest { query: None })
        .await
        .unwrap();
    register(operator(Some(acl.derive(Scope::Write))), "d")
        .await
        .unwrap();
    register(operator(Some(management_token(&dir))), "e")
        .await
        .unwrap();

    // Node agent calls are not an operator's, whatever its token.
    let n = operator(Some(management_token(&dir)))
        .nodes()
        .register(NodeRegisterRequest {
            node: Some(node("n1")),
            secret_id: stampede_launch::testing::secret_of("n1"),
        })
        .await
        .unwrap_err();
    assert_eq!(n.code(), Code::PermissionDenied, "{n:?}");
    assert!(
        n.message().contains("role server or client"),
        "{}",
        n.message()
    );

    // HTTP: monitoring with any certificate; the admin calls need a server
    // certificate and the management token.
    let url = format!("https://{}", c.server(1).unwrap().http);
    let as_client = http_client(&c.security(Role::Client).unwrap(), CATCH_UP).unwrap();
    let metrics = as_client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap();
    assert!(metrics.status().is_success());
    let pause = as_client
        .post(format!("{url}/v1/workers/pause"))
        .send()
        .await
        .unwrap();
    assert_eq!(pause.status(), reqwest::StatusCode::FORBIDDEN);
    let body = pause.text().await.unwrap();
    assert!(body.contains("role server"), "{body}");
    let put_workers = |security: Security| {
        let url = url.clone();
        async move {
            http_client(&security, CATCH_UP)
                .unwrap()
                .put(format!("{url}/v1/workers?count=1"))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let operator = c.security(Role::Operator).unwrap();
    assert_eq!(put_workers(operator).await, reqwest::StatusCode::FORBIDDEN);
    let no_token = Security {
        tls: Some(material(&dir, Role::Server)),
        token: None,
    };
    assert_eq!(
        put_workers(no_token).await,
        reqwest::StatusCode::UNAUTHORIZED
    );
    let server = c.security(Role::Server).unwrap();
    assert!(put_workers(server).await.is_success());

    // A forced garbage collection: any certificate with the management token.
    let force_gc = |security: Security| {
        let url = url.clone();
        async move {
            http_client(&security, CATCH_UP)
                .unwrap()
                .put(format!("{url}/v1/system/gc"))
                .send()
                .await
                .unwrap()
        }
    };
    let read_only = Security {
        tls: Some(material(&dir, Role::Operator)),
        token: Some(
            Acl::new(&management_token(&dir))
                .unwrap()
                .derive(Scope::Read),
        ),
    };
    let refused = force_gc(read_only).await;
    assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
    let body = refused.text().await.unwrap();
    assert!(body.contains("management"), "{body}");
    let forced = force_gc(c.security(Role::Operator).unwrap()).await;
    assert!(forced.status().is_success(), "{:?}", forced.status());
}

#[test]
fn serve_needs_tls_or_insecure_and_says_so() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(cluster_bin())
        .args(["serve", "--id", "1", "--peers", "1=127.0.0.1:4647"])
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--tls-ca") && err.contains("--insecure"),
        "{err}"
    );
    assert!(!data.path().join("raft").exists(), "nothing was opened");
}

#[test]
fn tls_init_writes_every_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let init = |force: bool| {
        let mut cmd = Command::new(cluster_bin());
        cmd.args(["tls", "init"]).arg(dir.path());
        if force {
            cmd.arg("--force");
        }
        cmd.output().unwrap()
    };
    assert!(init(false).status.success());
    for f in [
        "ca.pem",
        "server.pem",
        "server.key",
        "client.pem",
        "client.key",
        "operator.pem",
        "operator.key",
        "token",
    ] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    let again = init(false);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let token = management_token(dir.path());
    assert!(init(true).status.success());
    assert_ne!(
        management_token(dir.path()),
        token,
        "--force makes new ones"
    );
}

/// One server with `--insecure`, leading.
async fn insecure_server() -> LocalCluster {
    let mut c = LocalCluster::start(LaunchOptions {
        bin: cluster_bin(),
        servers: 1,
        root: None,
        server_args: vec![],
        insecure: true,
        tls_dir: None,
    })
    .unwrap();
    c.wait_for_leader(CATCH_UP).await.unwrap();
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn an_insecure_cluster_takes_plain_calls() {
    let c = insecure_server().await;
    assert!(c.tls_dir().is_none());
    assert!(c.log(1).contains("--insecure"), "the server warns");
    let client = ClusterClient::new(&c.rpc_addrs(), &Security::insecure()).unwrap();
    client
        .register_job(service_job("plain", 1, 100, 64))
        .await
        .unwrap();
}

/// Against a plain-TCP cluster: the CLI refuses to send a token in clear
/// unless told `--insecure`, and a reader that closes its end early (`|
/// head`) ends it quietly, with no panic and no signal.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_keeps_a_token_off_plain_tcp_and_ends_quietly_on_a_closed_pipe() {
    let c = insecure_server().await;
    let addr = c.rpc_addrs().join(",");
    let run = |args: &[&str], token: bool| {
        let mut cmd = std::process::Command::new(cluster_bin());
        cmd.env_remove("STAMPEDE_TOKEN").args(args);
        if token {
            cmd.env("STAMPEDE_TOKEN", "a-secret");
        }
        cmd
    };
    let out = run(&["job", "status", "--address", &addr], true)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--token: is sent only over TLS"), "{err}");
    let told = ["job", "status", "--address", &addr, "--insecure"];
    let out = run(&told, true).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A listing to print into a pipe whose reader has gone before it prints.
    let client = ClusterClient::new(&c.rpc_addrs(), &Security::insecure()).unwrap();
    for i in 0..20 {
        let job = service_job(
            &format!("a-job-with-a-long-name-to-fill-the-pipe-{i}"),
            1,
            1,
            1,
        );
        client.register_job(job).await.unwrap();
    }
    let mut child = run(&["job", "status", "--address", &addr], false)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}
