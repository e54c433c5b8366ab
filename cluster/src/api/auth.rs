//! Who may call what, checked before any handler runs: the role the
//! caller's certificate names ([`super::conn`]) and, for the public
//! API and the admin calls, the scope of its ACL token ([`Acl`]).
//!
//! | calls | roles | token scope |
//! | --- | --- | --- |
//! | raft, `Forward`, evaluation dequeue/ack/nack/update, plans | server | – |
//! | node agent calls (register, status, allocations, `CallStream`) | client, server | write (read for `GetClientAllocs`) |
//! | jobs, nodes, evaluations, deployments: reads | any | read |
//! | jobs: register, deregister | any | write |
//! | HTTP `/metrics`, `/v1/status` | any | – |
//! | HTTP `GET /v1/workers` | any | read |
//! | HTTP `PUT /v1/workers`, `POST /v1/workers/{pause,resume}` | server | management |
//!
//! Servers are members and need no token, except for the worker admin calls,
//! which need both: they stop a cluster's scheduling. Without TLS (`--insecure`) roles
//! cannot be known and are not checked; without `--acl-token-file` tokens
//! are not.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request as HttpRequest;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response as HttpResponse};
use stampede_proto::acl::{Acl, Scope};
use stampede_proto::security::Role;
use tonic::codegen::http;
use tonic::Status;

use super::conn::PeerInfo;

/// What a call needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A server certificate.
    Members,
    /// A client (node) or server certificate, and a token of this scope.
    Agents(Scope),
    /// Any certificate of the cluster, and a token of this scope.
    Anyone(Scope),
    /// Any certificate of the cluster; no token (monitoring).
    Monitor,
    /// A server certificate and the management token (the worker admin calls).
    Admin,
}

impl Need {
    fn roles(self) -> &'static [Role] {
        match self {
            Need::Members => &[Role::Server],
            Need::Agents(_) => &[Role::Server, Role::Client],
            Need::Anyone(_) | Need::Monitor => &Role::ALL,
            Need::Admin => &[Role::Server],
        }
    }

    fn scope(self) -> Option<Scope> {
        match self {
            Need::Members | Need::Monitor => None,
            Need::Agents(s) | Need::Anyone(s) => Some(s),
            Need::Admin => Some(Scope::Management),
        }
    }
}

/// What a gRPC call, by its path `/package.Service/Method`, needs.
pub fn grpc_need(path: &str) -> Need {
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or(("", ""));
    let service = service.strip_prefix("stampede.v1.").unwrap_or("");
    match (service, method) {
        ("JobService", "Register" | "Deregister") => Need::Anyone(Scope::Write),
        ("JobService", "Get" | "List" | "Allocations" | "Evaluations" | "Summary" | "Trace") => {
            Need::Anyone(Scope::Read)
        }
        ("NodeService", "Register" | "UpdateStatus" | "UpdateAlloc" | "CallStream") => {
            Need::Agents(Scope::Write)
        }
        ("NodeService", "GetClientAllocs") => Need::Agents(Scope::Read),
        ("NodeService", "Get" | "List" | "GetAllocs") => Need::Anyone(Scope::Read),
        ("EvalService", "Get") => Need::Anyone(Scope::Read),
        ("DeploymentService", "Get" | "ForJob") => Need::Anyone(Scope::Read),
        // Raft, forwarded writes, the broker and plans; and anything not
        // listed above: only members.
        _ => Need::Members,
    }
}

/// What an HTTP route needs.
pub fn http_need(method: &axum::http::Method, path: &str) -> Need {
    match (method.as_str(), path) {
        ("GET", "/metrics" | "/v1/status") => Need::Monitor,
        ("GET", "/v1/workers") => Need::Anyone(Scope::Read),
        ("PUT", "/v1/system/gc") => Need::Anyone(Scope::Management),
        _ => Need::Admin,
    }
}

