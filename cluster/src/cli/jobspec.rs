//! Job files: the JSON an operator writes and `cluster job run` sends.
//!
//! The file is a plain mirror of the wire `Job` with friendlier spellings
//! (`"type": "service"`, `"operand": "!="`, durations as `"10s"`). Parsing
//! checks only the shape, so every mistake there is reported with its line and
//! column; whether the values make sense is [`crate::model::validate::job`]'s call, the
//! same check the server runs.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use stampede_proto::{
    Constraint, ConstraintOperand, ConstraintTarget, Job, JobType, Resources, TaskGroup,
    UpdateStrategy,
};

/// The defaults of a job file are the server's for a request that leaves
/// the field out.
pub use crate::model::validate::{DEFAULT_COUNT, DEFAULT_PRIORITY};
/// Allocations replaced at a time when an update block does not say.
pub const DEFAULT_MAX_PARALLEL: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum JobSpecError {
    /// Bad JSON, a wrong type, or an unknown field; serde_json's message names
    /// the line and column.
    #[error("job file: {0}")]
    Json(#[from] serde_json::Error),
}

/// Reads a JSON job file into the wire `Job`. Only the shape is checked here;
/// call [`crate::model::validate::job`] for the values.
pub fn parse_job(text: &str) -> Result<Job, JobSpecError> {
    let file: JobFile = serde_json::from_str(text)?;
    Ok(file.into())
}

/// The job in the job file's shape: what `--json` prints, and what
/// [`parse_job`] reads back to the same job spec.
pub fn job_to_json(job: &Job) -> serde_json::Value {
    serde_json::to_value(JobFile::from(job)).expect("a job file always serializes")
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    job_type: Option<JobTypeName>,
    #[serde(default = "default_priority")]
    priority: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    datacenters: Vec<String>,
    #[serde(default)]
    task_groups: Vec<GroupFile>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    #[serde(default)]
    name: String,
    #[serde(default = "default_count")]
    count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resources: Option<ResourcesFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    constraints: Vec<ConstraintFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    update: Option<UpdateFile>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    meta: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourcesFile {
    #[serde(default)]
    cpu_mhz: u64,
    #[serde(default)]
    memory_mb: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConstraintFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<TargetName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operand: Option<OperandName>,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateFile {
    #[serde(default = "default_max_parallel")]
    max_parallel: u32,
    #[serde(default)]
    canary: u32,
    #[serde(default, with = "millis")]
    min_healthy_time: u64,
    #[serde(default, with = "millis")]
    progress_deadline: u64,
    #[serde(default)]
    auto_promote: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum JobTypeName {
    Service,
    Batch,
    System,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TargetName {
    Datacenter,
    NodeClass,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum OperandName {
    #[serde(rename = "=")]
    Equal,
    #[serde(rename = "!=")]
    NotEqual,
}

fn default_priority() -> u32 {
    DEFAULT_PRIORITY
}

fn default_count() -> u32 {
    DEFAULT_COUNT
}

fn default_max_parallel() -> u32 {
    DEFAULT_MAX_PARALLEL
}

/// Durations are written as humantime strings (`"10s"`, `"1m 30s"`) and kept
/// in milliseconds on the wire.
mod millis {
    use super::*;

    pub fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(Duration::from_millis(*ms)).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = String::deserialize(d)?;
        let duration = humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "{text:?} is not a duration like \"10s\" or \"1m 30s\": {e}"
            ))
        })?;
        u64::try_from(duration.as_millis())
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is too long a duration")))
    }
}

impl From<JobFile> for Job {
    fn from(f: JobFile) -> Self {
        Job {
            id: f.id,
            r#type: f.job_type.map_or(JobType::Unspecified, |t| match t {
                JobTypeName::Service => JobType::Service,
                JobTypeName::Batch => JobType::Batch,
                JobTypeName::System => JobType::System,
            }) as i32,
            priority: f.priority,
            datacenters: f.datacenters,
            task_groups: f.task_groups.into_iter().map(TaskGroup::from).collect(),
            ..Default::default()
        }
    }
}

