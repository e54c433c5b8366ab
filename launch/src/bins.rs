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
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    };
    Some(target.join(profile))
}
