//! Which `cluster` and `nodesim` each variant runs: those beside loadgen,
//! another build's directory (`bin_dir`, `--variant-bin NAME=DIR`), or a
//! git revision built here (`git_rev`). Two builds are then two variants of
//! one run, interleaved round by round like two settings, instead of two
//! runs on a machine that drifts between them.
//!
//! A revision is checked out once into a worktree of its own under
//! [`builds_root`] and built there with the profile loadgen itself was
//! built with; its binaries are reused by later runs. Its build has a build
//! directory of its own too: cargo names a workspace's artifacts by their
//! path inside the workspace, so two checkouts sharing one would take each
//! other's compiled crates for up to date.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use stampede_launch::sibling_bin;

use super::error::CapacityError;
use super::options::CapacityOpts;
use crate::scenario::{Scenario, Variant};
use crate::summary::Binaries;

/// The binaries a variant's processes run.
pub const BINARIES: [&str; 2] = ["cluster", "nodesim"];

/// Where the binary `name` of variant `v` is: in its `bin_dir` (set for a
/// `git_rev` by [`resolve`]), else beside loadgen.
pub(super) fn bin(v: &Variant, name: &str) -> Result<PathBuf, CapacityError> {
    match &v.bin_dir {
        Some(dir) => Ok(dir.join(name)),
        None => Ok(sibling_bin(name)?),
    }
}

/// Applies `--variant-bin`, builds every `git_rev` and checks every
/// variant's directory: afterwards each variant that names its own build
/// has a `bin_dir` holding both binaries. Returns what each such variant
/// runs, by name, for the summary.
pub(super) fn resolve(
    scenario: &mut Scenario,
    opts: &CapacityOpts,
    out: &Path,
) -> Result<BTreeMap<String, Binaries>, CapacityError> {
    if !opts.variant_bins.is_empty() && scenario.variants.is_empty() && scenario.sweep.is_none() {
        // The one variant a scenario without variants runs, named for it.
        scenario.variants = scenario.runs();
    }
    for (name, dir) in &opts.variant_bins {
        let names: Vec<String> = scenario.runs().into_iter().map(|v| v.name).collect();
        let Some(v) = scenario.variants.iter_mut().find(|v| &v.name == name) else {
            return Err(CapacityError::NoVariant(name.clone(), names.join(", ")));
        };
        v.bin_dir = Some(dir.clone());
        v.git_rev = None;
    }
    let mut found = BTreeMap::new();
    for v in scenario.variants.iter_mut() {
        if v.bin_dir.is_none() && v.git_rev.is_none() {
            continue;
        }
        if !opts.servers.is_empty() {
            return Err(CapacityError::BinariesNeedLocal(
                v.name.clone(),
                opts.address_source(),
            ));
        }
        let mut commit = None;
        if let Some(rev) = &v.git_rev {
            let file = Path::new(&opts.scenario);
            let file = file.is_file().then_some(file);
            let (hash, dir) = build_rev(&v.name, rev, file, out)?;
            commit = Some(hash);
            v.bin_dir = Some(dir);
        }
        let dir = v.bin_dir.clone().expect("set above");
        let dir = check_dir(&v.name, &dir)?;
        v.bin_dir = Some(dir.clone());
        found.insert(
            v.name.clone(),
            Binaries {
                dir: dir.display().to_string(),
                git_rev: v.git_rev.clone(),
                commit,
            },
        );
    }
    Ok(found)
}

/// `dir`, made absolute, once it holds an executable `cluster` and `nodesim`.
fn check_dir(variant: &str, dir: &Path) -> Result<PathBuf, CapacityError> {
    let bad = |path: &Path, why: String| CapacityError::VariantBin {
        variant: variant.into(),
        path: path.to_path_buf(),
        why,
    };
    let abs = std::fs::canonicalize(dir).map_err(|e| bad(dir, format!("not a directory: {e}")))?;
    if !abs.is_dir() {
        return Err(bad(dir, "not a directory".into()));
    }
    for name in BINARIES {
        let path = abs.join(name);
        let meta = std::fs::metadata(&path).map_err(|_| {
            bad(
                dir,
                format!("no {name} in it (it needs both cluster and nodesim of one build)"),
            )
        })?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(bad(&path, "not an executable file".into()));
        }
    }
    Ok(abs)
}

