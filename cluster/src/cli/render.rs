//! What the operator commands print: tables like `nomad status` and JSON
//! for scripts, kept apart from the gRPC calls so they are tested without a
//! cluster.

use serde_json::{json, Value};

use super::jobspec;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, Job, JobRegisterReply, JobStatus, JobType,
    Node, NodeStatus,
};

/// A wire enum's label, or `unknown(N)` for a value this build does not know.
fn name<E: TryFrom<i32>>(v: i32, label: fn(E) -> &'static str) -> String {
    E::try_from(v).map_or_else(|_| format!("unknown({v})"), |e| label(e).to_string())
}

pub fn job_type_name(v: i32) -> String {
    name(v, JobType::label)
}

pub fn job_status_name(v: i32) -> String {
    name(v, JobStatus::label)
}

pub fn client_status_name(v: i32) -> String {
    name(v, AllocClientStatus::label)
}

pub fn desired_status_name(v: i32) -> String {
    name(v, AllocDesiredStatus::label)
}

pub fn node_status_name(v: i32) -> String {
    name(v, NodeStatus::label)
}

/// Left-aligned columns two spaces apart, like `nomad status`.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A registration that changed nothing still creates an evaluation (as in
/// Nomad); its job modify index stays that of the last change.
pub fn render_register(job_id: &str, reply: &JobRegisterReply) -> String {
    let what = if reply.job_modify_index < reply.index {
        format!(
            "Job {job_id:?} unchanged at raft index {} (last changed at {})\n",
            reply.index, reply.job_modify_index
        )
    } else {
        format!(
            "Job {job_id:?} registered at raft index {} (job modify index {})\n",
            reply.index, reply.job_modify_index
        )
    };
    if reply.eval_id.is_empty() {
        what
    } else {
        format!("{what}Evaluation {} created\n", reply.eval_id)
    }
}

pub fn render_deregister(job_id: &str, purge: bool, reply: &JobRegisterReply) -> String {
    let what = if purge {
        "stopped and purged"
    } else {
        "stopped"
    };
    let mut out = format!("Job {job_id:?} {what} at raft index {}\n", reply.index);
    if !reply.eval_id.is_empty() {
        out.push_str(&format!("Evaluation {} created\n", reply.eval_id));
    }
    out
}

/// Allocations in a stable, readable order: by group, then index, newest last.
fn sorted(allocs: &[Allocation]) -> Vec<&Allocation> {
    let mut allocs: Vec<&Allocation> = allocs.iter().collect();
    allocs.sort_by(|a, b| {
        (&a.task_group, a.index, a.create_index).cmp(&(&b.task_group, b.index, b.create_index))
    });
    allocs
}

