//! The scheduler workers on a real 3-process cluster: pausing every worker
//! stops placement, resuming resumes it, and their number changes at runtime.

use crate::common;

use common::{register_nodes, wait_live, worker_states};
use stampede_launch::testing::{allocs, eventually, register_job, service_job, Harness, CATCH_UP};

#[tokio::test(flavor = "multi_thread")]
async fn pausing_all_workers_stops_placement_and_resuming_resumes_it() {
    let (c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let client = c.client();
    register_nodes(&client, "n", 3, 1000, 4096).await;
    for id in c.ids() {
        c.request(id, reqwest::Method::POST, "/v1/workers/pause")
            .await
            .unwrap();
    }
    for id in c.ids() {
        let url = c.url(id, "/v1/workers").unwrap();
        let http = c.http_client();
        eventually("every worker is paused", CATCH_UP, || async {
            let states = worker_states(http, &url).await.unwrap();
            states.iter().all(|s| s == "paused")
        })
        .await;
        // The dashboards' workers panel reads the same states from /metrics.
        let workers = worker_states(http, &url).await.unwrap().len();
        assert!(workers > 0);
        let paused = c
            .metric(id, "stampede_workers{state=\"paused\"}")
            .await
            .unwrap();
        let dequeuing = c
            .metric(id, "stampede_workers{state=\"dequeuing\"}")
            .await
            .unwrap();
        assert_eq!((paused, dequeuing), (workers as f64, 0.0));
    }
    register_job(&client, service_job("web", 3, 100, 64)).await;
    eventually("the evaluation waits in the broker", CATCH_UP, || async {
        c.metric(leader, "stampede_broker_ready").await.unwrap() == 1.0
    })
    .await;
    assert!(
        allocs(&c.client_of(&[leader]), "web")
            .await
            .unwrap()
            .is_empty(),
        "nothing placed while paused"
    );

    for id in c.ids() {
        c.request(id, reqwest::Method::POST, "/v1/workers/resume")
            .await
            .unwrap();
    }
    wait_live(&client, "web", 3).await;

    // Changing the number of workers at runtime.
    let r: serde_json::Value = c
        .request(leader, reqwest::Method::PUT, "/v1/workers?count=5")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["count"], 5);
    eventually("five workers on the metric", CATCH_UP, || async {
        let mut sum = 0.0;
        for state in ["starting", "dequeuing", "working", "backing_off", "paused"] {
            let series = format!("stampede_workers{{state=\"{state}\"}}");
            sum += c.metric(leader, &series).await.unwrap();
        }
        sum == 5.0
    })
    .await;
    let err = c
        .request(leader, reqwest::Method::PUT, "/v1/workers?count=many")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("count: \"many\" is not a whole number"),
        "{err}"
    );
}
