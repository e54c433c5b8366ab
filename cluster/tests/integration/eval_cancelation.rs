//! Evaluation cancelation on a real cluster: when a worker acks an
//! evaluation, the older ones of the same job still waiting in the broker
//! are canceled, a few batches of raft entries for a burst, unless
//! `--eval-cancelation off`.

use crate::common;

use common::register_nodes;
use stampede_launch::testing::{eventually, register_job, service_job, Harness, CATCH_UP};
use stampede_proto::{EvalStatus, Evaluation, JobEvaluationsRequest};

/// One job registered `1 + changes` times (each with new `meta`, so each
/// makes an evaluation) while no worker runs, then workers started; returns
/// once the broker is empty and no evaluation of the job is pending.
async fn drain_a_burst_of_evaluations(
    cancelation: &str,
    changes: usize,
) -> (Harness, Vec<Evaluation>) {
    let (c, leader) = Harness::with_leader(
        1,
        &[
            "--heartbeat-min-ttl",
            "600s",
            "--workers",
            "0",
            "--eval-cancelation",
            cancelation,
        ],
    )
    .await;
    let client = c.client();
    register_nodes(&client, "n", 2, 4000, 16384).await;
    for rev in 0..=changes {
        let mut job = service_job("web", 1, 100, 64);
        job.task_groups[0]
            .meta
            .insert("rev".into(), rev.to_string());
        register_job(&client, job).await;
    }
    eventually("every evaluation waits in the broker", CATCH_UP, || async {
        c.metric(leader, "stampede_broker_ready").await.unwrap() == 1.0
            && c.metric(leader, "stampede_broker_waiting_on_job")
                .await
                .unwrap()
                == changes as f64
    })
    .await;

    for id in c.ids() {
        c.request(id, reqwest::Method::PUT, "/v1/workers?count=2")
            .await
            .unwrap();
    }
    let evals = || async {
        let req = JobEvaluationsRequest {
            job_id: "web".into(),
            query: None,
        };
        client
            .jobs()
            .evaluations(req)
            .await
            .unwrap()
            .into_inner()
            .evals
    };
    eventually(
        "the broker is empty and nothing is pending",
        CATCH_UP,
        || async {
            let mut empty = true;
            for series in [
                "stampede_broker_ready",
                "stampede_broker_unacked",
                "stampede_broker_waiting_on_job",
                "stampede_broker_cancelable",
            ] {
                empty &= c.metric(leader, series).await.unwrap() == 0.0;
            }
            empty
                && evals()
                    .await
                    .iter()
                    .all(|e| e.status != EvalStatus::Pending as i32)
        },
    )
    .await;
    let all = evals().await;
    assert_eq!(all.len(), changes + 1);
    (c, all)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ack_cancels_older_waiting_evaluations_in_few_batches_unless_switched_off() {
    const CHANGES: usize = 30;
    let count = |evals: &[Evaluation], status: EvalStatus| {
        evals.iter().filter(|e| e.status == status as i32).count()
    };

    let (on, evals) = drain_a_burst_of_evaluations("on", CHANGES).await;
    let canceled = count(&evals, EvalStatus::Canceled);
    assert!(
        canceled >= 20,
        "only {canceled} of {} canceled",
        evals.len()
    );
    assert_eq!(count(&evals, EvalStatus::Complete) + canceled, CHANGES + 1);
    assert!(evals
        .iter()
        .filter(|e| e.status == EvalStatus::Canceled as i32)
        .all(|e| e.status_description.contains("newer evaluation")));
    let metric = |series: &'static str| on.metric(1, series);
    assert_eq!(
        metric("stampede_evals_cancelled_total").await.unwrap(),
        canceled as f64
    );
    let batches = metric("stampede_eval_cancel_batches_total").await.unwrap();
    assert!((1.0..=3.0).contains(&batches), "{batches} cancel batches");
    assert!(
        metric("stampede_raft_entries_total{type=\"eval_update\"}")
            .await
            .unwrap()
            >= batches
    );
    drop(on);

    let (off, evals) = drain_a_burst_of_evaluations("off", CHANGES).await;
    assert_eq!(count(&evals, EvalStatus::Canceled), 0);
    assert_eq!(count(&evals, EvalStatus::Complete), CHANGES + 1);
    let metric = |series: &'static str| off.metric(1, series);
    assert_eq!(metric("stampede_evals_cancelled_total").await.unwrap(), 0.0);
    assert_eq!(
        metric("stampede_eval_cancel_batches_total").await.unwrap(),
        0.0
    );
    assert!(
        metric("stampede_worker_evals_processed_total")
            .await
            .unwrap()
            >= (CHANGES + 1) as f64
    );
}
