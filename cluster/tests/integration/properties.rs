//! Property tests: random bytes and random well-formed messages go through
//! decoding and validation without a panic, whatever validation accepts
//! keeps the documented limits, and every refusal names a field in a short
//! message.

use cluster::model::validate::{self, InvalidField};
use cluster::raft::client_write::{prepare, ClientWrite, Quotas};
use cluster::raft::{inbound, NodeId, TypeConfig};
use cluster::state::State;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use prost::Message;
use stampede_proto::*;

/// Names that are fine, names that are not, and anything at all.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9._:-]{1,12}",
        Just(String::new()),
        "[a-z]{0,4}\u{0}[a-z]{0,4}",
        ".{0,40}",
        (100usize..300).prop_map(|n| "y".repeat(n)),
    ]
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![0..10u64, 0..2_000_000u64, any::<u64>(), Just(u64::MAX)]
}

fn enum_value() -> impl Strategy<Value = i32> {
    prop_oneof![-1..7i32, any::<i32>()]
}

fn resources() -> impl Strategy<Value = Option<Resources>> {
    proptest::option::weighted(
        0.9,
        (number(), number()).prop_map(|(cpu_mhz, memory_mb)| Resources { cpu_mhz, memory_mb }),
    )
}

fn group() -> impl Strategy<Value = TaskGroup> {
    (
        text(),
        prop_oneof![0..5u32, any::<u32>()],
        resources(),
        vec((enum_value(), enum_value(), text()), 0..3),
        proptest::option::of((0..3u32, 0..3u32, number(), number())),
        btree_map(text(), text(), 0..3),
    )
        .prop_map(
            |(name, count, resources, constraints, update, meta)| TaskGroup {
                name,
                count: Some(count),
                resources,
                constraints: constraints
                    .into_iter()
                    .map(|(target, operand, value)| Constraint {
                        target,
                        operand,
                        value,
                    })
                    .collect(),
                update: update.map(|(max_parallel, canary, healthy, deadline)| UpdateStrategy {
                    max_parallel,
                    canary,
                    min_healthy_time_ms: healthy,
                    progress_deadline_ms: deadline,
                    auto_promote: false,
                }),
                meta,
                spec_version: 0,
            },
        )
}

fn job() -> impl Strategy<Value = Job> {
    (
        text(),
        enum_value(),
        prop_oneof![0..101u32, any::<u32>()],
        vec(text(), 0..3),
        vec(group(), 0..4),
    )
        .prop_map(|(id, r#type, priority, datacenters, task_groups)| Job {
            id,
            r#type,
            priority,
            datacenters,
            task_groups,
            ..Default::default()
        })
}

fn node() -> impl Strategy<Value = Node> {
    (
        text(),
        text(),
        text(),
        resources(),
        btree_map(text(), text(), 0..3),
        enum_value(),
    )
        .prop_map(
            |(id, name, datacenter, resources, attributes, status)| Node {
                id,
                name,
                datacenter,
                resources,
                attributes,
                status,
                ..Default::default()
            },
        )
}

/// A refusal names a field, and its message stays short.
fn named(e: &InvalidField) -> Result<(), TestCaseError> {
    prop_assert!(!e.field.is_empty());
    prop_assert!(e.to_string().starts_with(&e.field));
    prop_assert!(e.to_string().len() < 512, "{} bytes", e.to_string().len());
    Ok(())
}

