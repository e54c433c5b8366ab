//! The `nodesim` binary on the runtime `--threads` asks for, against a real
//! three-server cluster.

use crate::common;

use std::process::{Command, Stdio};

use common::{args, job, running};
use stampede_launch::testing::{register_job, Harness};

const NODESIM: &str = env!("CARGO_BIN_EXE_nodesim");

#[test]
fn threads_out_of_range_is_refused_by_name() {
    for bad in ["0", "257", "many"] {
        let out = Command::new(NODESIM)
            .args(["--servers", "127.0.0.1:1", "--threads", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "--threads {bad} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--threads"), "--threads {bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_runs_its_allocations_on_one_thread_and_on_several() {
    let (h, _) = Harness::with_leader(3, &[]).await;
    let client = h.client();
    for threads in ["1", "2"] {
        let dc = format!("threads-{threads}");
        let mut fleet = Command::new(NODESIM)
            .args(args(
                &h,
                &[
                    "--threads",
                    threads,
                    "--nodes",
                    "5",
                    "--datacenters",
                    &dc,
                    "--id-prefix",
                    &dc,
                ],
            ))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        register_job(&client, job(&dc, 5, &dc)).await;
        running(&client, &dc, 5).await;
        assert!(
            fleet.try_wait().unwrap().is_none(),
            "nodesim --threads {threads} ended while its allocations ran"
        );
        fleet.kill().unwrap();
        fleet.wait().unwrap();
    }
}
