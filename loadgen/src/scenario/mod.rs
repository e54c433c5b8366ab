//! Capacity scenarios: the fleet, the job stream and the settings to compare,
//! read from TOML. Built-in scenarios live in `loadgen/scenarios/` and are
//! compiled in, so `loadgen capacity --scenario NAME` needs no file.

//!
//! [`model`] is what a scenario says, [`check`] what it may say, and
//! [`built_in`] the scenarios compiled in; loading reads one of those or a
//! file, parses it and checks it.

mod built_in;
mod check;
mod model;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

pub use built_in::BUILT_IN;
pub use model::*;

/// Longest job stream a scenario (or `--duration`) may ask for.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// How many of a variant's slowest jobs `traces.json` keeps stage by stage
/// unless the scenario (`trace_slowest`) or `--trace-slowest` says.
pub const DEFAULT_TRACE_SLOWEST: u32 = 20;
/// The most it may keep.
pub const MAX_TRACE_SLOWEST: u32 = 1000;
/// The most repetitions of a variant a run may ask for (`repeat`, `--repeat`).
pub const MAX_REPEAT: u32 = 100;
/// The most nodesim processes a local fleet is split across (`fleet_processes`).
pub const MAX_FLEET_PROCESSES: u32 = 16;

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("no built-in scenario {0:?} and no such file (built-in: {1})")]
    Unknown(String, String),
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// toml's message names the line, the column and the field.
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {field}: {message}")]
    Invalid {
        origin: String,
        field: String,
        message: String,
    },
}

impl Scenario {
    /// A built-in scenario by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("built-in scenario {name_or_path}"));
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            return Err(ScenarioError::Unknown(
                name_or_path.into(),
                names.join(", "),
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError::Read(path.display().to_string(), e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks a scenario; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: origin.into(),
            message: e.to_string().trim_end().into(),
        })?;
        s.check(origin)?;
        Ok(s)
    }

    /// The scenario with its stream lasting `duration` instead
    /// (`loadgen capacity --duration`), checked again: faults must still
    /// fall within the stream.
    pub fn with_duration(mut self, duration: Duration) -> Result<Self, ScenarioError> {
        self.duration = duration;
        let origin = format!("scenario {} with --duration", self.name);
        self.check(&origin)?;
        Ok(self)
    }
}