fn within_limits(r: &Resources) -> bool {
    (1..=validate::MAX_CPU_MHZ).contains(&r.cpu_mhz)
        && (1..=validate::MAX_MEMORY_MB).contains(&r.memory_mb)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic_decoding_or_checking(bytes in vec(any::<u8>(), 0..2048)) {
        let state = State::default();
        if let Ok(r) = NodeRegisterRequest::decode(&bytes[..]) {
            let _ = prepare(&ClientWrite::NodeRegister(r), 0, &state, &Quotas::NONE);
        }
        if let Ok(r) = JobRegisterRequest::decode(&bytes[..]) {
            let _ = prepare(&ClientWrite::JobRegister(r), 0, &state, &Quotas::NONE);
        }
        if let Ok(r) = JobDeregisterRequest::decode(&bytes[..]) {
            let _ = prepare(&ClientWrite::JobDeregister(r), 0, &state, &Quotas::NONE);
        }
        if let Ok(ForwardRequest { write: Some(w), ticket }) = ForwardRequest::decode(&bytes[..]) {
            let _ = prepare(&w, ticket, &state, &Quotas::NONE);
        }
        if let Ok(r) = NodeUpdateAllocRequest::decode(&bytes[..]) {
            for a in &r.allocs {
                let _ = validate::alloc_update("allocs[0]", a);
            }
        }
        if let Ok(r) = EvalUpdateRequest::decode(&bytes[..]) {
            for e in &r.evals {
                let _ = validate::eval("evals[0]", e);
            }
        }
        if let Ok(PlanSubmitRequest { plan: Some(p) }) = PlanSubmitRequest::decode(&bytes[..]) {
            let _ = validate::plan(&p);
        }
        if let Ok(r) = EvalDequeueRequest::decode(&bytes[..]) {
            let _ = validate::schedulers(&r.schedulers);
        }
        if let Ok(s) = StateSnapshot::decode(&bytes[..]) {
            let _ = State::from_snapshot(s, 1);
        }
        if let Err(e) = NodeGetRequest::decode(&bytes[..]) {
            let status = stampede_proto::codec::decode_error::<NodeGetRequest>(&e);
            prop_assert_eq!(status.code(), tonic::Code::InvalidArgument);
            prop_assert!(status.message().starts_with("NodeGetRequest: "));
        }
        let members = [1, 2, 3].into();
        let at = inbound::Receiver { members: &members, term: 5 };
        if let Ok(r) = bincode::deserialize::<AppendEntriesRequest<TypeConfig>>(&bytes) {
            let _ = inbound::append_entries(&r, at);
        }
        if let Ok(r) = bincode::deserialize::<VoteRequest<NodeId>>(&bytes) {
            let _ = inbound::vote_request(&r, at);
        }
        if let Ok(r) = bincode::deserialize::<InstallSnapshotRequest<TypeConfig>>(&bytes) {
            let _ = inbound::install_snapshot(&r, at);
        }
    }

    #[test]
    fn accepted_jobs_keep_the_limits(job in job()) {
        match validate::job(Some(&job)) {
            Err(e) => named(&e)?,
            Ok(_) => {
                prop_assert!(job.task_groups.len() <= validate::MAX_TASK_GROUPS);
                prop_assert!(job.priority <= validate::MAX_PRIORITY);
                for g in &job.task_groups {
                    prop_assert!(within_limits(g.resources.as_ref().unwrap()));
                    prop_assert!(g.meta.len() <= validate::MAX_MAP_ENTRIES);
                    if let Some(u) = &g.update {
                        prop_assert!(u.progress_deadline_ms <= validate::MAX_DURATION_MS);
                        prop_assert!(u.min_healthy_time_ms <= validate::MAX_DURATION_MS);
                    }
                }
                // What the leader writes for it is made without a panic.
                let write = ClientWrite::JobRegister(JobRegisterRequest { job: Some(job) });
                prop_assert!(prepare(&write, 0, &State::default(), &Quotas::NONE).is_ok());
            }
        }
    }

    #[test]
    fn accepted_nodes_keep_the_limits(node in node()) {
        match validate::node(Some(&node)) {
            Err(e) => named(&e)?,
            Ok(_) => {
                prop_assert!(within_limits(node.resources.as_ref().unwrap()));
                prop_assert!(NodeStatus::try_from(node.status).is_ok());
                prop_assert!(node.attributes.len() <= validate::MAX_MAP_ENTRIES);
            }
        }
    }

    #[test]
    fn client_updates_with_unknown_statuses_are_refused(
        id in text(),
        status in enum_value(),
        description in text(),
    ) {
        let a = Allocation { id, client_status: status, client_description: description, ..Default::default() };
        match validate::alloc_update("allocs[0]", &a) {
            Err(e) => named(&e)?,
            Ok(()) => prop_assert!(matches!(
                AllocClientStatus::try_from(status),
                Ok(s) if s != AllocClientStatus::Unspecified
            )),
        }
    }

    #[test]
    fn a_quoted_value_is_short(value in any::<String>(), long in 0usize..100_000) {
        let value = value.repeat(1 + long / (value.len() + 1));
        prop_assert!(validate::quote(&value).len() <= 4 * validate::QUOTE_LEN + 32);
    }
}