fn healthy(a: &Allocation) -> &'static str {
    match a.healthy {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

pub fn render_job_status(job: &Job, allocs: &[Allocation]) -> String {
    let mut status = job_status_name(job.status);
    if job.stop {
        status.push_str(" (stopped)");
    }
    let datacenters = if job.datacenters.is_empty() {
        "any".to_string()
    } else {
        job.datacenters.join(",")
    };
    let mut out = format!(
        "ID          = {}\nType        = {}\nPriority    = {}\nDatacenters = {}\nStatus      = {}\nVersion     = {}\n",
        job.id,
        job_type_name(job.r#type),
        job.priority,
        datacenters,
        status,
        job.version,
    );

    // Client statuses counted per group: how far the job got.
    let counted = [
        AllocClientStatus::Pending,
        AllocClientStatus::Running,
        AllocClientStatus::Complete,
        AllocClientStatus::Failed,
        AllocClientStatus::Lost,
    ];
    let groups: Vec<Vec<String>> = job
        .task_groups
        .iter()
        .map(|g| {
            let res = g.resources.unwrap_or_default();
            let mut row = vec![
                g.name.clone(),
                if job.r#type == JobType::System as i32 {
                    "-".into()
                } else {
                    g.count().to_string()
                },
                res.cpu_mhz.to_string(),
                res.memory_mb.to_string(),
            ];
            row.extend(counted.iter().map(|s| {
                allocs
                    .iter()
                    .filter(|a| a.task_group == g.name && a.client_status == *s as i32)
                    .count()
                    .to_string()
            }));
            row
        })
        .collect();
    out.push_str("\nTask groups\n");
    out.push_str(&table(
        &[
            "NAME",
            "COUNT",
            "CPU MHZ",
            "MEMORY MB",
            "PENDING",
            "RUNNING",
            "COMPLETE",
            "FAILED",
            "LOST",
        ],
        &groups,
    ));

    out.push_str("\nAllocations\n");
    if allocs.is_empty() {
        out.push_str("none\n");
        return out;
    }
    let rows: Vec<Vec<String>> = sorted(allocs)
        .into_iter()
        .map(|a| {
            vec![
                a.id.clone(),
                a.name.clone(),
                a.node_id.clone(),
                desired_status_name(a.desired_status),
                client_status_name(a.client_status),
                a.job_version.to_string(),
                healthy(a).into(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "ID", "NAME", "NODE", "DESIRED", "CLIENT", "VERSION", "HEALTHY",
        ],
        &rows,
    ));
    out
}

pub fn alloc_json(a: &Allocation) -> Value {
    json!({
        "id": a.id,
        "name": a.name,
        "task_group": a.task_group,
        "index": a.index,
        "node_id": a.node_id,
        "eval_id": a.eval_id,
        "desired_status": desired_status_name(a.desired_status),
        "desired_description": a.desired_description,
        "client_status": client_status_name(a.client_status),
        "client_description": a.client_description,
        "job_version": a.job_version,
        "deployment_id": a.deployment_id,
        "healthy": a.healthy,
        "canary": a.canary,
        "resources": a.resources.map(|r| json!({"cpu_mhz": r.cpu_mhz, "memory_mb": r.memory_mb})),
        "create_index": a.create_index,
        "modify_index": a.modify_index,
        "create_time_ms": a.create_time_ms,
        "modify_time_ms": a.modify_time_ms,
    })
}

/// `job` is the spec in the job file's shape (so `jq .job` gives a file that
/// `job run` takes back); what the server keeps about it sits beside it.
pub fn job_status_json(job: &Job, allocs: &[Allocation]) -> Value {
    json!({
        "job": jobspec::job_to_json(job),
        "status": job_status_name(job.status),
        "stop": job.stop,
        "version": job.version,
        "create_index": job.create_index,
        "modify_index": job.modify_index,
        "job_modify_index": job.job_modify_index,
        "allocations": sorted(allocs).into_iter().map(alloc_json).collect::<Vec<_>>(),
    })
}

pub fn render_job_list(jobs: &[Job]) -> String {
    if jobs.is_empty() {
        return "No jobs\n".into();
    }
    let mut jobs: Vec<&Job> = jobs.iter().collect();
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    let rows: Vec<Vec<String>> = jobs
        .into_iter()
        .map(|j| {
            let mut status = job_status_name(j.status);
            if j.stop {
                status.push_str(" (stopped)");
            }
            vec![
                j.id.clone(),
                job_type_name(j.r#type),
                j.priority.to_string(),
                status,
                j.version.to_string(),
                j.task_groups.len().to_string(),
            ]
        })
        .collect();
    table(
        &["ID", "TYPE", "PRIORITY", "STATUS", "VERSION", "GROUPS"],
        &rows,
    )
}

pub fn job_list_json(jobs: &[Job]) -> Value {
    let mut jobs: Vec<&Job> = jobs.iter().collect();
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    json!({
        "jobs": jobs.into_iter().map(|j| json!({
            "job": jobspec::job_to_json(j),
            "status": job_status_name(j.status),
            "stop": j.stop,
            "version": j.version,
            "modify_index": j.modify_index,
        })).collect::<Vec<_>>(),
    })
}

fn sorted_nodes(nodes: &[Node]) -> Vec<&Node> {
    let mut nodes: Vec<&Node> = nodes.iter().collect();
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    nodes
}

pub fn render_nodes(nodes: &[Node]) -> String {
    if nodes.is_empty() {
        return "No nodes\n".into();
    }
    let rows: Vec<Vec<String>> = sorted_nodes(nodes)
        .into_iter()
        .map(|n| {
            let res = n.resources.unwrap_or_default();
            vec![
                n.id.clone(),
                n.name.clone(),
                n.datacenter.clone(),
                if n.node_class.is_empty() {
                    "-".into()
                } else {
                    n.node_class.clone()
                },
                node_status_name(n.status),
                if n.ineligible { "no" } else { "yes" }.into(),
                res.cpu_mhz.to_string(),
                res.memory_mb.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "NAME",
            "DC",
            "CLASS",
            "STATUS",
            "ELIGIBLE",
            "CPU MHZ",
            "MEMORY MB",
        ],
        &rows,
    )
}

pub fn nodes_json(nodes: &[Node]) -> Value {
    json!({
        "nodes": sorted_nodes(nodes).into_iter().map(|n| json!({
            "id": n.id,
            "name": n.name,
            "datacenter": n.datacenter,
            "node_class": n.node_class,
            "status": node_status_name(n.status),
            "eligible": !n.ineligible,
            "resources": n.resources.map(|r| json!({"cpu_mhz": r.cpu_mhz, "memory_mb": r.memory_mb})),
            "attributes": n.attributes.iter().collect::<std::collections::BTreeMap<_, _>>(),
            "create_index": n.create_index,
            "modify_index": n.modify_index,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::*;

    use crate::cli::jobspec;

    fn web() -> Job {
        Job {
            status: JobStatus::Running as i32,
            version: 2,
            modify_index: 40,
            ..jobspec::parse_job(include_str!("../../../examples/web.json")).unwrap()
        }
    }

    fn alloc(index: u32, node: &str, client: AllocClientStatus) -> Allocation {
        Allocation {
            id: format!("a{index}"),
            job_id: "web".into(),
            task_group: "web".into(),
            name: format!("web.web[{index}]"),
            index,
            node_id: node.into(),
            desired_status: AllocDesiredStatus::Run as i32,
            client_status: client as i32,
            job_version: 2,
            create_index: 10 + u64::from(index),
            ..Default::default()
        }
    }

    #[test]
    fn enum_names_are_lower_case_words() {
        assert_eq!(
            client_status_name(AllocClientStatus::Running as i32),
            "running"
        );
        assert_eq!(desired_status_name(AllocDesiredStatus::Stop as i32), "stop");
        assert_eq!(job_type_name(JobType::System as i32), "system");
        assert_eq!(job_status_name(JobStatus::Dead as i32), "dead");
        assert_eq!(node_status_name(NodeStatus::Ready as i32), "ready");
        assert_eq!(node_status_name(0), "unknown");
        assert_eq!(client_status_name(99), "unknown(99)");
    }

    #[test]
    fn job_status_table() {
        let allocs = vec![
            Allocation {
                healthy: Some(true),
                ..alloc(1, "node-2", AllocClientStatus::Running)
            },
            alloc(0, "node-1", AllocClientStatus::Pending),
        ];
        assert_eq!(
            render_job_status(&web(), &allocs),
            "\
ID          = web
Type        = service
Priority    = 50
Datacenters = any
Status      = running
Version     = 2

Task groups
NAME  COUNT  CPU MHZ  MEMORY MB  PENDING  RUNNING  COMPLETE  FAILED  LOST
web   50     100      64         1        1        0         0       0

Allocations
ID  NAME        NODE    DESIRED  CLIENT   VERSION  HEALTHY
a0  web.web[0]  node-1  run      pending  2        -
a1  web.web[1]  node-2  run      running  2        yes
"
        );
    }

    #[test]
    fn job_status_table_without_allocations() {
        let job = Job {
            stop: true,
            status: JobStatus::Dead as i32,
            ..web()
        };
        let out = render_job_status(&job, &[]);
        assert!(out.contains("Status      = dead (stopped)\n"), "{out}");
        assert!(out.ends_with("\nAllocations\nnone\n"), "{out}");
    }

    #[test]
    fn job_status_json_shape() {
        let allocs = vec![
            alloc(1, "node-2", AllocClientStatus::Running),
            alloc(0, "node-1", AllocClientStatus::Pending),
        ];
        let v = job_status_json(&web(), &allocs);
        assert_eq!(v["job"], jobspec::job_to_json(&web()));
        assert_eq!(v["job"]["id"], "web");
        assert_eq!(v["status"], "running");
        assert_eq!(v["version"], 2);
        let a = &v["allocations"];
        assert_eq!(a.as_array().unwrap().len(), 2);
        assert_eq!(a[0]["id"], "a0");
        assert_eq!(a[0]["name"], "web.web[0]");
        assert_eq!(a[0]["node_id"], "node-1");
        assert_eq!(a[0]["desired_status"], "run");
        assert_eq!(a[0]["client_status"], "pending");
        assert_eq!(a[1]["client_status"], "running");
        assert_eq!(a[1]["healthy"], Value::Null);
        // The spec part is a job file `job run` takes back.
        assert_eq!(jobspec::parse_job(&v["job"].to_string()).unwrap().id, "web");
    }

    #[test]
    fn job_list() {
        let batch = Job {
            status: JobStatus::Dead as i32,
            stop: true,
            ..jobspec::parse_job(include_str!("../../../examples/batch.json")).unwrap()
        };
        assert_eq!(
            render_job_list(&[web(), batch.clone()]),
            "\
ID     TYPE     PRIORITY  STATUS          VERSION  GROUPS
batch  batch    30        dead (stopped)  0        1
web    service  50        running         2        1
"
        );
        assert_eq!(render_job_list(&[]), "No jobs\n");
        let v = job_list_json(&[web(), batch]);
        assert_eq!(v["jobs"][0]["job"]["id"], "batch");
        assert_eq!(v["jobs"][0]["status"], "dead");
        assert_eq!(v["jobs"][1]["job"]["type"], "service");
    }

    #[test]
    fn register_and_deregister_messages() {
        let reply = JobRegisterReply {
            eval_id: "e1".into(),
            index: 12,
            job_modify_index: 12,
        };
        assert_eq!(
            render_register("web", &reply),
            "Job \"web\" registered at raft index 12 (job modify index 12)\nEvaluation e1 created\n"
        );
        let unchanged = JobRegisterReply {
            eval_id: "e2".into(),
            index: 14,
            job_modify_index: 12,
        };
        assert_eq!(
            render_register("web", &unchanged),
            "Job \"web\" unchanged at raft index 14 (last changed at 12)\nEvaluation e2 created\n"
        );
        assert_eq!(
            render_deregister("web", true, &reply),
            "Job \"web\" stopped and purged at raft index 12\nEvaluation e1 created\n"
        );
        let no_eval = JobRegisterReply {
            eval_id: String::new(),
            ..reply.clone()
        };
        assert_eq!(
            render_deregister("web", false, &no_eval),
            "Job \"web\" stopped at raft index 12\n"
        );
    }

    fn nodes() -> Vec<Node> {
        vec![
            Node {
                id: "node-2".into(),
                name: "b".into(),
                datacenter: "dc2".into(),
                node_class: "gpu".into(),
                status: NodeStatus::Down as i32,
                ineligible: true,
                resources: Some(Resources {
                    cpu_mhz: 8000,
                    memory_mb: 16384,
                }),
                ..Default::default()
            },
            Node {
                id: "node-1".into(),
                name: "a".into(),
                datacenter: "dc1".into(),
                status: NodeStatus::Ready as i32,
                resources: Some(Resources {
                    cpu_mhz: 4000,
                    memory_mb: 8192,
                }),
                attributes: [("os".to_string(), "linux".to_string())].into(),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn node_table() {
        assert_eq!(
            render_nodes(&nodes()),
            "\
ID      NAME  DC   CLASS  STATUS  ELIGIBLE  CPU MHZ  MEMORY MB
node-1  a     dc1  -      ready   yes       4000     8192
node-2  b     dc2  gpu    down    no        8000     16384
"
        );
        assert_eq!(render_nodes(&[]), "No nodes\n");
    }

    #[test]
    fn node_json() {
        let v = nodes_json(&nodes());
        assert_eq!(
            v["nodes"][0],
            json!({
                "id": "node-1", "name": "a", "datacenter": "dc1", "node_class": "",
                "status": "ready", "eligible": true,
                "resources": {"cpu_mhz": 4000, "memory_mb": 8192},
                "attributes": {"os": "linux"}, "create_index": 0, "modify_index": 0,
            })
        );
        assert_eq!(v["nodes"][1]["status"], "down");
        assert_eq!(v["nodes"][1]["eligible"], false);
    }
}
