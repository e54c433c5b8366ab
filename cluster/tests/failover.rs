//! Failover of the control plane on a real 3-process cluster: `kill -9` of
//! the leader while it places jobs loses none it acknowledged, and the new
//! leader finishes placing them.

mod common;

use std::time::Duration;

use common::{register_nodes, wait_live};
use stampede_launch::testing::{register_job, service_job, Harness};
use stampede_proto::JobGetRequest;

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_the_leader_mid_placement_loses_no_acknowledged_job() {
    let (mut c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let client = c.client().with_retry_for(Duration::from_secs(30));
    register_nodes(&client, "n", 10, 4000, 16384).await;
    let mut jobs = Vec::new();
    for j in 0..10 {
        let id = format!("job-{j}");
        register_job(&client, service_job(&id, 20, 100, 64)).await;
        jobs.push(id);
    }
    c.kill(leader).unwrap();
    let new_leader = c.leader().await;
    assert_ne!(new_leader, leader);
    for id in &jobs {
        let job = client
            .retrying(|cl| {
                let job_id = id.clone();
                async move {
                    Ok(cl
                        .jobs()
                        .get(JobGetRequest {
                            job_id,
                            query: None,
                        })
                        .await?
                        .into_inner())
                }
            })
            .await
            .unwrap();
        assert!(job.job.is_some(), "acknowledged job {id} was lost");
        wait_live(&client, id, 20).await;
    }
}