/// Where revisions are checked out and built: `$STAMPEDE_BUILDS`, or
/// `$XDG_CACHE_HOME/stampede/builds`, or `~/.cache/stampede/builds`.
pub fn builds_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("STAMPEDE_BUILDS") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("stampede").join("builds")
}

/// The profile loadgen was built with, which a revision is built with too.
fn profile() -> &'static str {
    match cfg!(debug_assertions) {
        true => "debug",
        false => "release",
    }
}

/// Checks out and builds revision `rev` of the repository loadgen runs in
/// ([`repository`]) once (a finished build is reused), logging the build
/// under `out`.
/// Returns the commit and the directory holding its binaries.
fn build_rev(
    variant: &str,
    rev: &str,
    scenario_file: Option<&Path>,
    out: &Path,
) -> Result<(String, PathBuf), CapacityError> {
    let fail = |why: String| CapacityError::GitRev {
        variant: variant.into(),
        rev: rev.into(),
        why,
    };
    let repo = repository(scenario_file).ok_or_else(|| {
        fail("loadgen builds a revision of the git repository it runs in or was built in, and found neither (run it inside a clone, or give the variant a bin_dir)".into())
    })?;
    let commit = git(
        Some(Path::new(&repo)),
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|_| fail(format!("no such revision in {repo}")))?;
    let root = builds_root();
    let tree = root.join(&commit);
    let bins = tree.join("target").join(profile());
    let done = bins.join(".stampede-built");
    if done.is_file() {
        eprintln!(
            "loadgen: variant {variant}: {rev} ({}) already built in {}",
            &commit[..12],
            bins.display()
        );
        return Ok((commit, bins));
    }
    std::fs::create_dir_all(&root)
        .map_err(|e| fail(format!("cannot create {}: {e}", root.display())))?;
    check_out(&repo, &commit, &tree).map_err(fail)?;
    std::fs::create_dir_all(out).map_err(|e| CapacityError::Write(out.into(), e))?;
    let log_path = out.join(format!("build-{}.log", &commit[..12]));
    eprintln!(
        "loadgen: variant {variant}: building {rev} ({}) in {} ({} profile; log {}; the first build of a revision compiles its dependencies too)",
        &commit[..12],
        tree.display(),
        profile(),
        log_path.display()
    );
    cargo_build(&tree, &root.join("build-dir"), &log_path, &fail)?;
    std::fs::write(&done, &commit).map_err(|e| CapacityError::Write(done.clone(), e))?;
    Ok((commit, bins))
}

/// Checks `commit` of `repo` out into `tree` (unless a checkout is there),
/// its files newer than every artifact of the shared build directory.
fn check_out(repo: &str, commit: &str, tree: &Path) -> Result<(), String> {
    if !tree.join("Cargo.toml").is_file() {
        let _ = std::fs::remove_dir_all(tree);
        git(
            Some(Path::new(repo)),
            &[
                "worktree",
                "add",
                "--detach",
                &tree.display().to_string(),
                commit,
            ],
        )
        .map_err(|e| format!("cannot check it out into {}: {e}", tree.display()))?;
    }
    // A checkout newer than every artifact of the shared build directory:
    // its crates are compiled, never taken from another revision's build.
    let _ = Command::new("find")
        .arg(tree)
        .args([
            "-path",
            &tree.join("target").display().to_string(),
            "-prune",
            "-o",
            "-type",
            "f",
            "-exec",
            "touch",
            "{}",
            "+",
        ])
        .status();
    Ok(())
}

