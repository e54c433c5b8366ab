use std::path::Path;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/stampede.proto");
    // Decoding failures are the caller's mistake: see `src/codec.rs`.
    tonic_build::configure()
        .codec_path("crate::codec::ProtoCodec")
        .btree_map(["."])
        .compile_protos(&["proto/stampede.proto"], &["proto"])?;
    git_build_info();
    Ok(())
}

/// The commit this build is of, and whether the checkout had changes to
/// tracked files (`src/build.rs` reads them): "unknown" and not dirty
/// outside a git checkout (a source tarball, a container build context).
///
/// Rerun when HEAD moves (a checkout, or a commit on the branch it names)
/// or the index changes (`git add`, a commit); an edit not yet staged is
/// seen at the next of those, or at the next clean build.
fn git_build_info() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Untracked files (run directories, scratch) are no part of the build.
    // Without optional locks, status does not rewrite the index it reads
    // (which would make the next build run this script again).
    let status = [
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ];
    let dirty = commit != "unknown" && git(&status).is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=STAMPEDE_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=STAMPEDE_GIT_DIRTY={dirty}");
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    watched.push(git(&["rev-parse", "--git-path", "index"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    // A path that does not exist would rerun this script on every build.
    for path in watched.into_iter().flatten() {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// `git ARGS`'s trimmed output, or `None` when git is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
