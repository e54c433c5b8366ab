//! Node identity (issue 41, "a client certificate is not a node"), against
//! a real 3-server TLS cluster: a caller with a client certificate and a
//! write token, the node's id but not its secret, cannot heartbeat it, set
//! it down, read its allocations, report them, or register it anew, through
//! any server (forwarded or not); the node stays READY and its allocation
//! is not lost. The node itself, with its secret, does all of that.

use crate::common;

use common::{assert_refused, eventually_has_node, live, wait_live};
use stampede_launch::testing::{
    node, node_secrets, register_job, register_node, secret_of, service_job, Harness,
};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, Allocation, NodeClientAllocsRequest, NodeGetRequest, NodeRegisterRequest,
    NodeSecret, NodeStatus, NodeUpdateAllocRequest, NodeUpdateStatusRequest,
};
use tonic::Code;

/// Not the victim's secret: well formed, so only its match is refused.
const THIEF: &str = "the-thiefs-own-secret-0001";

fn status(node_id: &str, status: NodeStatus, secret_id: &str) -> NodeUpdateStatusRequest {
    NodeUpdateStatusRequest {
        node_id: node_id.into(),
        status: status as i32,
        secret_id: secret_id.into(),
    }
}

fn query(node_id: &str, secret_id: &str) -> NodeClientAllocsRequest {
    NodeClientAllocsRequest {
        node_id: node_id.into(),
        query: None,
        with_changed: true,
        changed_only: false,
        secret_id: secret_id.into(),
    }
}

/// A report of `alloc` as `client_status`, vouched for by `secrets`.
fn report(
    alloc: &str,
    client_status: AllocClientStatus,
    secrets: Vec<NodeSecret>,
) -> NodeUpdateAllocRequest {
    NodeUpdateAllocRequest {
        allocs: vec![Allocation {
            id: alloc.into(),
            client_status: client_status as i32,
            client_description: "reported by someone".into(),
            ..Default::default()
        }],
        secrets,
    }
}

fn thief_secret(node_id: &str) -> Vec<NodeSecret> {
    vec![NodeSecret {
        node_id: node_id.into(),
        secret_id: THIEF.into(),
    }]
}