impl From<GroupFile> for TaskGroup {
    fn from(g: GroupFile) -> Self {
        TaskGroup {
            name: g.name,
            count: Some(g.count),
            resources: g.resources.map(|r| Resources {
                cpu_mhz: r.cpu_mhz,
                memory_mb: r.memory_mb,
            }),
            constraints: g
                .constraints
                .into_iter()
                .map(|c| Constraint {
                    target: c.target.map_or(ConstraintTarget::Unspecified, |t| match t {
                        TargetName::Datacenter => ConstraintTarget::Datacenter,
                        TargetName::NodeClass => ConstraintTarget::NodeClass,
                    }) as i32,
                    operand: c
                        .operand
                        .map_or(ConstraintOperand::Unspecified, |o| match o {
                            OperandName::Equal => ConstraintOperand::Equal,
                            OperandName::NotEqual => ConstraintOperand::NotEqual,
                        }) as i32,
                    value: c.value,
                })
                .collect(),
            update: g.update.map(|u| UpdateStrategy {
                max_parallel: u.max_parallel,
                canary: u.canary,
                min_healthy_time_ms: u.min_healthy_time,
                auto_promote: u.auto_promote,
                progress_deadline_ms: u.progress_deadline,
            }),
            meta: g.meta.into_iter().collect(),
            spec_version: 0,
        }
    }
}

impl From<&Job> for JobFile {
    fn from(job: &Job) -> Self {
        JobFile {
            id: job.id.clone(),
            job_type: match JobType::try_from(job.r#type) {
                Ok(JobType::Service) => Some(JobTypeName::Service),
                Ok(JobType::Batch) => Some(JobTypeName::Batch),
                Ok(JobType::System) => Some(JobTypeName::System),
                _ => None,
            },
            priority: job.priority,
            datacenters: job.datacenters.clone(),
            task_groups: job.task_groups.iter().map(GroupFile::from).collect(),
        }
    }
}