/// Why a call was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Denied {
    #[error("{call} needs a client certificate signed by the cluster CA; none was presented")]
    NoCertificate { call: String },
    #[error("{call} needs a certificate of role {need}; the caller's is {have}")]
    Role {
        call: String,
        need: String,
        have: String,
    },
    #[error("{call} needs an ACL token with the {need} scope (--token or STAMPEDE_TOKEN); none was given")]
    NoToken { call: String, need: Scope },
    #[error("{call}: the ACL token is not one this cluster issued")]
    BadToken { call: String },
    #[error(
        "{call} needs an ACL token with the {need} scope; the token given has the {have} scope"
    )]
    Scope {
        call: String,
        need: Scope,
        have: Scope,
    },
}

impl Denied {
    /// `Unauthenticated` when the caller did not say who it is, else
    /// `PermissionDenied`.
    pub fn status(&self) -> Status {
        match self {
            Denied::NoCertificate { .. } | Denied::NoToken { .. } | Denied::BadToken { .. } => {
                Status::unauthenticated(self.to_string())
            }
            Denied::Role { .. } | Denied::Scope { .. } => {
                Status::permission_denied(self.to_string())
            }
        }
    }

    fn http_status(&self) -> axum::http::StatusCode {
        match self.status().code() {
            tonic::Code::Unauthenticated => axum::http::StatusCode::UNAUTHORIZED,
            _ => axum::http::StatusCode::FORBIDDEN,
        }
    }
}

/// The server's checks: whether it has TLS (so roles are known) and its ACL.
#[derive(Debug, Clone)]
pub struct Guard {
    tls: bool,
    acl: Option<Arc<Acl>>,
}

impl Guard {
    pub fn new(tls: bool, acl: Option<Acl>) -> Self {
        Self {
            tls,
            acl: acl.map(Arc::new),
        }
    }

    /// Lets the call through, or says what it lacks. `authorization` is the
    /// header's value (`Bearer TOKEN`).
    pub fn check(
        &self,
        call: &str,
        need: Need,
        peer: Option<&PeerInfo>,
        authorization: Option<&str>,
    ) -> Result<(), Denied> {
        let call = || short(call);
        let role = peer.and_then(|p| p.role);
        if self.tls {
            let Some(role) = role else {
                return Err(Denied::NoCertificate { call: call() });
            };
            if !need.roles().contains(&role) {
                let need = need
                    .roles()
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(" or ");
                return Err(Denied::Role {
                    call: call(),
                    need,
                    have: role.to_string(),
                });
            }
        }
        let admin = need == Need::Admin;
        let (Some(acl), Some(need)) = (&self.acl, need.scope()) else {
            return Ok(());
        };
        // Members need no token: a server certificate proves membership.
        if role == Some(Role::Server) && !admin {
            return Ok(());
        }
        let token = authorization
            .map(|h| h.strip_prefix("Bearer ").unwrap_or(h).trim())
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            return Err(Denied::NoToken { call: call(), need });
        };
        match acl.scope_of(token) {
            None => Err(Denied::BadToken { call: call() }),
            Some(have) if have < need => Err(Denied::Scope {
                call: call(),
                need,
                have,
            }),
            Some(_) => Ok(()),
        }
    }
}

/// A path is the caller's: quote a short prefix only.
fn short(call: &str) -> String {
    match call.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &call[..i]),
        None => call.to_string(),
    }
}

/// The gRPC side: a tower layer around every service of a server.
#[derive(Clone)]
pub struct GrpcAuthLayer(pub Guard);

