//! The workspace's binaries: where a built one is, and what a `cluster`
//! binary (perhaps another build's) takes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::LaunchError;

/// What `bin serve --help` prints: the flags that server takes.
pub(crate) fn serve_help(bin: &Path) -> Result<String, LaunchError> {
    let help = Command::new(bin)
        .args(["serve", "--help"])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LaunchError::Spawn {
            bin: bin.to_path_buf(),
            source,
        })?;
    Ok(String::from_utf8_lossy(&help.stdout).into_owned())
}

/// A binary of this workspace built beside the running executable: in the
/// same dir (a binary), or one up (a test or bench under `deps/`). A test or
/// bench runs from cargo's build directory (`.cargo/config.toml`), while the
/// binaries are copied into the target directory, so that is looked at next:
/// `$CARGO_TARGET_DIR`, else the workspace's `target/`, in the same profile.
pub fn sibling_bin(name: &str) -> Result<PathBuf, LaunchError> {
    let exe = std::env::current_exe().map_err(|e| LaunchError::Io(PathBuf::from(name), e))?;
    let beside = exe.ancestors().skip(1).take(2).map(|dir| dir.join(name));
    let in_target = target_profile_dir(&exe).map(|dir| dir.join(name));
    beside
        .chain(in_target)
        .find(|candidate| candidate.is_file())
        .ok_or(LaunchError::MissingBin {
            name: name.into(),
            near: exe,
        })
}

/// The target directory's folder for the profile `exe` was built in (the
/// name of the folder above `deps/`, e.g. `debug` or `release`).
fn target_profile_dir(exe: &Path) -> Option<PathBuf> {
    let profile = exe
        .ancestors()
        .skip(1)
        .find(|dir| dir.file_name().is_some_and(|n| n == "deps"))?
        .parent()?
        .file_name()?
        .to_owned();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace_root().join("target"),
    };
    Some(target.join(profile))
}

/// The workspace this run belongs to: above the package that cargo says it
/// runs (`CARGO_MANIFEST_DIR` at run time, set by `cargo test`, nextest and
/// `cargo bench`), else above this crate as it was compiled. The build
/// directory is shared by every clone (`.cargo/config.toml`), so a library
/// compiled in another clone may be the one linked here: the path it was
/// compiled at can name a clone that is not this one, or none any more.
fn workspace_root() -> PathBuf {
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    package
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .map_or_else(|| package.join(".."), Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_root_is_found_from_the_package_cargo_runs() {
        // cargo and nextest set CARGO_MANIFEST_DIR for the test process.
        let package = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
        let root = workspace_root();
        assert!(root.join("Cargo.lock").is_file(), "{}", root.display());
        assert_eq!(package.parent(), Some(root.as_path()));
    }
}
