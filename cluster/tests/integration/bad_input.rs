//! Bad input to every RPC of the public and scheduling APIs, as a typed
//! client sends it: empty, oversized, NUL, out-of-range numbers, unknown
//! enums. Each is sent to every server (a follower checks before it
//! forwards, the leader checks again) and must get a clear status naming
//! the field, never a panic or `Internal`. Afterwards every server is up
//! with a leader, nothing invalid was stored, and a normal job schedules.

use crate::common;

use common::{assert_refused, eventually_has_node, register_nodes, still_serves};
use futures::future::BoxFuture;
use stampede_launch::testing::{node_secrets, secret_of, service_job, Harness};
use stampede_proto::deployment_service_client::DeploymentServiceClient;
use stampede_proto::eval_service_client::EvalServiceClient;
use stampede_proto::job_service_client::JobServiceClient;
use stampede_proto::node_service_client::NodeServiceClient;
use stampede_proto::plan_service_client::PlanServiceClient;
use stampede_proto::security::Role;
use stampede_proto::*;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Typed clients of one server.
#[derive(Clone)]
struct Clients {
    nodes: NodeServiceClient<Channel>,
    jobs: JobServiceClient<Channel>,
    evals: EvalServiceClient<Channel>,
    plans: PlanServiceClient<Channel>,
    deployments: DeploymentServiceClient<Channel>,
}

impl Clients {
    /// As a server (a buggy or restarted peer): every role check passes and
    /// no token is needed, so each request reaches its validation.
    fn of(c: &Harness, id: u64) -> Self {
        let ch = c.channel(id, Role::Server);
        Self {
            nodes: sized!(NodeServiceClient::new(ch.clone())),
            jobs: sized!(JobServiceClient::new(ch.clone())),
            evals: sized!(EvalServiceClient::new(ch.clone())),
            plans: sized!(PlanServiceClient::new(ch.clone())),
            deployments: sized!(DeploymentServiceClient::new(ch)),
        }
    }
}

/// One bad request: how to send it, and the refusal it must get.
struct Case {
    what: &'static str,
    code: Code,
    field: &'static str,
    call: Box<dyn Fn(Clients) -> BoxFuture<'static, Result<(), Status>>>,
}

/// `case!(what, service.method(request), Code, "field")`; the request is
/// built anew for each server.
macro_rules! case {
    ($what:expr, $svc:ident . $method:ident ( $req:expr ), $code:ident, $field:expr) => {
        Case {
            what: $what,
            code: Code::$code,
            field: $field,
            call: Box::new(move |mut c: Clients| {
                let req = $req;
                Box::pin(async move { c.$svc.$method(req).await.map(drop) })
            }),
        }
    };
}

/// A field far over its limit, in a message under `--max-request-bytes`
/// (1 MiB), so the field's check is what refuses it.
const HUGE: usize = 512 * 1024;

/// A string far past every limit: its echo would not fit a status.
fn huge() -> String {
    "x".repeat(HUGE)
}

fn node(change: impl FnOnce(&mut Node)) -> NodeRegisterRequest {
    let mut n = stampede_launch::testing::node("bad-node");
    change(&mut n);
    NodeRegisterRequest {
        node: Some(n),
        secret_id: secret_of("bad-node"),
    }
}

fn job(change: impl FnOnce(&mut Job)) -> JobRegisterRequest {
    let mut j = service_job("bad-job", 2, 100, 64);
    j.task_groups[0].update = Some(UpdateStrategy {
        max_parallel: 1,
        ..Default::default()
    });
    change(&mut j);
    JobRegisterRequest { job: Some(j) }
}

fn group(job: &mut Job) -> &mut TaskGroup {
    &mut job.task_groups[0]
}

fn alloc_update(change: impl FnOnce(&mut Allocation)) -> NodeUpdateAllocRequest {
    let mut a = Allocation {
        id: "ghost-alloc".into(),
        client_status: AllocClientStatus::Running as i32,
        ..Default::default()
    };
    change(&mut a);
    NodeUpdateAllocRequest {
        allocs: vec![a],
        secrets: node_secrets(["n-0"]),
    }
}

fn eval_update(change: impl FnOnce(&mut EvalUpdateRequest)) -> EvalUpdateRequest {
    let mut r = EvalUpdateRequest {
        token: "token-1".into(),
        evals: vec![Evaluation {
            id: "eval-1".into(),
            job_id: "bad-job".into(),
            r#type: JobType::Service as i32,
            status: EvalStatus::Complete as i32,
            ..Default::default()
        }],
    };
    change(&mut r);
    r
}