/// Every way a caller without the victim's secret may try to act for it,
/// through `through` (one server); each must be `PermissionDenied`.
async fn every_theft_is_refused(through: &ClusterClient, alloc: &str, on: &str) {
    let mut nodes = through.nodes();
    let r = nodes
        .update_status(status("victim", NodeStatus::Ready, THIEF))
        .await;
    assert_refused(
        &format!("{on}: heartbeat"),
        r,
        Code::PermissionDenied,
        "secret_id does not match node victim",
    );
    let r = nodes
        .update_status(status("victim", NodeStatus::Down, THIEF))
        .await;
    assert_refused(
        &format!("{on}: set down"),
        r,
        Code::PermissionDenied,
        "secret_id does not match node victim",
    );
    let r = nodes.get_client_allocs(query("victim", THIEF)).await;
    assert_refused(
        &format!("{on}: its allocations"),
        r,
        Code::PermissionDenied,
        "secret_id does not match node victim",
    );

    // Reports: with a wrong secret for the node, with the thief's own
    // node's (right) secret, with none; and marked as forwarded by a
    // server, which any caller may claim.
    let lost = AllocClientStatus::Lost;
    let r = nodes
        .update_alloc(report(alloc, lost, thief_secret("victim")))
        .await;
    assert_refused(
        &format!("{on}: report, wrong secret"),
        r,
        Code::PermissionDenied,
        "secret_id does not match node victim",
    );
    let r = nodes
        .update_alloc(report(alloc, lost, node_secrets(["thief"])))
        .await;
    assert_refused(
        &format!("{on}: report, own node's secret"),
        r,
        Code::PermissionDenied,
        "allocs[0]: no secret_id given for node victim",
    );
    let r = nodes.update_alloc(report(alloc, lost, Vec::new())).await;
    assert_refused(
        &format!("{on}: report, no secret"),
        r,
        Code::PermissionDenied,
        "allocs[0]: no secret_id given for node victim",
    );
    let mut forged = tonic::Request::new(report(alloc, lost, thief_secret("victim")));
    forged
        .metadata_mut()
        .insert("x-stampede-forwarded", "1".parse().unwrap());
    let r = nodes.update_alloc(forged).await;
    assert_refused(
        &format!("{on}: report marked forwarded"),
        r,
        Code::PermissionDenied,
        "secret_id does not match node victim",
    );

    // A new registration of the node, down, with the thief's secret.
    let mut down = node("victim");
    down.status = NodeStatus::Down as i32;
    let r = nodes
        .register(NodeRegisterRequest {
            node: Some(down),
            secret_id: THIEF.into(),
        })
        .await;
    assert_refused(
        &format!("{on}: register again"),
        r,
        Code::PermissionDenied,
        "secret_id does not match node victim",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_and_token_without_the_nodes_secret_cannot_act_for_it() {
    // No heartbeats needed: the nodes stay READY unless someone sets them down.
    let (c, _) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let client = c.client();
    register_node(&client, node("victim")).await.unwrap();
    register_job(&client, service_job("web", 1, 100, 64)).await;
    let placed = wait_live(&client, "web", 1).await;
    let alloc = placed[0].id.clone();
    assert_eq!(placed[0].node_id, "victim");
    // The thief is a node agent too, with a node of its own.
    register_node(&client, node("thief")).await.unwrap();

    for id in c.ids() {
        // Every server has both nodes before it is asked about them.
        let through = c.client_of(&[id]);
        eventually_has_node(&through, "thief").await;
        every_theft_is_refused(&through, &alloc, &format!("server {id}")).await;
    }

    // Nothing changed: READY everywhere, the allocation not lost.
    for id in c.ids() {
        let n = c
            .client_of(&[id])
            .nodes()
            .get(NodeGetRequest {
                node_id: "victim".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .node
            .unwrap();
        assert_eq!(n.status, NodeStatus::Ready as i32, "server {id}: {n:?}");
    }
    let all = wait_live(&client, "web", 1).await;
    assert_eq!(live(&all).len(), 1, "{all:?}");
    assert!(all
        .iter()
        .all(|a| a.client_status != AllocClientStatus::Lost as i32));

    // The node itself, with its secret, does all of it, through any server.
    let mine = secret_of("victim");
    for id in c.ids() {
        let mut nodes = c.client_of(&[id]).nodes();
        let hb = nodes
            .update_status(status("victim", NodeStatus::Ready, &mine))
            .await
            .unwrap()
            .into_inner();
        assert!(hb.heartbeat_ttl_ms > 0);
        let reply = nodes
            .get_client_allocs(query("victim", &mine))
            .await
            .unwrap()
            .into_inner();
        assert!(reply.allocs.contains_key(&alloc), "{reply:?}");
        nodes
            .update_alloc(report(
                &alloc,
                AllocClientStatus::Running,
                node_secrets(["victim"]),
            ))
            .await
            .unwrap();
    }
    register_node(&client, node("victim")).await.unwrap();
    // And one call may carry the reports of several nodes, each vouched for.
    let both = [node_secrets(["victim"]), thief_secret("thief")].concat();
    let err = client
        .nodes()
        .update_alloc(report(&alloc, AllocClientStatus::Running, both))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::PermissionDenied,
        "the thief's entry is wrong: {err:?}"
    );
    let both = node_secrets(["victim", "thief"]);
    client
        .nodes()
        .update_alloc(report(&alloc, AllocClientStatus::Running, both))
        .await
        .unwrap();
    let mut nodes = client.nodes();
    let n = nodes
        .get(NodeGetRequest {
            node_id: "victim".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .node
        .unwrap();
    assert_eq!(n.status, NodeStatus::Ready as i32);
}
