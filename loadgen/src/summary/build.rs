//! Which builds a run ran: `summary.json`'s `build` (the run's, which is
//! its first variant's) and each variant's `build`. A variant may run
//! another build of `cluster` and `nodesim` than the one beside loadgen
//! (`bin_dir`, `git_rev`), so each is read from what the processes
//! themselves served on `/metrics` (`stampede_build_info`), not from the
//! checkout loadgen was started in; loadgen's own is its constant.

use serde::{Deserialize, Serialize};
use stampede_proto::build::{Build, BUILD_INFO_METRIC};
use stampede_proto::Binary;

use crate::sampler::{label, Series};

/// One binary's build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct BuildInfo {
    /// The commit it was built from ("unknown" outside a git checkout).
    pub commit: String,
    /// Whether its checkout had uncommitted changes to tracked files.
    pub dirty: bool,
    /// The workspace version it was built as.
    pub version: String,
}

impl From<Build> for BuildInfo {
    fn from(b: Build) -> Self {
        BuildInfo {
            commit: b.commit.to_string(),
            dirty: b.dirty,
            version: b.version.to_string(),
        }
    }
}

impl BuildInfo {
    /// The commit's first 12 characters, and `+dirty` when it had changes:
    /// how a terminal line names it.
    pub fn short(&self) -> String {
        let commit: String = self.commit.chars().take(12).collect();
        match self.dirty {
            true => format!("{commit}+dirty"),
            false => commit,
        }
    }
}

/// The build of each binary of a run; null for a process that did not
/// serve one (a build older than the metric, or no sample of it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Builds {
    pub cluster: Option<BuildInfo>,
    pub nodesim: Option<BuildInfo>,
    pub loadgen: Option<BuildInfo>,
}

impl Builds {
    /// The builds the samples show: the first server's (a process serving
    /// the raft term) as the cluster's, the first nodesim's, and
    /// `loadgen`'s own.
    pub fn of(series: &[Series], loadgen: BuildInfo) -> Builds {
        let first = |is: &dyn Fn(&Series) -> bool| series.iter().filter(|s| is(s)).find_map(served);
        Builds {
            cluster: first(&|s| s.is(Binary::Cluster)),
            nodesim: first(&|s| s.is(Binary::Nodesim)),
            loadgen: Some(loadgen),
        }
    }

    /// One line: `cluster 0123abcd4567+dirty, nodesim …, loadgen …`.
    pub fn line(&self) -> String {
        if *self == Builds::default() {
            return "no recorded build".into();
        }
        let one = |name: &str, b: &Option<BuildInfo>| match b {
            Some(b) => format!("{name} {}", b.short()),
            None => format!("{name} unknown"),
        };
        [
            one("cluster", &self.cluster),
            one("nodesim", &self.nodesim),
            one("loadgen", &self.loadgen),
        ]
        .join(", ")
    }
}

/// The build a process served in its last sample that had one.
fn served(s: &Series) -> Option<BuildInfo> {
    s.points.iter().rev().find_map(|p| {
        let name = p
            .values
            .keys()
            .find(|k| k.split('{').next() == Some(BUILD_INFO_METRIC))?;
        Some(BuildInfo {
            commit: label(name, "commit")?.to_string(),
            dirty: label(name, "dirty")? == "true",
            version: label(name, "version").unwrap_or_default().to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{parse, Point, Target};

    fn process(name: &str, metrics: &str) -> Series {
        Series {
            target: Target {
                name: name.into(),
                url: String::new(),
                binary: None,
            },
            points: vec![Point {
                t: 1.0,
                values: parse(metrics),
            }],
            lost_at: None,
            last_text: None,
        }
    }

    #[test]
    fn each_binarys_build_is_what_its_process_served() {
        let series = [
            process("loadgen", "stampede_loadgen_late_total 0\n"),
            process(
                "server-1",
                "stampede_raft_term 3\nstampede_build_info{commit=\"aaa\",dirty=\"true\",version=\"0.1.0\"} 1\n",
            ),
            process(
                "nodesim",
                "stampede_nodesim_nodes{state=\"ready\"} 5\nstampede_build_info{commit=\"bbb\",dirty=\"false\",version=\"0.1.0\"} 1\n",
            ),
        ];
        let own = BuildInfo {
            commit: "ccc".into(),
            dirty: false,
            version: "0.2.0".into(),
        };
        let b = Builds::of(&series, own.clone());
        let cluster = b.cluster.as_ref().unwrap();
        assert_eq!((cluster.commit.as_str(), cluster.dirty), ("aaa", true));
        let nodesim = b.nodesim.as_ref().unwrap();
        assert_eq!((nodesim.commit.as_str(), nodesim.dirty), ("bbb", false));
        assert_eq!(b.loadgen, Some(own));
        assert_eq!(b.line(), "cluster aaa+dirty, nodesim bbb, loadgen ccc");
    }

    #[test]
    fn a_process_that_serves_no_build_has_none() {
        let series = [process("server-1", "stampede_raft_term 3\n")];
        let own = BuildInfo {
            commit: "ccc".into(),
            ..Default::default()
        };
        let b = Builds::of(&series, own);
        assert_eq!((&b.cluster, &b.nodesim), (&None, &None));
        assert_eq!(b.line(), "cluster unknown, nodesim unknown, loadgen ccc");
        assert_eq!(Builds::default().line(), "no recorded build");
    }
}
