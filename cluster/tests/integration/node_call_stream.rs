//! `NodeService.CallStream`, driven as a node agent (nodesim) or a forger
//! would drive it, against a real 3-server cluster: each call on the stream
//! is served as the call of its own would be, answered by its ticket in the
//! order calls finish; a refused call gets the status its own call would
//! have, and the stream goes on; a call without a ticket ends the stream.

use crate::common;

use common::assert_refused;
use stampede_launch::testing::{node, node_secrets, secret_of, Harness};
use stampede_proto::node_answer::Reply;
use stampede_proto::node_call::Request;
use stampede_proto::node_service_client::NodeServiceClient;
use stampede_proto::security::Role;
use stampede_proto::{
    AllocClientStatus, Allocation, NodeAnswer, NodeCall, NodeClientAllocsRequest,
    NodeRegisterRequest, NodeStatus, NodeUpdateAllocRequest, NodeUpdateStatusRequest, QueryOptions,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Code, Status, Streaming};

/// One open call stream to a server: send calls, read answers.
struct Calls {
    tx: mpsc::UnboundedSender<NodeCall>,
    answers: Streaming<NodeAnswer>,
}

impl Calls {
    async fn open(c: &Harness, id: u64) -> Self {
        // A node's certificate and a write token, as nodesim presents them.
        let mut client = c.client_of(&[id]).nodes_on(0);
        let (tx, rx) = mpsc::unbounded_channel();
        let answers = client
            .call_stream(UnboundedReceiverStream::new(rx))
            .await
            .expect("the stream opens")
            .into_inner();
        Self { tx, answers }
    }

    fn send(&self, ticket: u64, request: Option<Request>) {
        self.tx.send(NodeCall { ticket, request }).unwrap();
    }

    async fn next(&mut self) -> Result<NodeAnswer, Status> {
        match self.answers.message().await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => Err(status),
        }
    }

    /// The answer to `ticket`, which must come next, as the call's result.
    async fn answer(&mut self, ticket: u64) -> Result<Reply, Status> {
        let answer = self.next().await.expect("an answer, not the end");
        assert_eq!(answer.ticket, ticket, "{answer:?}");
        match answer.reply.expect("every answer has a reply") {
            Reply::Refused(r) => Err(r.into()),
            reply => Ok(reply),
        }
    }
}