fn plan(change: impl FnOnce(&mut Allocation)) -> PlanSubmitRequest {
    let mut a = Allocation {
        id: "alloc-1".into(),
        job_id: "bad-job".into(),
        task_group: "app".into(),
        node_id: "node-1".into(),
        resources: Some(Resources {
            cpu_mhz: 100,
            memory_mb: 64,
        }),
        desired_status: AllocDesiredStatus::Run as i32,
        ..Default::default()
    };
    change(&mut a);
    PlanSubmitRequest {
        plan: Some(Plan {
            eval_id: "eval-1".into(),
            eval_token: "token-1".into(),
            job_id: "bad-job".into(),
            node_allocation: [("node-1".into(), AllocList { allocs: vec![a] })].into(),
            ..Default::default()
        }),
    }
}

fn ack(eval_id: String, token: &str) -> EvalAckRequest {
    EvalAckRequest {
        eval_id,
        token: token.into(),
        reason: String::new(),
    }
}

fn reap(collect: Option<eval_reap_request::Collect>) -> EvalReapRequest {
    EvalReapRequest {
        eval_id: "eval-1".into(),
        token: "token-1".into(),
        collect,
    }
}

fn reap_jobs(job_ids: Vec<String>) -> EvalReapRequest {
    reap(Some(eval_reap_request::Collect::Jobs(GcJobsEntry {
        job_ids,
    })))
}

fn many<T>(n: usize, f: impl Fn(usize) -> T) -> Vec<T> {
    (0..n).map(f).collect()
}

