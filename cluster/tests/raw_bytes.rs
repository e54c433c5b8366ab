//! Bytes that are not the message a call expects, sent as the raw body of
//! every gRPC call, and bad requests to every HTTP route. A body that does
//! not decode is `InvalidArgument` naming the message type (and the field,
//! for a string that is not UTF-8); no body yields `Internal` or `Unknown`,
//! and every server stays up and keeps serving.

mod common;

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

/// Every call, with its request message type and whether that message's
/// field 1 is a string (else a message whose own field 1 is a string).
const CALLS: &[(&str, &str, bool)] = &[
    ("/stampede.v1.NodeService/Register", "NodeRegisterRequest", false),
    ("/stampede.v1.NodeService/Get", "NodeGetRequest", true),
    ("/stampede.v1.NodeService/List", "NodeListRequest", false),
    ("/stampede.v1.NodeService/UpdateStatus", "NodeUpdateStatusRequest", true),
    ("/stampede.v1.NodeService/GetClientAllocs", "NodeClientAllocsRequest", true),
    ("/stampede.v1.NodeService/GetAllocs", "AllocsGetRequest", true),
    ("/stampede.v1.NodeService/UpdateAlloc", "NodeUpdateAllocRequest", false),
    ("/stampede.v1.JobService/Register", "JobRegisterRequest", false),
    ("/stampede.v1.JobService/Deregister", "JobDeregisterRequest", true),
    ("/stampede.v1.JobService/Get", "JobGetRequest", true),
    ("/stampede.v1.JobService/List", "JobListRequest", false),
    ("/stampede.v1.JobService/Allocations", "JobAllocationsRequest", true),
    ("/stampede.v1.JobService/Evaluations", "JobEvaluationsRequest", true),
    ("/stampede.v1.EvalService/Get", "EvalGetRequest", true),
    ("/stampede.v1.EvalService/Dequeue", "EvalDequeueRequest", false),
    ("/stampede.v1.EvalService/Ack", "EvalAckRequest", true),
    ("/stampede.v1.EvalService/Nack", "EvalAckRequest", true),
    ("/stampede.v1.EvalService/Update", "EvalUpdateRequest", true),
    ("/stampede.v1.PlanService/Submit", "PlanSubmitRequest", false),
    ("/stampede.v1.DeploymentService/Get", "DeploymentGetRequest", true),
    ("/stampede.v1.DeploymentService/ForJob", "JobDeploymentsRequest", true),
    ("/stampede.v1.RaftService/AppendEntries", "RaftPayload", false),
    ("/stampede.v1.RaftService/Vote", "RaftPayload", false),
    ("/stampede.v1.RaftService/InstallSnapshot", "RaftPayload", false),
    ("/stampede.v1.RaftService/Forward", "ForwardRequest", false),
];

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

/// The string `0xff 0xfe` (not UTF-8) as field 1: a length-delimited field
/// with tag 0x0a.
fn bad_utf8(nested: bool) -> Vec<u8> {
    let string = vec![0x0a, 0x02, 0xff, 0xfe];
    if !nested {
        return string;
    }
    let mut outer = vec![0x0a, string.len() as u8];
    outer.extend(string);
    outer
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
    assert!(message.len() <= MAX_ERROR_LEN, "{what}: {} bytes", message.len());
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
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let channels: Vec<Channel> = c
        .servers()
        .iter()
        .map(|s| {
            Channel::from_shared(format!("http://{}", s.rpc))
                .unwrap()
                .connect_lazy()
        })
        .collect();
    for (i, &(path, message_type, string_first)) in CALLS.iter().enumerate() {
        let channel = &channels[i % channels.len()];
        // A string that is not UTF-8 names the message and the field.
        let what = format!("{path} with invalid UTF-8");
        let status = call(channel, path, bad_utf8(!string_first))
            .await
            .expect_err(&what);
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        assert!(
            status.message().starts_with(&format!("{message_type}: "))
                && status.message().contains("UTF-8"),
            "{what}: {}",
            status.message()
        );
        // An empty body is the message with every field unset.
        check(&format!("{path} empty"), message_type, call(channel, path, vec![]).await);
        // Random bytes, up to several MiB.
        for size in [1, 5, 64, 4096, 1 << 20, 6 << 20] {
            let body: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
            let what = format!("{path} with {size} random bytes");
            check(&what, message_type, call(channel, path, body).await);
        }
    }
    still_serves(&mut c, "after-raw-bytes").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_http_requests_are_refused_naming_the_parameter() {
    let (mut c, leader) = Harness::with_leader(1, &[]).await;
    let base = format!("http://{}", c.server(leader).unwrap().http);
    let http = reqwest::Client::new();
    let long = "7".repeat(10_000);
    let cases: Vec<(reqwest::Method, String, u16, &str)> = vec![
        (reqwest::Method::PUT, "/v1/workers".into(), 400, "count: is required"),
        (reqwest::Method::PUT, "/v1/workers?count=".into(), 400, "count: \"\" is not"),
        (reqwest::Method::PUT, "/v1/workers?count=-1".into(), 400, "count: \"-1\" is not"),
        (reqwest::Method::PUT, "/v1/workers?count=abc%00".into(), 400, "count: \"abc\\0\" is not"),
        (reqwest::Method::PUT, format!("/v1/workers?count={long}"), 400, "count: \"7777"),
        (reqwest::Method::PUT, "/v1/workers?count=1000000".into(), 400, "count: 1000000 is more than"),
        (reqwest::Method::POST, "/v1/workers/pause?id=abc".into(), 400, "id: \"abc\" is not a worker id"),
        (reqwest::Method::POST, "/v1/workers/pause?id=-1".into(), 400, "id: \"-1\" is not a worker id"),
        (reqwest::Method::POST, "/v1/workers/resume?id=99999".into(), 404, "id: no worker 99999"),
        (reqwest::Method::POST, "/v1/workers/pause?id=18446744073709551616".into(), 400, "id:"),
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
