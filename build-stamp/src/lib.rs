//! For the build scripts of the packages with a binary (cluster, nodesim,
//! loadgen): the commit the build is of and whether the checkout's tracked
//! files differed from it, handed to the package's code as
//! `STAMPEDE_GIT_COMMIT` and `STAMPEDE_GIT_DIRTY` (read by
//! `stampede_proto::this_build!`).
//!
//! Each package stamps itself, watching the sources its binary is built
//! from: the stamp is taken again exactly when the binary is rebuilt from
//! changed sources, so it says what that build was made of, and a commit
//! or a `git add` rebuilds nothing. A binary built from a dirty tree that
//! was committed afterwards still says "dirty" at the commit before: true
//! of that build.

use std::path::Path;
use std::process::Command;

/// Prints the stamp for cargo, and asks cargo to take it again when any
/// of `watched` (paths relative to the package, directories included
/// with everything under them) changes.
pub fn emit(watched: &[&str]) {
    for line in stamp(watched) {
        println!("{line}");
    }
}

/// The lines [`emit`] prints: the commit and dirty flag as variables of
/// the package's build, then what makes cargo take the stamp again.
pub fn stamp(watched: &[&str]) -> Vec<String> {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Untracked files (run directories, scratch) are no part of the build.
    // Without optional locks, status does not rewrite the index it reads.
    let status = [
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ];
    let dirty = commit != "unknown" && git(&status).is_some_and(|s| !s.is_empty());
    let mut lines = vec![
        format!("cargo:rustc-env=STAMPEDE_GIT_COMMIT={commit}"),
        format!("cargo:rustc-env=STAMPEDE_GIT_DIRTY={dirty}"),
        "cargo:rerun-if-changed=build.rs".to_string(),
    ];
    // A path that does not exist would rerun the script on every build.
    lines.extend(
        (watched.iter())
            .filter(|p| Path::new(p).exists())
            .map(|path| format!("cargo:rerun-if-changed={path}")),
    );
    lines
}

/// `git ARGS`'s trimmed output, or `None` when git is missing or fails
/// (a source tarball, a container build context: the commit is "unknown").
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
