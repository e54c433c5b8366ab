//! Which build a binary is: the commit it was built from, whether the
//! checkout had uncommitted changes, and the workspace version, embedded at
//! compile time by this crate's build script (every stampede binary links
//! this crate, so all three say the same thing the same way).
//!
//! Each binary serves it on `/metrics` as [`BUILD_INFO_METRIC`] (see
//! [`register`]) and prints it in `--version` ([`LONG_VERSION`]); loadgen
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
    /// Whether tracked files differed from the commit when it was built
    /// (as of the last change to HEAD or the index).
    pub dirty: bool,
    /// The workspace's version (`Cargo.toml`).
    pub version: &'static str,
}

/// This binary's build.
pub const BUILD: Build = Build {
    commit: env!("STAMPEDE_GIT_COMMIT"),
    dirty: is_true(env!("STAMPEDE_GIT_DIRTY")),
    version: env!("CARGO_PKG_VERSION"),
};

/// What `--version` prints after the binary's name: `0.1.0 (commit
/// 0123abc…, dirty)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("STAMPEDE_GIT_COMMIT"),
    ", dirty: ",
    env!("STAMPEDE_GIT_DIRTY"),
    ")"
);

const fn is_true(s: &str) -> bool {
    matches!(s.as_bytes(), b"true")
}

/// Registers [`BUILD_INFO_METRIC`] on `registry`: a gauge of 1 whose
/// labels are this binary's [`BUILD`].
pub fn register(registry: &Registry) {
    let help = "The build this process runs: its commit, whether the checkout had uncommitted changes, and its version (always 1).";
    let gauge = IntGaugeVec::new(
        Opts::new(BUILD_INFO_METRIC, help),
        &["commit", "dirty", "version"],
    )
    .expect("a valid metric");
    let dirty = if BUILD.dirty { "true" } else { "false" };
    gauge
        .with_label_values(&[BUILD.commit, dirty, BUILD.version])
        .set(1);
    crate::metric_defs::register(registry, gauge);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_is_on_metrics_as_one_gauge_with_its_labels() {
        let registry = Registry::new();
        register(&registry);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        let dirty = if BUILD.dirty { "true" } else { "false" };
        let line = format!(
            "{BUILD_INFO_METRIC}{{commit=\"{}\",dirty=\"{dirty}\",version=\"{}\"}} 1",
            BUILD.commit, BUILD.version
        );
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        assert!(!BUILD.commit.is_empty());
        assert!(LONG_VERSION.starts_with(BUILD.version), "{LONG_VERSION}");
        assert!(LONG_VERSION.contains(BUILD.commit), "{LONG_VERSION}");
    }
}