impl<S> tower::Layer<S> for GrpcAuthLayer {
    type Service = GrpcAuth<S>;
    fn layer(&self, inner: S) -> GrpcAuth<S> {
        GrpcAuth {
            guard: self.0.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct GrpcAuth<S> {
    guard: Guard,
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for GrpcAuth<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::BoxBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req.uri().path();
        let peer = req.extensions().get::<PeerInfo>();
        // The call is in flight on its connection until its answer's body
        // ends (a stream's, too): the connection is not idle meanwhile.
        let in_flight = peer.map(|p| p.activity.begin());
        let checked = self.guard.check(
            path,
            grpc_need(path),
            peer,
            req.headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        );
        match checked {
            Ok(()) => {
                let answer = self.inner.call(req);
                Box::pin(async move {
                    answer
                        .await
                        .map(callers_errors)
                        .map(|r| r.map(|body| super::limits::held_while(body, in_flight)))
                })
            }
            Err(denied) => {
                let response = denied.status().into_http();
                Box::pin(async move { Ok(response) })
            }
        }
    }
}

/// What tonic says, with `Internal`, of a request body that is not gRPC
/// framing at all (random bytes, no message, a cut-off frame, a bad
/// compression flag): the caller's mistake, so `InvalidArgument`.
const FRAMING_ERRORS: [&str; 4] = [
    "Missing request message",
    "protocol error:",
    "Unexpected EOF decoding stream",
    "Error decompressing",
];

/// What tonic says, with `OutOfRange`, of a message over the service's
/// decoding limit (before it reads the message).
const TOO_LARGE: &str = "Error, decoded message length too large";

/// Framing errors become `InvalidArgument`, and a message over the limit
/// `ResourceExhausted` naming the limit and its flag.
fn callers_errors(
    response: http::Response<tonic::body::BoxBody>,
) -> http::Response<tonic::body::BoxBody> {
    match Status::from_header_map(response.headers()) {
        Some(s)
            if s.code() == tonic::Code::Internal
                && FRAMING_ERRORS.iter().any(|p| s.message().starts_with(p)) =>
        {
            Status::invalid_argument(format!(
                "request body: not one gRPC message ({})",
                s.message()
            ))
            .into_http()
        }
        Some(s) if s.code() == tonic::Code::OutOfRange && s.message().starts_with(TOO_LARGE) => {
            Status::resource_exhausted(format!(
                "request message too large for this service (--max-request-bytes for the public and node services): {}",
                s.message().trim_start_matches("Error, ")
            ))
            .into_http()
        }
        _ => response,
    }
}

/// The HTTP side: an axum middleware (the connection's `PeerInfo` is in
/// the request's extensions).
pub async fn http_auth(
    axum::extract::State(guard): axum::extract::State<Guard>,
    req: HttpRequest,
    next: Next,
) -> HttpResponse {
    let checked = guard.check(
        &format!("{} {}", req.method(), req.uri().path()),
        http_need(req.method(), req.uri().path()),
        req.extensions().get::<PeerInfo>(),
        req.headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    match checked {
        Ok(()) => next.run(req).await,
        Err(denied) => (denied.http_status(), denied.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(role: Option<Role>) -> PeerInfo {
        PeerInfo::new(None, role)
    }

    #[test]
    fn internal_calls_take_server_certificates_only() {
        let acl = Acl::new("0123456789abcdef0123").unwrap();
        let mgmt = "Bearer 0123456789abcdef0123";
        let g = Guard::new(true, Some(acl));
        for path in [
            "/stampede.v1.RaftService/Vote",
            "/stampede.v1.RaftService/PreVote",
            "/stampede.v1.RaftService/Forward",
            "/stampede.v1.RaftService/ForwardStream",
            "/stampede.v1.EvalService/Dequeue",
            "/stampede.v1.EvalService/Ack",
            "/stampede.v1.EvalService/Nack",
            "/stampede.v1.EvalService/Update",
            "/stampede.v1.EvalService/Reap",
            "/stampede.v1.EvalService/ForceGc",
            "/stampede.v1.PlanService/Submit",
            "/stampede.v1.NoSuchService/X",
        ] {
            let need = grpc_need(path);
            assert_eq!(need, Need::Members, "{path}");
            assert!(g
                .check(path, need, Some(&peer(Some(Role::Server))), None)
                .is_ok());
            for role in [Role::Client, Role::Operator] {
                let e = g
                    .check(path, need, Some(&peer(Some(role))), Some(mgmt))
                    .unwrap_err();
                assert_eq!(e.status().code(), tonic::Code::PermissionDenied, "{path}");
                assert!(e.to_string().contains("role server"), "{e}");
            }
            let e = g
                .check(path, need, Some(&peer(None)), Some(mgmt))
                .unwrap_err();
            assert_eq!(e.status().code(), tonic::Code::Unauthenticated);
        }
    }

    #[test]
    fn public_calls_need_a_token_of_their_scope() {
        let acl = Acl::new("0123456789abcdef0123").unwrap();
        let read = format!("Bearer {}", acl.derive(Scope::Read));
        let write = format!("Bearer {}", acl.derive(Scope::Write));
        let g = Guard::new(true, Some(acl));
        let op = peer(Some(Role::Operator));
        let register = "/stampede.v1.JobService/Register";
        let need = grpc_need(register);
        assert!(g.check(register, need, Some(&op), Some(&write)).is_ok());
        let e = g.check(register, need, Some(&op), Some(&read)).unwrap_err();
        assert_eq!(e.status().code(), tonic::Code::PermissionDenied);
        assert!(e.to_string().contains("write scope"), "{e}");
        let e = g.check(register, need, Some(&op), None).unwrap_err();
        assert_eq!(e.status().code(), tonic::Code::Unauthenticated);
        let e = g
            .check(register, need, Some(&op), Some("Bearer st1.write.00.00"))
            .unwrap_err();
        assert!(matches!(e, Denied::BadToken { .. }));

        // Node agent calls: not for operators; servers need no token.
        let hb = "/stampede.v1.NodeService/UpdateStatus";
        let e = g
            .check(hb, grpc_need(hb), Some(&op), Some(&write))
            .unwrap_err();
        assert!(matches!(e, Denied::Role { .. }));
        let client = peer(Some(Role::Client));
        assert!(g
            .check(hb, grpc_need(hb), Some(&client), Some(&write))
            .is_ok());
        let server = peer(Some(Role::Server));
        assert!(g.check(hb, grpc_need(hb), Some(&server), None).is_ok());
        // The stream of node calls needs what the writes among them need.
        let calls = "/stampede.v1.NodeService/CallStream";
        assert_eq!(grpc_need(calls), Need::Agents(Scope::Write));
        let e = g
            .check(calls, grpc_need(calls), Some(&client), Some(&read))
            .unwrap_err();
        assert!(e.to_string().contains("write scope"), "{e}");
        let e = g
            .check(calls, grpc_need(calls), Some(&op), Some(&write))
            .unwrap_err();
        assert!(matches!(e, Denied::Role { .. }));

        // HTTP admin calls need a server certificate and the management token.
        let put = http_need(&axum::http::Method::PUT, "/v1/workers");
        let mgmt = "Bearer 0123456789abcdef0123";
        let e = g
            .check("PUT /v1/workers", put, Some(&op), Some(mgmt))
            .unwrap_err();
        assert!(e.to_string().contains("role server"), "{e}");
        let e = g
            .check("PUT /v1/workers", put, Some(&server), Some(&write))
            .unwrap_err();
        assert!(e.to_string().contains("management scope"), "{e}");
        assert!(g
            .check("PUT /v1/workers", put, Some(&server), Some(mgmt))
            .is_ok());
        let metrics = http_need(&axum::http::Method::GET, "/metrics");
        assert!(g
            .check("GET /metrics", metrics, Some(&client), None)
            .is_ok());
    }

    #[test]
    fn an_insecure_server_checks_nothing_but_its_tokens() {
        let open = Guard::new(false, None);
        let path = "/stampede.v1.RaftService/AppendEntries";
        assert!(open.check(path, grpc_need(path), None, None).is_ok());
        let acl = Acl::new("0123456789abcdef0123").unwrap();
        let tokens = Guard::new(false, Some(acl));
        let reg = "/stampede.v1.JobService/Register";
        assert!(matches!(
            tokens.check(reg, grpc_need(reg), None, None),
            Err(Denied::NoToken { .. })
        ));
    }
}
