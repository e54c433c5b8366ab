//! Where nodesim finds the servers: `--address`, or STAMPEDE_ADDRESS as
//! `cluster`'s commands and loadgen read it, and `--servers`, the flag's
//! old name, still taken.

use std::process::Command;

use stampede_launch::testing::Harness;
use stampede_proto::address::ADDRESS_ENV;
use stampede_proto::security::Role;

const NODESIM: &str = env!("CARGO_BIN_EXE_nodesim");

/// nodesim with the harness's client identity in the environment (as
/// `cluster dev`'s export line gives it) and no address of any kind.
fn nodesim(h: &Harness) -> Command {
    let mut cmd = Command::new(NODESIM);
    cmd.env_remove(ADDRESS_ENV)
        .envs(h.client_env(Role::Client).unwrap())
        .args(["--nodes", "3", "--duration", "2s"]);
    cmd
}

fn registered(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_finds_the_servers_in_the_variable_or_under_either_flag_name() {
    let (h, _) = Harness::with_leader(1, &[]).await;
    let addrs = h.rpc_addrs().join(",");
    let from_env = nodesim(&h).env(ADDRESS_ENV, &addrs).output().unwrap();
    assert!(registered(&from_env).contains("3 registrations"));
    for flag in ["--address", "--servers"] {
        // The flag wins over a variable that points nowhere.
        let out = nodesim(&h)
            .env(ADDRESS_ENV, "127.0.0.1:1")
            .args([flag, &addrs])
            .output()
            .unwrap();
        assert!(registered(&out).contains("3 registrations"), "{flag}");
    }
}

#[test]
fn a_bad_or_missing_address_is_refused_naming_the_flag_and_the_variable() {
    let bad_env = Command::new(NODESIM)
        .env(ADDRESS_ENV, "no-port")
        .output()
        .unwrap();
    let bad_flag = Command::new(NODESIM)
        .env_remove(ADDRESS_ENV)
        .args(["--servers", "no-port"])
        .output()
        .unwrap();
    for out in [bad_env, bad_flag] {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no-port") && err.contains("--address") && err.contains(ADDRESS_ENV),
            "{err}"
        );
    }
    let none = Command::new(NODESIM)
        .env_remove(ADDRESS_ENV)
        .output()
        .unwrap();
    assert!(!none.status.success());
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("--address"), "{err}");
}
