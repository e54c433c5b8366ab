//! Which build a binary is: the commit it was built from, whether the
//! checkout had uncommitted changes, and the workspace version, stamped at
//! compile time by the build script of each package with a binary
//! (`stampede-build-stamp`) and read with [`this_build!`] and
//! [`long_version!`], so that all three say it the same way.
//!
//! Each binary serves it on `/metrics` as [`BUILD_INFO_METRIC`] (see
//! [`register`]) and prints it in `--version`; loadgen
//! reads the servers' and nodesim's from their `/metrics`, so a run's
//! `summary.json` says which builds ran, even of a remote cluster.

use prometheus::{IntGaugeVec, Opts, Registry};

/// `stampede_build_info{commit="…",dirty="true|false",version="…"} 1`.
pub const BUILD_INFO_METRIC: &str = "stampede_build_info";

/// A binary's build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Build {
    /// The full commit id, or "unknown" when built outside a git checkout.
    pub commit: &'static str,
    /// Whether tracked files differed from the commit when it was built.
    pub dirty: bool,
    /// The workspace's version (`Cargo.toml`).
    pub version: &'static str,
}

/// The build of the package this is expanded in, as its build script
/// stamped it (`stampede-build-stamp`): a `const` [`Build`].
#[macro_export]
macro_rules! this_build {
    () => {
        $crate::build::Build {
            commit: env!("STAMPEDE_GIT_COMMIT"),
            dirty: $crate::build::is_true(env!("STAMPEDE_GIT_DIRTY")),
            version: env!("CARGO_PKG_VERSION"),
        }
    };
}

/// What `--version` prints after the binary's name, for the package this
/// is expanded in: `0.1.0 (commit 0123abc…, dirty: false)`.
#[macro_export]
macro_rules! long_version {
    () => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (commit ",
            env!("STAMPEDE_GIT_COMMIT"),
            ", dirty: ",
            env!("STAMPEDE_GIT_DIRTY"),
            ")"
        )
    };
}

/// Whether a stamp's "true"/"false" says true.
pub const fn is_true(s: &str) -> bool {
    matches!(s.as_bytes(), b"true")
}

/// Registers [`BUILD_INFO_METRIC`] on `registry`: a gauge of 1 whose
/// labels are `build`'s.
pub fn register(registry: &Registry, build: Build) {
    let help = "The build this process runs: its commit, whether the checkout had uncommitted changes, and its version (always 1).";
    let gauge = IntGaugeVec::new(
        Opts::new(BUILD_INFO_METRIC, help),
        &["commit", "dirty", "version"],
    )
    .expect("a valid metric");
    let dirty = if build.dirty { "true" } else { "false" };
    gauge
        .with_label_values(&[build.commit, dirty, build.version])
        .set(1);
    crate::metric_defs::register(registry, gauge);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_is_on_metrics_as_one_gauge_with_its_labels() {
        let build = Build {
            commit: "0123abc",
            dirty: true,
            version: "9.9.9",
        };
        let registry = Registry::new();
        register(&registry, build);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        let line =
            format!("{BUILD_INFO_METRIC}{{commit=\"0123abc\",dirty=\"true\",version=\"9.9.9\"}} 1");
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        assert!(is_true("true") && !is_true("false") && !is_true("yes"));
    }
}
