//! Bytes that are not the message a call expects, sent as the raw body of
//! every gRPC call, and bad requests to every HTTP route. A body that does
//! not decode is `InvalidArgument` naming the message type (and the field,
//! for a string that is not UTF-8); no body yields `Internal` or `Unknown`,
//! and every server stays up and keeps serving.

use crate::common;

use common::{still_serves, MAX_ERROR_LEN};
use prost::bytes::{Buf, BufMut};
use rand::{Rng, SeedableRng};
use stampede_launch::testing::Harness;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Sends and receives bytes as they are: the message is whatever we say.
#[derive(Clone, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// Every call, with its request message type and the path of tags (each
/// a length-delimited field) down to a string field in it, if it has one.
const CALLS: &[(&str, &str, &[u8])] = &[
    (
        "/stampede.v1.NodeService/Register",
        "NodeRegisterRequest",
        &[0x0a, 0x0a],
    ),
    ("/stampede.v1.NodeService/Get", "NodeGetRequest", &[0x0a]),
    (
        "/stampede.v1.NodeService/List",
        "NodeListRequest",
        &[0x0a, 0x1a],
    ),
    (
        "/stampede.v1.NodeService/UpdateStatus",
        "NodeUpdateStatusRequest",
        &[0x0a],
    ),
    (
        "/stampede.v1.NodeService/GetClientAllocs",
        "NodeClientAllocsRequest",
        &[0x0a],
    ),
    (
        "/stampede.v1.NodeService/GetAllocs",
        "AllocsGetRequest",
        &[0x0a],
    ),
    (
        "/stampede.v1.NodeService/UpdateAlloc",
        "NodeUpdateAllocRequest",
        &[0x0a, 0x0a],
    ),
    (
        "/stampede.v1.JobService/Register",
        "JobRegisterRequest",
        &[0x0a, 0x0a],
    ),
    (
        "/stampede.v1.JobService/Deregister",
        "JobDeregisterRequest",
        &[0x0a],
    ),
    ("/stampede.v1.JobService/Get", "JobGetRequest", &[0x0a]),
    (
        "/stampede.v1.JobService/List",
        "JobListRequest",
        &[0x0a, 0x1a],
    ),
    (
        "/stampede.v1.JobService/Allocations",
        "JobAllocationsRequest",
        &[0x0a],
    ),
    (
        "/stampede.v1.JobService/Summary",
        "JobSummaryRequest",
        &[0x0a],
    ),
    (
        "/stampede.v1.JobService/Evaluations",
        "JobEvaluationsRequest",
        &[0x0a],
    ),
    ("/stampede.v1.EvalService/Get", "EvalGetRequest", &[0x0a]),
    (
        "/stampede.v1.EvalService/Dequeue",
        "EvalDequeueRequest",
        &[],
    ),
    ("/stampede.v1.EvalService/Ack", "EvalAckRequest", &[0x0a]),
    ("/stampede.v1.EvalService/Nack", "EvalAckRequest", &[0x0a]),
    (
        "/stampede.v1.EvalService/Update",
        "EvalUpdateRequest",
        &[0x0a],
    ),
    ("/stampede.v1.EvalService/Reap", "EvalReapRequest", &[0x0a]),
    (
        "/stampede.v1.PlanService/Submit",
        "PlanSubmitRequest",
        &[0x0a, 0x0a],
    ),
    (
        "/stampede.v1.DeploymentService/Get",
        "DeploymentGetRequest",
        &[0x0a],
    ),
    (
        "/stampede.v1.DeploymentService/ForJob",
        "JobDeploymentsRequest",
        &[0x0a],
    ),
    ("/stampede.v1.RaftService/AppendEntries", "RaftPayload", &[]),
    ("/stampede.v1.RaftService/Vote", "RaftPayload", &[]),
    (
        "/stampede.v1.RaftService/InstallSnapshot",
        "RaftPayload",
        &[],
    ),
    (
        "/stampede.v1.RaftService/Forward",
        "ForwardRequest",
        &[0x12, 0x0a, 0x0a],
    ),
];