fn query(node_id: &str, min_index: u64, max_wait_ms: u64) -> Option<Request> {
    Some(Request::GetClientAllocs(NodeClientAllocsRequest {
        node_id: node_id.into(),
        secret_id: secret_of(node_id),
        query: Some(QueryOptions {
            min_index,
            max_wait_ms,
            source: "client_allocs".into(),
        }),
        with_changed: true,
        changed_only: false,
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_on_the_stream_are_served_as_calls_and_answered_by_ticket() {
    let (c, leader) = Harness::with_leader(3, &[]).await;
    // A follower: its writes go on to the leader, its reads are its own.
    let follower = c.ids_except(leader)[0];
    let mut calls = Calls::open(&c, follower).await;

    calls.send(
        7,
        Some(Request::Register(NodeRegisterRequest {
            node: Some(node("stream-node")),
            secret_id: secret_of("stream-node"),
        })),
    );
    let Ok(Reply::Written(w)) = calls.answer(7).await else {
        panic!("register answers with the write's index");
    };
    assert!(w.index > 0);

    calls.send(8, query("stream-node", 0, 0));
    let Ok(Reply::GetClientAllocs(r)) = calls.answer(8).await else {
        panic!("a query answers with the node's allocations");
    };
    assert!(r.allocs.is_empty() && r.index > 0, "{r:?}");

    calls.send(
        9,
        Some(Request::UpdateStatus(NodeUpdateStatusRequest {
            node_id: "stream-node".into(),
            status: NodeStatus::Ready as i32,
            secret_id: secret_of("stream-node"),
        })),
    );
    let Ok(Reply::UpdateStatus(hb)) = calls.answer(9).await else {
        panic!("a heartbeat answers with the TTL");
    };
    assert!(hb.heartbeat_ttl_ms > 0);

    // Refusals are the statuses the calls of their own give, and the
    // stream carries on after each.
    calls.send(10, query("no-such-node", 0, 0));
    assert_refused(
        "query of an unknown node",
        calls.answer(10).await,
        Code::NotFound,
        "node_id",
    );
    calls.send(
        11,
        Some(Request::UpdateAlloc(NodeUpdateAllocRequest {
            allocs: vec![Allocation {
                id: "ghost-alloc".into(),
                client_status: AllocClientStatus::Running as i32,
                ..Default::default()
            }],
            secrets: node_secrets(["stream-node"]),
        })),
    );
    assert_refused(
        "update of an unknown allocation",
        calls.answer(11).await,
        Code::NotFound,
        "allocs[0].id",
    );
    calls.send(
        12,
        Some(Request::UpdateAlloc(NodeUpdateAllocRequest {
            allocs: vec![Allocation {
                id: "a\0b".into(),
                client_status: AllocClientStatus::Running as i32,
                ..Default::default()
            }],
            secrets: node_secrets(["stream-node"]),
        })),
    );
    assert_refused(
        "update with a NUL in an id",
        calls.answer(12).await,
        Code::InvalidArgument,
        "allocs[0].id",
    );
    // Another caller's stream, the node's id without its secret.
    calls.send(
        20,
        Some(Request::UpdateStatus(NodeUpdateStatusRequest {
            node_id: "stream-node".into(),
            status: NodeStatus::Down as i32,
            secret_id: "not-the-secret-of-stream-node".into(),
        })),
    );
    assert_refused(
        "a heartbeat with another secret",
        calls.answer(20).await,
        Code::PermissionDenied,
        "secret_id does not match node stream-node",
    );
    calls.send(13, None);
    assert_refused(
        "a call without a request",
        calls.answer(13).await,
        Code::InvalidArgument,
        "request",
    );

    // A parked query does not hold the stream up: the call after it is
    // answered first, and the query when its wait ends, unchanged.
    calls.send(14, query("stream-node", r.index, 1_500));
    calls.send(15, query("stream-node", 0, 0));
    let Ok(Reply::GetClientAllocs(now)) = calls.answer(15).await else {
        panic!("the plain query is answered while the other waits");
    };
    let Ok(Reply::GetClientAllocs(parked)) = calls.answer(14).await else {
        panic!("the parked query is answered when its wait ends");
    };
    assert_eq!(parked.index, now.index);

    // No ticket: nothing could name the answer, so the stream ends.
    calls.send(0, query("stream-node", 0, 0));
    let ended = calls.next().await;
    assert_refused(
        "a call without a ticket",
        ended,
        Code::InvalidArgument,
        "ticket",
    );

    // The node registered through the stream is there for every server.
    let listed = c
        .client_of(&[leader])
        .nodes()
        .get(stampede_proto::NodeGetRequest {
            node_id: "stream-node".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let listed = listed.node.unwrap();
    assert_eq!(listed.id, "stream-node");
    assert_eq!(listed.status, NodeStatus::Ready as i32, "not set down");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_is_for_node_agents_with_a_write_token() {
    let (c, _) = Harness::with_leader(1, &[]).await;
    let open = |mut client: NodeServiceClient<_>| async move {
        client
            .call_stream(tokio_stream::iter([NodeCall {
                ticket: 1,
                request: query("n1", 0, 0),
            }]))
            .await
            .map(drop)
    };
    // An operator's certificate, whatever its token: not a node agent.
    let operator = c.client_as(Role::Operator).nodes_on(0);
    let e = open(operator).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("CallStream"), "{}", e.message());
    // A node agent may (the harness's client: a node's certificate and a
    // write token), and so may a server.
    open(c.client().nodes_on(0)).await.unwrap();
    open(c.client_as(Role::Server).nodes_on(0)).await.unwrap();
}
