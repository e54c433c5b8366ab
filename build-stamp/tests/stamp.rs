//! The stamp taken in this checkout: the commit git names, and a rerun
//! only on the watched paths that exist.
//!
//! Also the smallest test target of the workspace: `scripts/build.sh`
//! builds it beside the binaries so that cargo resolves features as the
//! test build does (see there).

use std::process::Command;

use stampede_build_stamp::stamp;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn the_stamp_names_this_checkouts_commit_and_watches_only_what_exists() {
    // Tests run in the package's directory: src/ exists, the other does not.
    let lines = stamp(&["src", "no-such-dir"]);
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    assert_eq!(
        lines[0],
        format!("cargo:rustc-env=STAMPEDE_GIT_COMMIT={commit}")
    );
    let dirty = lines[1]
        .strip_prefix("cargo:rustc-env=STAMPEDE_GIT_DIRTY=")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(dirty == "true" || dirty == "false", "{lines:?}");
    if commit == "unknown" {
        assert_eq!(dirty, "false", "no commit, nothing to differ from");
    }
    assert_eq!(
        lines[2..],
        [
            "cargo:rerun-if-changed=build.rs",
            "cargo:rerun-if-changed=src"
        ]
    );
}