/// The largest random body: several MiB.
const NOISE: usize = 6 << 20;

async fn call(channel: &Channel, path: &'static str, body: Vec<u8>) -> Result<Vec<u8>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone())
        .max_encoding_message_size(stampede_proto::MAX_MESSAGE_BYTES)
        .max_decoding_message_size(stampede_proto::MAX_MESSAGE_BYTES);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let answer = grpc
        .unary(
            tonic::Request::new(body),
            PathAndQuery::from_static(path),
            RawCodec,
        )
        .await;
    answer.map(tonic::Response::into_inner)
}

/// The string `0xff 0xfe` (not UTF-8) at the end of `tags`, each tag a
/// length-delimited field holding the next.
fn bad_utf8(tags: &[u8]) -> Vec<u8> {
    let mut body = vec![0xff, 0xfe];
    for tag in tags.iter().rev() {
        let mut outer = vec![*tag, body.len() as u8];
        outer.extend(body);
        body = outer;
    }
    body
}

/// A decode failure names the message; otherwise whatever the call
/// answers, it is neither `Internal` nor `Unknown`.
fn check(what: &str, message_type: &str, result: Result<Vec<u8>, Status>) {
    let Err(status) = result else { return };
    let message = status.message();
    assert!(
        !matches!(status.code(), Code::Internal | Code::Unknown),
        "{what}: {:?} {message}",
        status.code()
    );
    assert!(
        message.len() <= MAX_ERROR_LEN,
        "{what}: {} bytes",
        message.len()
    );
    if message.contains("does not decode as protobuf") {
        assert_eq!(status.code(), Code::InvalidArgument, "{what}");
        assert!(
            message.starts_with(&format!("{message_type}: ")),
            "{what}: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bytes_that_do_not_decode_are_invalid_arguments_naming_the_message() {
    let (mut c, _) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let mut noise = vec![0u8; NOISE + 64 * 1024];
    rand::rngs::StdRng::seed_from_u64(13).fill(&mut noise[..]);
    // As a server: every role check passes, so the bytes reach decoding.
    let channels: Vec<Channel> = c
        .ids()
        .into_iter()
        .map(|id| c.channel(id, stampede_proto::security::Role::Server))
        .collect();
    for (i, &(path, message_type, string_at)) in CALLS.iter().enumerate() {
        let channel = &channels[i % channels.len()];
        // A string that is not UTF-8 names the message and the field.
        if !string_at.is_empty() {
            let what = format!("{path} with invalid UTF-8");
            let status = call(channel, path, bad_utf8(string_at))
                .await
                .expect_err(&what);
            assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
            assert!(
                status.message().starts_with(&format!("{message_type}: "))
                    && status.message().contains("UTF-8"),
                "{what}: {}",
                status.message()
            );
        }
        // An empty body is the message with every field unset.
        check(
            &format!("{path} empty"),
            message_type,
            call(channel, path, vec![]).await,
        );
        // Random bytes, up to several MiB, from a different place for each call.
        for size in [1, 5, 64, 4096, 1 << 20, NOISE] {
            let start = (i * 7919) % (noise.len() - size + 1);
            let body = noise[start..start + size].to_vec();
            let what = format!("{path} with {size} random bytes");
            check(&what, message_type, call(channel, path, body).await);
        }
    }
    still_serves(&mut c, "after-raw-bytes").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_http_requests_are_refused_naming_the_parameter() {
    let (mut c, leader) = Harness::with_leader(1, &[]).await;
    // As an operator with the management token: past the checks of who
    // may call, to the parameters.
    let base = c.url(leader, "").unwrap();
    let http = c.http_client().clone();
    let long = "7".repeat(10_000);
    let cases: Vec<(reqwest::Method, String, u16, &str)> = vec![
        (
            reqwest::Method::PUT,
            "/v1/workers".into(),
            400,
            "count: is required",
        ),
        (
            reqwest::Method::PUT,
            "/v1/workers?count=".into(),
            400,
            "count: \"\" is not",
        ),
        (
            reqwest::Method::PUT,
            "/v1/workers?count=-1".into(),
            400,
            "count: \"-1\" is not",
        ),
        (
            reqwest::Method::PUT,
            "/v1/workers?count=abc%00".into(),
            400,
            "count: \"abc\\0\" is not",
        ),
        (
            reqwest::Method::PUT,
            format!("/v1/workers?count={long}"),
            400,
            "count: \"7777",
        ),
        (
            reqwest::Method::PUT,
            "/v1/workers?count=1000000".into(),
            400,
            "count: 1000000 is more than",
        ),
        (
            reqwest::Method::POST,
            "/v1/workers/pause?id=abc".into(),
            400,
            "id: \"abc\" is not a worker id",
        ),
        (
            reqwest::Method::POST,
            "/v1/workers/pause?id=-1".into(),
            400,
            "id: \"-1\" is not a worker id",
        ),
        (
            reqwest::Method::POST,
            "/v1/workers/resume?id=99999".into(),
            404,
            "id: no worker 99999",
        ),
        (
            reqwest::Method::POST,
            "/v1/workers/pause?id=18446744073709551616".into(),
            400,
            "id:",
        ),
        (reqwest::Method::GET, "/v1/nope".into(), 404, ""),
        (reqwest::Method::DELETE, "/v1/workers".into(), 405, ""),
        (reqwest::Method::POST, "/v1/status".into(), 405, ""),
    ];
    for (method, path, code, body_start) in cases {
        let what = format!("{method} {}", &path[..path.len().min(60)]);
        let resp = http
            .request(method, format!("{base}{path}"))
            .body(vec![0xffu8; 1024])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), code, "{what}");
        let body = resp.text().await.unwrap();
        assert!(body.starts_with(body_start), "{what}: {body:?}");
        assert!(body.len() <= MAX_ERROR_LEN, "{what}: {} bytes", body.len());
    }
    // None of that paused or stopped a worker.
    let workers: serde_json::Value = http
        .get(format!("{base}/v1/workers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let list = workers["workers"].as_array().unwrap();
    assert!(!list.is_empty(), "{workers}");
    assert!(list.iter().all(|w| w["paused"] == false), "{workers}");
    still_serves(&mut c, "after-http").await;
}

/// Sends `body` as it is, without gRPC's framing, to `path`; the status the
/// server answers with.
async fn unframed(channel: &Channel, path: &str, body: Vec<u8>) -> Status {
    use tower::ServiceExt;
    let request = tonic::codegen::http::Request::post(format!("https://server.stampede{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::boxed(axum::body::Body::from(body)))
        .unwrap();
    let response = channel.clone().oneshot(request).await.unwrap();
    Status::from_header_map(response.headers()).expect("a trailers-only error answer")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_is_not_grpc_framing_is_an_invalid_argument() {
    let (c, leader) = Harness::with_leader(1, &[]).await;
    let channel = c.channel(leader, stampede_proto::security::Role::Server);
    let mut noise = vec![0u8; 4096];
    rand::rngs::StdRng::seed_from_u64(7).fill(&mut noise[..]);
    // Random bytes (a bad compression flag or a cut-off frame), a frame
    // header promising more than follows, and nothing at all.
    let bodies = [
        noise.clone(),
        vec![2, 0, 0, 0, 1],
        vec![0, 0, 0, 0, 200, 1, 2],
        vec![],
    ];
    for (path, _, _) in CALLS.iter().take(6) {
        for body in &bodies {
            let status = unframed(&channel, path, body.clone()).await;
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{path} with {} unframed bytes: {status:?}",
                body.len()
            );
            assert!(
                status.message().starts_with("request body:"),
                "{}",
                status.message()
            );
        }
    }
}