fn cases() -> Vec<Case> {
    let node_status = |s| NodeUpdateStatusRequest {
        node_id: "bad-node".into(),
        status: s,
        secret_id: secret_of("bad-node"),
    };
    // Node n-0 is registered (with its secret_of).
    let heartbeat = |secret_id: &str| NodeUpdateStatusRequest {
        node_id: "n-0".into(),
        status: NodeStatus::Ready as i32,
        secret_id: secret_id.into(),
    };
    let query = |secret_id: &str| NodeClientAllocsRequest {
        node_id: "n-0".into(),
        query: None,
        with_changed: false,
        changed_only: false,
        secret_id: secret_id.into(),
    };
    vec![
        // NodeService.Register
        case!(
            "no node",
            nodes.register(NodeRegisterRequest {
                node: None,
                secret_id: secret_of("bad-node")
            }),
            InvalidArgument,
            "node: is required"
        ),
        case!(
            "no secret_id",
            nodes.register(NodeRegisterRequest {
                node: Some(stampede_launch::testing::node("bad-node")),
                secret_id: String::new()
            }),
            InvalidArgument,
            "secret_id: is required"
        ),
        case!(
            "short secret_id",
            nodes.register(NodeRegisterRequest {
                node: Some(stampede_launch::testing::node("bad-node")),
                secret_id: "0123456789abcde".into()
            }),
            InvalidArgument,
            "secret_id: is 15 bytes long"
        ),
        case!(
            "another node's id, another secret",
            nodes.register(NodeRegisterRequest {
                node: Some(stampede_launch::testing::node("n-0")),
                secret_id: secret_of("bad-node")
            }),
            PermissionDenied,
            "secret_id does not match node n-0"
        ),
        case!(
            "empty node id",
            nodes.register(node(|n| n.id.clear())),
            InvalidArgument,
            "node.id: must not be empty"
        ),
        case!(
            "512 KiB node id",
            nodes.register(node(|n| n.id = huge())),
            InvalidArgument,
            "node.id: is 524288 bytes"
        ),
        case!(
            "NUL in node id",
            nodes.register(node(|n| n.id = "a\0b".into())),
            InvalidArgument,
            "node.id: contains '\\0'"
        ),
        case!(
            "NUL in node name",
            nodes.register(node(|n| n.name = "a\0b".into())),
            InvalidArgument,
            "node.name"
        ),
        case!(
            "512 KiB node name",
            nodes.register(node(|n| n.name = huge())),
            InvalidArgument,
            "node.name"
        ),
        case!(
            "no datacenter",
            nodes.register(node(|n| n.datacenter.clear())),
            InvalidArgument,
            "node.datacenter"
        ),
        case!(
            "no resources",
            nodes.register(node(|n| n.resources = None)),
            InvalidArgument,
            "node.resources"
        ),
        case!(
            "zero CPU",
            nodes.register(node(|n| n.resources.as_mut().unwrap().cpu_mhz = 0)),
            InvalidArgument,
            "node.resources.cpu_mhz"
        ),
        case!(
            "2^64-1 MHz",
            nodes.register(node(|n| n.resources.as_mut().unwrap().cpu_mhz = u64::MAX)),
            InvalidArgument,
            "node.resources.cpu_mhz"
        ),
        case!(
            "2^63 MB",
            nodes.register(node(|n| n.resources.as_mut().unwrap().memory_mb = 1 << 63)),
            InvalidArgument,
            "node.resources.memory_mb"
        ),
        case!(
            "unknown node status",
            nodes.register(node(|n| n.status = 99)),
            InvalidArgument,
            "node.status"
        ),
        case!(
            "negative node status",
            nodes.register(node(|n| n.status = -1)),
            InvalidArgument,
            "node.status"
        ),
        case!(
            "65 attributes",
            nodes.register(node(|n| n.attributes =
                many(65, |i| (format!("k{i}"), "v".to_string()))
                    .into_iter()
                    .collect())),
            InvalidArgument,
            "node.attributes"
        ),
        case!(
            "bad attribute key",
            nodes.register(node(|n| {
                n.attributes.insert("a b".into(), "v".into());
            })),
            InvalidArgument,
            "node.attributes key"
        ),
        case!(
            "512 KiB attribute",
            nodes.register(node(|n| {
                n.attributes.insert("k".into(), huge());
            })),
            InvalidArgument,
            "node.attributes[k]"
        ),
        // NodeService reads and updates
        case!(
            "empty node id",
            nodes.get(NodeGetRequest {
                node_id: String::new()
            }),
            InvalidArgument,
            "node_id"
        ),
        case!(
            "512 KiB node id",
            nodes.get(NodeGetRequest { node_id: huge() }),
            InvalidArgument,
            "node_id"
        ),
        case!(
            "unknown node",
            nodes.get(NodeGetRequest {
                node_id: "ghost".into()
            }),
            NotFound,
            "node_id"
        ),
        case!(
            "unset status",
            nodes.update_status(node_status(0)),
            InvalidArgument,
            "status"
        ),
        case!(
            "unknown status",
            nodes.update_status(node_status(42)),
            InvalidArgument,
            "status"
        ),
        case!(
            "512 KiB node id",
            nodes.update_status(NodeUpdateStatusRequest {
                node_id: huge(),
                status: 2,
                secret_id: secret_of("bad-node")
            }),
            InvalidArgument,
            "node_id"
        ),
        case!(
            "unknown node",
            nodes.update_status(NodeUpdateStatusRequest {
                node_id: "ghost".into(),
                status: 2,
                secret_id: secret_of("ghost")
            }),
            NotFound,
            "node_id"
        ),
        case!(
            "heartbeat without secret_id",
            nodes.update_status(heartbeat("")),
            InvalidArgument,
            "secret_id: is required"
        ),
        case!(
            "heartbeat with another secret_id",
            nodes.update_status(heartbeat(&secret_of("n-1"))),
            PermissionDenied,
            "secret_id does not match node n-0"
        ),
        case!(
            "query without secret_id",
            nodes.get_client_allocs(query("")),
            InvalidArgument,
            "secret_id: is required"
        ),
        case!(
            "query with another secret_id",
            nodes.get_client_allocs(query(&secret_of("n-1"))),
            PermissionDenied,
            "secret_id does not match node n-0"
        ),
        case!(
            "empty node id",
            nodes.get_client_allocs(NodeClientAllocsRequest {
                node_id: String::new(),
                query: None,
                with_changed: false,
                changed_only: false,
                secret_id: secret_of("bad-node")
            }),
            InvalidArgument,
            "node_id"
        ),
        case!(
            "unknown node",
            nodes.get_client_allocs(NodeClientAllocsRequest {
                node_id: "ghost".into(),
                query: None,
                with_changed: false,
                changed_only: false,
                secret_id: secret_of("ghost")
            }),
            NotFound,
            "node_id"
        ),
        case!(
            "empty alloc id",
            nodes.get_allocs(AllocsGetRequest {
                alloc_ids: vec![String::new()],
                query: None
            }),
            InvalidArgument,
            "alloc_ids[0]"
        ),
        case!(
            "512 KiB alloc id",
            nodes.get_allocs(AllocsGetRequest {
                alloc_ids: vec!["a".into(), huge()],
                query: None
            }),
            InvalidArgument,
            "alloc_ids[1]"
        ),
        case!(
            "no allocs",
            nodes.update_alloc(NodeUpdateAllocRequest {
                allocs: vec![],
                secrets: node_secrets(["n-0"])
            }),
            InvalidArgument,
            "allocs"
        ),
        case!(
            "short secret in secrets",
            nodes.update_alloc(NodeUpdateAllocRequest {
                secrets: vec![NodeSecret {
                    node_id: "n-0".into(),
                    secret_id: "short".into()
                }],
                ..alloc_update(|_| {})
            }),
            InvalidArgument,
            "secrets[0].secret_id"
        ),
        case!(
            "another secret in secrets",
            nodes.update_alloc(NodeUpdateAllocRequest {
                secrets: vec![NodeSecret {
                    node_id: "n-0".into(),
                    secret_id: secret_of("n-1")
                }],
                ..alloc_update(|_| {})
            }),
            PermissionDenied,
            "secret_id does not match node n-0"
        ),
        case!(
            "empty alloc id",
            nodes.update_alloc(alloc_update(|a| a.id.clear())),
            InvalidArgument,
            "allocs[0].id"
        ),
        case!(
            "unset client status",
            nodes.update_alloc(alloc_update(|a| a.client_status = 0)),
            InvalidArgument,
            "allocs[0].client_status"
        ),
        case!(
            "unknown client status",
            nodes.update_alloc(alloc_update(|a| a.client_status = 77)),
            InvalidArgument,
            "allocs[0].client_status"
        ),
        case!(
            "NUL in description",
            nodes.update_alloc(alloc_update(|a| a.client_description = "\0".into())),
            InvalidArgument,
            "allocs[0].client_description"
        ),
        case!(
            "512 KiB description",
            nodes.update_alloc(alloc_update(|a| a.client_description = huge())),
            InvalidArgument,
            "allocs[0].client_description"
        ),
        case!(
            "65 task states",
            nodes.update_alloc(alloc_update(|a| a.task_states =
                many(65, |i| NamedTaskState::new(
                    format!("t{i}"),
                    TaskState::default()
                )))),
            InvalidArgument,
            "allocs[0].task_states"
        ),
        case!(
            "a task named twice",
            nodes.update_alloc(alloc_update(|a| a.task_states = vec![
                NamedTaskState::new("web", TaskState::default()),
                NamedTaskState::new("web", TaskState::default()),
            ])),
            InvalidArgument,
            "allocs[0].task_states[web]"
        ),
        case!(
            "unknown alloc",
            nodes.update_alloc(alloc_update(|_| {})),
            NotFound,
            "allocs[0].id"
        ),
        // JobService.Register
        case!(
            "no job",
            jobs.register(JobRegisterRequest { job: None }),
            InvalidArgument,
            "job: is required"
        ),
        case!(
            "empty job id",
            jobs.register(job(|j| j.id.clear())),
            InvalidArgument,
            "job.id"
        ),
        case!(
            "512 KiB job id",
            jobs.register(job(|j| j.id = huge())),
            InvalidArgument,
            "job.id"
        ),
        case!(
            "NUL in job id",
            jobs.register(job(|j| j.id = "\0".into())),
            InvalidArgument,
            "job.id"
        ),
        case!(
            "unset type",
            jobs.register(job(|j| j.r#type = 0)),
            InvalidArgument,
            "job.type"
        ),
        case!(
            "unknown type",
            jobs.register(job(|j| j.r#type = 9)),
            InvalidArgument,
            "job.type"
        ),
        case!(
            "the core scheduler's type",
            jobs.register(job(|j| j.r#type = JobType::Core as i32)),
            InvalidArgument,
            "job.type"
        ),
        case!(
            "priority 2^32-1",
            jobs.register(job(|j| j.priority = u32::MAX)),
            InvalidArgument,
            "job.priority"
        ),
        case!(
            "101 datacenters",
            jobs.register(job(|j| j.datacenters = many(101, |i| format!("dc{i}")))),
            InvalidArgument,
            "job.datacenters"
        ),
        case!(
            "empty datacenter",
            jobs.register(job(|j| j.datacenters = vec![String::new()])),
            InvalidArgument,
            "job.datacenters[0]"
        ),
        case!(
            "no groups",
            jobs.register(job(|j| j.task_groups.clear())),
            InvalidArgument,
            "job.task_groups"
        ),
        case!(
            "101 groups",
            jobs.register(job(|j| {
                let g = j.task_groups[0].clone();
                j.task_groups = many(101, |i| TaskGroup {
                    name: format!("g{i}"),
                    ..g.clone()
                });
            })),
            InvalidArgument,
            "job.task_groups"
        ),
        case!(
            "duplicate group",
            jobs.register(job(|j| {
                let g = j.task_groups[0].clone();
                j.task_groups.push(g);
            })),
            InvalidArgument,
            "job.task_groups[1].name"
        ),
        case!(
            "count 2^32-1",
            jobs.register(job(|j| group(j).count = Some(u32::MAX))),
            InvalidArgument,
            "job.task_groups[0].count"
        ),
        case!(
            "2^64-1 MHz",
            jobs.register(job(
                |j| group(j).resources.as_mut().unwrap().cpu_mhz = u64::MAX
            )),
            InvalidArgument,
            "job.task_groups[0].resources.cpu_mhz"
        ),
        case!(
            "2^63 MB",
            jobs.register(job(
                |j| group(j).resources.as_mut().unwrap().memory_mb = 1 << 63
            )),
            InvalidArgument,
            "job.task_groups[0].resources.memory_mb"
        ),
        case!(
            "unknown target",
            jobs.register(job(|j| group(j).constraints.push(Constraint {
                target: 99,
                operand: 1,
                value: "x".into()
            }))),
            InvalidArgument,
            "job.task_groups[0].constraints[0].target"
        ),
        case!(
            "unknown operand",
            jobs.register(job(|j| group(j).constraints.push(Constraint {
                target: 1,
                operand: -3,
                value: "x".into()
            }))),
            InvalidArgument,
            "job.task_groups[0].constraints[0].operand"
        ),
        case!(
            "65 meta",
            jobs.register(job(|j| group(j).meta =
                many(65, |i| (format!("k{i}"), String::new()))
                    .into_iter()
                    .collect())),
            InvalidArgument,
            "job.task_groups[0].meta"
        ),
        case!(
            "NUL in meta",
            jobs.register(job(|j| {
                group(j).meta.insert("k".into(), "\0".into());
            })),
            InvalidArgument,
            "job.task_groups[0].meta[k]"
        ),
        case!(
            "update of a batch job",
            jobs.register(job(|j| j.r#type = JobType::Batch as i32)),
            InvalidArgument,
            "job.task_groups[0].update"
        ),
        case!(
            "no parallelism",
            jobs.register(job(|j| group(j).update.as_mut().unwrap().max_parallel = 0)),
            InvalidArgument,
            "job.task_groups[0].update.max_parallel"
        ),
        case!(
            "more canaries than count",
            jobs.register(job(|j| group(j).update.as_mut().unwrap().canary = 3)),
            InvalidArgument,
            "job.task_groups[0].update.canary"
        ),
        case!(
            "deadline 2^64-1 ms",
            jobs.register(job(|j| group(j)
                .update
                .as_mut()
                .unwrap()
                .progress_deadline_ms = u64::MAX)),
            InvalidArgument,
            "job.task_groups[0].update.progress_deadline_ms"
        ),
        case!(
            "healthy time 2^64-1 ms",
            jobs.register(job(|j| group(j)
                .update
                .as_mut()
                .unwrap()
                .min_healthy_time_ms = u64::MAX)),
            InvalidArgument,
            "job.task_groups[0].update.min_healthy_time_ms"
        ),
        // JobService reads and deregistration
        case!(
            "empty job id",
            jobs.deregister(JobDeregisterRequest {
                job_id: String::new(),
                purge: true
            }),
            InvalidArgument,
            "job_id"
        ),
        case!(
            "unknown job",
            jobs.deregister(JobDeregisterRequest {
                job_id: "ghost".into(),
                purge: true
            }),
            NotFound,
            "job_id"
        ),
        case!(
            "512 KiB job id",
            jobs.get(JobGetRequest {
                job_id: huge(),
                query: None
            }),
            InvalidArgument,
            "job_id"
        ),
        case!(
            "unknown job",
            jobs.get(JobGetRequest {
                job_id: "ghost".into(),
                query: None
            }),
            NotFound,
            "job_id"
        ),
        case!(
            "empty job id",
            jobs.allocations(JobAllocationsRequest {
                job_id: String::new(),
                query: None
            }),
            InvalidArgument,
            "job_id"
        ),
        case!(
            "unknown job",
            jobs.allocations(JobAllocationsRequest {
                job_id: "ghost".into(),
                query: None
            }),
            NotFound,
            "job_id"
        ),
        case!(
            "NUL job id",
            jobs.evaluations(JobEvaluationsRequest {
                job_id: "\0".into(),
                query: None
            }),
            InvalidArgument,
            "job_id"
        ),
        case!(
            "unknown job",
            jobs.evaluations(JobEvaluationsRequest {
                job_id: "ghost".into(),
                query: None
            }),
            NotFound,
            "job_id"
        ),
        // DeploymentService
        case!(
            "empty id",
            deployments.get(DeploymentGetRequest {
                deployment_id: String::new(),
                query: None
            }),
            InvalidArgument,
            "deployment_id"
        ),
        case!(
            "unknown deployment",
            deployments.get(DeploymentGetRequest {
                deployment_id: "ghost".into(),
                query: None
            }),
            NotFound,
            "deployment_id"
        ),
        case!(
            "512 KiB job id",
            deployments.for_job(JobDeploymentsRequest {
                job_id: huge(),
                query: None
            }),
            InvalidArgument,
            "job_id"
        ),
        case!(
            "unknown job",
            deployments.for_job(JobDeploymentsRequest {
                job_id: "ghost".into(),
                query: None
            }),
            NotFound,
            "job_id"
        ),
        // EvalService
        case!(
            "empty eval id",
            evals.get(EvalGetRequest {
                eval_id: String::new(),
                query: None
            }),
            InvalidArgument,
            "eval_id"
        ),
        case!(
            "unknown eval",
            evals.get(EvalGetRequest {
                eval_id: "ghost".into(),
                query: None
            }),
            NotFound,
            "eval_id"
        ),
        case!(
            "no schedulers",
            evals.dequeue(EvalDequeueRequest {
                schedulers: vec![],
                timeout_ms: 1
            }),
            InvalidArgument,
            "schedulers"
        ),
        case!(
            "unknown scheduler",
            evals.dequeue(EvalDequeueRequest {
                schedulers: vec![1, 99],
                timeout_ms: u64::MAX
            }),
            InvalidArgument,
            "schedulers[1]"
        ),
        case!(
            "unset scheduler",
            evals.dequeue(EvalDequeueRequest {
                schedulers: vec![0],
                timeout_ms: 1
            }),
            InvalidArgument,
            "schedulers[0]"
        ),
        case!(
            "512 KiB eval id",
            evals.ack(ack(huge(), "t")),
            InvalidArgument,
            "eval_id"
        ),
        case!(
            "empty token",
            evals.ack(ack("eval-1".into(), "")),
            InvalidArgument,
            "token"
        ),
        case!(
            "stale delivery",
            evals.ack(ack("eval-1".into(), "stale")),
            FailedPrecondition,
            "eval_id"
        ),
        case!(
            "512 KiB eval id",
            evals.nack(ack(huge(), "t")),
            InvalidArgument,
            "eval_id"
        ),
        case!(
            "stale delivery",
            evals.nack(ack("eval-1".into(), "stale")),
            FailedPrecondition,
            "eval_id"
        ),
        case!(
            "no evals",
            evals.update(eval_update(|r| r.evals.clear())),
            InvalidArgument,
            "evals"
        ),
        case!(
            "empty token",
            evals.update(eval_update(|r| r.token.clear())),
            InvalidArgument,
            "token"
        ),
        case!(
            "unknown eval status",
            evals.update(eval_update(|r| r.evals[0].status = 99)),
            InvalidArgument,
            "evals[0].status"
        ),
        case!(
            "unknown eval type",
            evals.update(eval_update(|r| r.evals[0].r#type = -7)),
            InvalidArgument,
            "evals[0].type"
        ),
        case!(
            "512 KiB description",
            evals.update(eval_update(|r| r.evals[0].status_description = huge())),
            InvalidArgument,
            "evals[0].status_description"
        ),
        case!(
            "stale delivery",
            evals.update(eval_update(|_| {})),
            FailedPrecondition,
            "eval_id"
        ),
        case!(
            "a core evaluation written to the state",
            evals.update(eval_update(|r| r.evals[0].r#type = JobType::Core as i32)),
            InvalidArgument,
            "evals[0].type"
        ),
        case!(
            "class key without a datacenter",
            evals.update(eval_update(|r| {
                r.evals[0].class_eligibility = [("gpu".to_string(), true)].into()
            })),
            InvalidArgument,
            "evals[0].class_eligibility key"
        ),
        case!(
            "1,025 classes",
            evals.update(eval_update(|r| {
                r.evals[0].class_eligibility = many(1025, |i| (format!("dc{i}/c"), true))
                    .into_iter()
                    .collect()
            })),
            InvalidArgument,
            "evals[0].class_eligibility"
        ),
        case!(
            "nothing to collect",
            evals.reap(reap(None)),
            InvalidArgument,
            "collect"
        ),
        case!(
            "an empty collection",
            evals.reap(reap_jobs(vec![])),
            InvalidArgument,
            "collect"
        ),
        case!(
            "10,001 ids",
            evals.reap(reap_jobs(many(10_001, |i| format!("job-{i}")))),
            InvalidArgument,
            "collect"
        ),
        case!(
            "a space in an id",
            evals.reap(reap_jobs(vec!["a b".into()])),
            InvalidArgument,
            "jobs.job_ids[0]"
        ),
        case!(
            "stale delivery",
            evals.reap(reap_jobs(vec!["web".into()])),
            FailedPrecondition,
            "eval_id"
        ),
        // PlanService
        case!(
            "no plan",
            plans.submit(PlanSubmitRequest { plan: None }),
            InvalidArgument,
            "plan"
        ),
        case!(
            "unknown desired status",
            plans.submit(plan(|a| a.desired_status = 9)),
            InvalidArgument,
            "plan.node_allocation[node-1].allocs[0].desired_status"
        ),
        case!(
            "unknown client status",
            plans.submit(plan(|a| a.client_status = 9)),
            InvalidArgument,
            "plan.node_allocation[node-1].allocs[0].client_status"
        ),
        case!(
            "another job's alloc",
            plans.submit(plan(|a| a.job_id = "other".into())),
            InvalidArgument,
            "plan.node_allocation[node-1].allocs[0].job_id"
        ),
        case!(
            "another node's alloc",
            plans.submit(plan(|a| a.node_id = "node-2".into())),
            InvalidArgument,
            "plan.node_allocation[node-1].allocs[0].node_id"
        ),
        case!(
            "2^63 MHz",
            plans.submit(plan(|a| a.resources.as_mut().unwrap().cpu_mhz = 1 << 63)),
            InvalidArgument,
            "plan.node_allocation[node-1].allocs[0].resources.cpu_mhz"
        ),
        case!(
            "stale delivery",
            plans.submit(plan(|_| {})),
            FailedPrecondition,
            "eval_id"
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_request_gets_a_clear_error_on_every_server() {
    let (mut c, _) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    register_nodes(&c.client(), "n", 1, 1000, 4096).await;
    // The node's cases read it on every server, followers included.
    for id in c.ids() {
        eventually_has_node(&c.client_of(&[id]), "n-0").await;
    }
    for case in cases() {
        for id in c.ids() {
            let result = (case.call)(Clients::of(&c, id)).await;
            let what = format!("{} (server {id})", case.what);
            assert_refused(&what, result, case.code, case.field);
        }
    }
    still_serves(&mut c, "after-bad-input").await;
}

/// An unchanged re-registration still makes an evaluation, as its
/// `JobRegisterReply.eval_id` comment says, and keeps the job modify index.
#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_registration_makes_an_evaluation() {
    let (c, _) = Harness::with_leader(1, &[]).await;
    let client = c.client();
    let first = client
        .register_job(service_job("web", 1, 100, 64))
        .await
        .unwrap();
    let again = client
        .register_job(service_job("web", 1, 100, 64))
        .await
        .unwrap();
    assert!(!again.eval_id.is_empty() && again.eval_id != first.eval_id);
    assert!(again.index > first.index);
    assert_eq!(again.job_modify_index, first.job_modify_index);
}