/// Builds the `cluster` and `nodesim` of the checkout in `tree`, in
/// loadgen's own profile, with its output in `log_path`.
fn cargo_build(
    tree: &Path,
    build_dir: &Path,
    log_path: &Path,
    fail: &dyn Fn(String) -> CapacityError,
) -> Result<(), CapacityError> {
    let log = std::fs::File::create(log_path)
        .map_err(|e| CapacityError::Write(log_path.to_path_buf(), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| CapacityError::Write(log_path.to_path_buf(), e))?;
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(tree)
        .args(["build", "--bin", "cluster", "--bin", "nodesim"])
        .env("CARGO_TARGET_DIR", tree.join("target"))
        .env("CARGO_BUILD_BUILD_DIR", build_dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    if profile() == "release" {
        cargo.arg("--release");
    }
    let status = cargo
        .status()
        .map_err(|e| fail(format!("cannot run cargo: {e}")))?;
    if !status.success() {
        return Err(fail(format!(
            "cargo build failed ({status}); see {}",
            log_path.display()
        )));
    }
    Ok(())
}

/// The git repository a revision is taken from: the one loadgen runs in,
/// else the one holding the scenario file, else the one its own binary was
/// built in (`target/release/loadgen` of a clone), so that a run started
/// from elsewhere still finds it.
fn repository(scenario_file: Option<&Path>) -> Option<String> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let file_dir = (scenario_file.and_then(Path::parent))
        .filter(|d| d.is_dir())
        .map(Path::to_path_buf);
    [None, file_dir, exe_dir]
        .into_iter()
        .find_map(|dir| git(dir.as_deref(), &["rev-parse", "--show-toplevel"]).ok())
}

/// `git ARGS` (in `dir`), its trimmed output, or what it printed on failure.
fn git(dir: Option<&Path>, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new("git");
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> CapacityOpts {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            opts: CapacityOpts,
        }
        Cli::parse_from(["capacity"].iter().chain(args)).opts
    }

    #[test]
    fn a_variant_bin_must_name_a_variant_and_a_directory_with_both_binaries() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let mut s = Scenario::load("client-updates").unwrap();
        let err = resolve(&mut s, &opts(&["--variant-bin", "nope=/tmp"]), &out).unwrap_err();
        assert!(
            err.to_string().contains("no such variant") && err.to_string().contains("legacy"),
            "{err}"
        );
        let dir = tmp.path().join("bins");
        std::fs::create_dir_all(&dir).unwrap();
        let arg = format!("legacy={}", dir.display());
        let err = resolve(&mut s, &opts(&["--variant-bin", &arg]), &out).unwrap_err();
        assert!(err.to_string().contains("no cluster in it"), "{err}");
        for name in BINARIES {
            std::fs::write(dir.join(name), "#!/bin/sh\n").unwrap();
        }
        let err = resolve(&mut s, &opts(&["--variant-bin", &arg]), &out).unwrap_err();
        assert!(err.to_string().contains("not an executable"), "{err}");
        for name in BINARIES {
            std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let found = resolve(&mut s, &opts(&["--variant-bin", &arg]), &out).unwrap();
        let canonical = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(found["legacy"].dir, canonical.display().to_string());
        let legacy = s.runs().into_iter().find(|v| v.name == "legacy").unwrap();
        assert_eq!(bin(&legacy, "nodesim").unwrap(), canonical.join("nodesim"));
        assert!(
            !found.contains_key("prioritized"),
            "the other runs loadgen's own"
        );
    }

    #[test]
    fn a_revision_that_does_not_exist_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = Scenario::load("client-updates").unwrap();
        s.variants[1].git_rev = Some("no-such-revision-anywhere".into());
        let err = resolve(&mut s, &opts(&[]), tmp.path()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("git_rev no-such-revision-anywhere") && text.contains("prioritized"),
            "{text}"
        );
    }
}