impl From<&TaskGroup> for GroupFile {
    fn from(g: &TaskGroup) -> Self {
        GroupFile {
            name: g.name.clone(),
            count: g.count(),
            resources: g.resources.as_ref().map(|r| ResourcesFile {
                cpu_mhz: r.cpu_mhz,
                memory_mb: r.memory_mb,
            }),
            constraints: g
                .constraints
                .iter()
                .map(|c| ConstraintFile {
                    target: match ConstraintTarget::try_from(c.target) {
                        Ok(ConstraintTarget::Datacenter) => Some(TargetName::Datacenter),
                        Ok(ConstraintTarget::NodeClass) => Some(TargetName::NodeClass),
                        _ => None,
                    },
                    operand: match ConstraintOperand::try_from(c.operand) {
                        Ok(ConstraintOperand::Equal) => Some(OperandName::Equal),
                        Ok(ConstraintOperand::NotEqual) => Some(OperandName::NotEqual),
                        _ => None,
                    },
                    value: c.value.clone(),
                })
                .collect(),
            update: g.update.as_ref().map(|u| UpdateFile {
                max_parallel: u.max_parallel,
                canary: u.canary,
                min_healthy_time: u.min_healthy_time_ms,
                progress_deadline: u.progress_deadline_ms,
                auto_promote: u.auto_promote,
            }),
            meta: g.meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = r#"{"id":"web","type":"service","task_groups":[{"name":"web","count":50,"update":{"max_parallel":2},"meta":{"v":"1"},"resources":{"cpu_mhz":100,"memory_mb":64}}]}"#;

    #[test]
    fn reads_the_contract_job() {
        let job = parse_job(CONTRACT).unwrap();
        assert_eq!(job.id, "web");
        assert_eq!(job.r#type, JobType::Service as i32);
        assert_eq!(job.priority, DEFAULT_PRIORITY);
        let g = &job.task_groups[0];
        assert_eq!((g.name.as_str(), g.count), ("web", Some(50)));
        assert_eq!(
            g.resources,
            Some(Resources {
                cpu_mhz: 100,
                memory_mb: 64
            })
        );
        assert_eq!(g.update.as_ref().unwrap().max_parallel, 2);
        assert_eq!(g.meta.get("v").map(String::as_str), Some("1"));
        crate::model::validate::job(Some(&job)).unwrap();
    }

    #[test]
    fn reads_every_field() {
        let job = parse_job(
            r#"{
              "id": "api", "type": "service", "priority": 70, "datacenters": ["dc1", "dc2"],
              "task_groups": [{
                "name": "api", "count": 3,
                "resources": {"cpu_mhz": 250, "memory_mb": 128},
                "constraints": [
                  {"target": "datacenter", "operand": "=", "value": "dc1"},
                  {"target": "node_class", "operand": "!=", "value": "gpu"}
                ],
                "update": {"max_parallel": 1, "canary": 1, "min_healthy_time": "10s",
                           "progress_deadline": "5m", "auto_promote": true}
              }]
            }"#,
        )
        .unwrap();
        assert_eq!(job.priority, 70);
        assert_eq!(job.datacenters, ["dc1", "dc2"]);
        let g = &job.task_groups[0];
        assert_eq!(
            g.constraints,
            [
                Constraint {
                    target: ConstraintTarget::Datacenter as i32,
                    operand: ConstraintOperand::Equal as i32,
                    value: "dc1".into()
                },
                Constraint {
                    target: ConstraintTarget::NodeClass as i32,
                    operand: ConstraintOperand::NotEqual as i32,
                    value: "gpu".into()
                },
            ]
        );
        assert_eq!(
            g.update,
            Some(UpdateStrategy {
                max_parallel: 1,
                canary: 1,
                min_healthy_time_ms: 10_000,
                auto_promote: true,
                progress_deadline_ms: 300_000,
            })
        );
    }

    #[test]
    fn fills_defaults() {
        let job =
            parse_job(r#"{"id":"b","type":"batch","task_groups":[{"name":"g","update":{}}]}"#)
                .unwrap();
        assert_eq!(job.priority, DEFAULT_PRIORITY);
        let g = &job.task_groups[0];
        assert_eq!(g.count, Some(DEFAULT_COUNT));
        assert_eq!(
            g.update.as_ref().unwrap().max_parallel,
            DEFAULT_MAX_PARALLEL
        );
        assert_eq!(g.resources, None);
    }

    #[test]
    fn shape_errors_name_the_line_and_column() {
        let cases = [
            (
                "{\"id\": \"web\",\n \"task_groups\": [{\n   \"cont\": 3}]}",
                "job file: unknown field `cont`, expected one of `name`, `count`, `resources`, `constraints`, `update`, `meta` at line 3 column 9",
            ),
            (
                r#"{"id":"web","type":"daemon"}"#,
                "job file: unknown variant `daemon`, expected one of `service`, `batch`, `system` at line 1 column 27",
            ),
            (
                r#"{"id":"web","task_groups":[{"count":"50"}]}"#,
                "job file: invalid type: string \"50\", expected u32 at line 1 column 40",
            ),
            (
                r#"{"id":"web","task_groups":[{"count":-1}]}"#,
                "job file: invalid value: integer `-1`, expected u32 at line 1 column 38",
            ),
            (
                r#"{"task_groups":[{"constraints":[{"operand":"=="}]}]}"#,
                "job file: unknown variant `==`, expected `=` or `!=` at line 1 column 47",
            ),
            (
                r#"{"id":"web",}"#,
                "job file: trailing comma at line 1 column 13",
            ),
            ("", "job file: EOF while parsing a value at line 1 column 0"),
        ];
        for (text, want) in cases {
            assert_eq!(parse_job(text).unwrap_err().to_string(), want, "{text}");
        }
        // humantime's own explanation sits in the middle.
        let err = parse_job(r#"{"task_groups":[{"update":{"min_healthy_time":"10 parsecs"}}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "job file: \"10 parsecs\" is not a duration like \"10s\" or \"1m 30s\": unknown time unit \"parsecs\""
            ),
            "{err}"
        );
        assert!(err.ends_with(" at line 1 column 59"), "{err}");
    }

    #[test]
    fn json_round_trips_the_spec() {
        let text = r#"{"id":"api","type":"service","priority":70,"datacenters":["dc1"],
          "task_groups":[{"name":"api","count":3,"resources":{"cpu_mhz":250,"memory_mb":128},
          "constraints":[{"target":"node_class","operand":"!=","value":"gpu"}],
          "update":{"max_parallel":2,"canary":1,"min_healthy_time":"1m 30s","progress_deadline":"10m","auto_promote":true},
          "meta":{"b":"2","a":"1"}}]}"#;
        let job = parse_job(text).unwrap();
        let json = job_to_json(&job);
        assert_eq!(json["type"], "service");
        assert_eq!(
            json["task_groups"][0]["update"]["min_healthy_time"],
            "1m 30s"
        );
        assert_eq!(json["task_groups"][0]["constraints"][0]["operand"], "!=");
        assert_eq!(parse_job(&json.to_string()).unwrap(), job);
        // Server-side fields are not part of a job file.
        let stored = Job {
            version: 3,
            modify_index: 9,
            ..job.clone()
        };
        assert_eq!(job_to_json(&stored), json);
    }

    #[test]
    fn examples_parse_and_validate() {
        for (name, text) in [
            ("web", include_str!("../../../examples/web.json")),
            ("batch", include_str!("../../../examples/batch.json")),
            ("system", include_str!("../../../examples/system.json")),
        ] {
            let job = parse_job(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            crate::model::validate::job(Some(&job)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(job.id, name);
        }
        let web = parse_job(include_str!("../../../examples/web.json")).unwrap();
        assert_eq!(web, parse_job(CONTRACT).unwrap());
    }
}
