//! A client's write (a node or job registration, a job deregistration) as
//! the client sent it, and the log entry it becomes.
//!
//! The entry is made by the server that proposes it, the leader, from the
//! request and its own state. A follower forwards the request itself, never
//! an entry, so everything that reaches the log passed the same validation
//! as a direct call to the leader, with the same errors; a forged `Forward`
//! can write nothing a client could not.

use stampede_proto::log_entry::Msg;
use stampede_proto::{
    Job, JobDeregisterEntry, JobRegisterEntry, LogEntry, Node, NodeRegisterEntry,
};

use crate::model::identity::{self, NodeDenied};
use crate::model::new_eval;
use crate::model::validate::{self, quote, InvalidField};
use crate::state::State;

/// The write as the client sent it; what `RaftService.Forward` carries.
pub use stampede_proto::forward_request::Write as ClientWrite;

/// A client write refused before it was proposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Invalid(#[from] InvalidField),
    #[error("{0}")]
    NotFound(String),
    /// A registration of a node that registered with another secret.
    #[error(transparent)]
    Denied(#[from] NodeDenied),
    /// A write past one of the cluster's quotas (`ResourceExhausted`).
    #[error("{0}")]
    Exhausted(String),
}

impl Refused {
    /// Whether the refusal depends on the state (what exists, a node's
    /// secret, the quotas) rather than on the request alone: such a
    /// refusal is definite only where the state is current, on the leader
    /// after a read barrier.
    pub fn depends_on_state(&self) -> bool {
        !matches!(self, Refused::Invalid(_))
    }
}

/// How much the state may hold: a write past a quota is refused before it
/// is proposed. The flags and defaults are `cluster serve`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Jobs registered (stopped ones count until they are purged or
    /// collected): each is a row every snapshot and every new follower
    /// carries, and a key every job list reads.
    pub max_jobs: usize,
}

impl Quotas {
    /// `--max-jobs`' default.
    pub const MAX_JOBS: usize = 100_000;

    /// No quota: for the server's own writes in tests.
    pub const NONE: Quotas = Quotas {
        max_jobs: usize::MAX,
    };
}

/// The entry a write becomes, and the evaluation it creates (if any).
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub entry: LogEntry,
    pub eval_id: String,
}

/// What a committed client write answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub index: u64,
    pub eval_id: String,
}

/// Validates `write` and turns it into its log entry, on `state`. `ticket`
/// is the forwarding follower's name for the write (the ticket it waits
/// on), 0 for a direct call.
pub fn prepare(
    write: &ClientWrite,
    ticket: u64,
    state: &State,
    quotas: &Quotas,
) -> Result<Prepared, Refused> {
    let (msg, eval_id) = match write {
        ClientWrite::NodeRegister(req) => {
            let node = validate::node(req.node.as_ref())?;
            identity::secret_field("secret_id", &req.secret_id)?;
            identity::may_register(state.node_secret(&node.id), &node.id, &req.secret_id)?;
            let node = Node {
                create_index: 0,
                modify_index: 0,
                ..node.clone()
            };
            let entry = NodeRegisterEntry {
                node: Some(node),
                // The system jobs it may take are evaluated where the
                // entry applies (`State::apply`), on the jobs registered by then.
                evals: Vec::new(),
                ticket,
                secret_hash: stampede_proto::node_secret::hash(&req.secret_id).to_vec(),
            };
            (Msg::NodeRegister(entry), String::new())
        }
        ClientWrite::JobRegister(req) => {
            let job = validate::job(req.job.as_ref())?;
            let jobs = state.objects().jobs as usize;
            if jobs >= quotas.max_jobs && state.job(&job.id).is_none() {
                return Err(Refused::Exhausted(format!(
                    "{jobs} jobs are registered, the most this cluster takes (--max-jobs); \
                     deregister one with purge first"
                )));
            }
            // Only the spec is the client's; the server sets the rest.
            let mut job = Job {
                priority: match job.priority {
                    0 => validate::DEFAULT_PRIORITY,
                    p => p,
                },
                status: 0,
                stop: false,
                version: 0,
                create_index: 0,
                modify_index: 0,
                job_modify_index: 0,
                ..job.clone()
            };
            // An unset count is stored as the default it means, so the
            // scheduler and readers see the count the job runs with.
            for group in &mut job.task_groups {
                group.count = Some(validate::requested_count(group));
            }
            let eval = new_eval(&job, "job_register", None);
            let eval_id = eval.id.clone();
            let entry = JobRegisterEntry {
                job: Some(job),
                eval: Some(eval),
                ticket,
            };
            (Msg::JobRegister(entry), eval_id)
        }
        ClientWrite::JobDeregister(req) => {
            validate::id("job_id", &req.job_id)?;
            let job = state.job(&req.job_id).ok_or_else(|| {
                Refused::NotFound(format!(
                    "job_id: no job {} is registered",
                    quote(&req.job_id)
                ))
            })?;
            let eval = new_eval(&job, "job_deregister", None);
            let eval_id = eval.id.clone();
            let entry = JobDeregisterEntry {
                job_id: req.job_id.clone(),
                purge: req.purge,
                eval: Some(eval),
                ticket,
            };
            (Msg::JobDeregister(entry), eval_id)
        }
    };
    Ok(Prepared {
        entry: LogEntry { msg: Some(msg) },
        eval_id,
    })
}

/// Calls `found` with the ticket of each forwarded client write in `entry`
/// (a batch holds several) and what that write answers, applied at `index`.
pub fn for_each_ticket(entry: &LogEntry, index: u64, found: &mut impl FnMut(u64, Written)) {
    for command in entry.commands() {
        let (ticket, eval) = match &command.msg {
            Some(Msg::NodeRegister(e)) => (e.ticket, None),
            Some(Msg::JobRegister(e)) => (e.ticket, e.eval.as_ref()),
            Some(Msg::JobDeregister(e)) => (e.ticket, e.eval.as_ref()),
            _ => continue,
        };
        if ticket != 0 {
            let eval_id = eval.map(|e| e.id.clone()).unwrap_or_default();
            found(ticket, Written { index, eval_id });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::{JobDeregisterRequest, JobRegisterRequest, NodeRegisterRequest};

    #[test]
    fn a_write_is_validated_as_a_direct_call_is() {
        let state = State::default();
        let write = ClientWrite::NodeRegister(NodeRegisterRequest {
            node: None,
            secret_id: SECRET.into(),
        });
        let err = prepare(&write, 0, &state, &Quotas::NONE).unwrap_err();
        assert_eq!(err.to_string(), "node: is required");
        let write = ClientWrite::JobRegister(JobRegisterRequest {
            job: Some(Job {
                id: "x".repeat(1 << 20),
                ..Default::default()
            }),
        });
        let err = prepare(&write, 0, &state, &Quotas::NONE).unwrap_err();
        assert_eq!(
            err.to_string(),
            "job.id: is 1048576 bytes long; at most 128 allowed"
        );
        let write = ClientWrite::JobDeregister(JobDeregisterRequest {
            job_id: "ghost".into(),
            purge: false,
        });
        let err = prepare(&write, 0, &state, &Quotas::NONE).unwrap_err();
        assert!(matches!(err, Refused::NotFound(_)), "{err}");
    }

    #[test]
    fn the_server_sets_what_is_not_the_clients() {
        let job = Job {
            job_modify_index: 99,
            version: 7,
            ..a_job()
        };
        let write = ClientWrite::JobRegister(JobRegisterRequest { job: Some(job) });
        let prepared = prepare(&write, 0, &State::default(), &Quotas::NONE).unwrap();
        let Some(Msg::JobRegister(e)) = prepared.entry.msg else {
            panic!("not a job registration");
        };
        let job = e.job.unwrap();
        assert_eq!(
            (job.version, job.job_modify_index, job.priority),
            (0, 0, 50)
        );
        assert_eq!(e.eval.unwrap().id, prepared.eval_id);
    }

    #[test]
    fn a_forwarded_writes_ticket_is_found_alone_and_in_a_batch() {
        use stampede_proto::BatchEntry;
        let state = State::default();
        let job = ClientWrite::JobRegister(JobRegisterRequest { job: Some(a_job()) });
        let node = node_write("n1", SECRET);
        let forwarded_job = prepare(&job, 7, &state, &Quotas::NONE).unwrap();
        let forwarded_node = prepare(&node, 9, &state, &Quotas::NONE).unwrap();
        let direct = prepare(&job, 0, &state, &Quotas::NONE).unwrap();
        let mut found = Vec::new();
        for_each_ticket(&forwarded_job.entry, 5, &mut |t, w| found.push((t, w)));
        assert_eq!(
            found,
            [(
                7,
                Written {
                    index: 5,
                    eval_id: forwarded_job.eval_id.clone()
                }
            )]
        );
        found.clear();
        let batch = LogEntry {
            msg: Some(Msg::Batch(BatchEntry {
                entries: vec![
                    direct.entry,
                    forwarded_node.entry,
                    forwarded_job.entry.clone(),
                ],
            })),
        };
        for_each_ticket(&batch, 6, &mut |t, w| found.push((t, w)));
        let tickets: Vec<(u64, u64, String)> = found
            .into_iter()
            .map(|(t, w)| (t, w.index, w.eval_id))
            .collect();
        // The direct write (ticket 0) is no one's; a node registration
        // creates no evaluation.
        assert_eq!(
            tickets,
            [(9, 6, String::new()), (7, 6, forwarded_job.eval_id)]
        );
    }

    /// Prepares `write` on `state` as the leader does and applies its entry
    /// at `index`; returns the evaluation id the call answers with.
    fn register(state: &mut State, index: u64, write: &ClientWrite) -> String {
        let prepared = prepare(write, 0, state, &Quotas::NONE).unwrap();
        state.apply(
            index,
            &prepared.entry,
            &mut crate::state::Changes::default(),
        );
        prepared.eval_id
    }

    #[test]
    fn a_group_without_a_count_is_stored_with_the_default() {
        let mut job = a_job();
        job.task_groups[0].count = None;
        job.task_groups.push(stampede_proto::TaskGroup {
            name: "idle".into(),
            count: Some(0),
            ..job.task_groups[0].clone()
        });
        let mut state = State::default();
        register(
            &mut state,
            1,
            &ClientWrite::JobRegister(JobRegisterRequest { job: Some(job) }),
        );
        let stored = state.job("web").unwrap();
        let counts: Vec<Option<u32>> = stored.task_groups.iter().map(|g| g.count).collect();
        assert_eq!(
            counts,
            [Some(validate::DEFAULT_COUNT), Some(0)],
            "unset is the default; an explicit 0 stays a group scaled to zero"
        );
    }

    #[test]
    fn every_registration_creates_an_evaluation_and_only_a_change_a_version() {
        let mut state = State::default();
        let write = |job: Job| ClientWrite::JobRegister(JobRegisterRequest { job: Some(job) });
        let first = register(&mut state, 1, &write(a_job()));
        let job = state.job("web").unwrap();
        assert_eq!((job.version, job.job_modify_index), (0, 1));

        // The same spec again, with fields only the server sets filled in
        // as a client that read the job back would send them.
        let same = Job::clone(&job);
        let again = register(&mut state, 2, &write(same));
        assert!(!again.is_empty() && again != first, "a new evaluation");
        assert!(state.eval(&again).is_some());
        let job = state.job("web").unwrap();
        assert_eq!(
            (job.version, job.job_modify_index),
            (0, 1),
            "not a new version"
        );

        let mut changed = a_job();
        changed.task_groups[0].count = Some(2);
        let third = register(&mut state, 3, &write(changed));
        assert!(state.eval(&third).is_some());
        let job = state.job("web").unwrap();
        assert_eq!((job.version, job.job_modify_index), (1, 3));

        // A stopped job registered again with its old spec runs again.
        let stop = ClientWrite::JobDeregister(JobDeregisterRequest {
            job_id: "web".into(),
            purge: false,
        });
        register(&mut state, 4, &stop);
        let restarted = register(&mut state, 5, &write(Job::clone(&job)));
        assert!(state.eval(&restarted).is_some());
        let job = state.job("web").unwrap();
        assert_eq!((job.version, job.job_modify_index, job.stop), (2, 5, false));
        assert_eq!(state.job_evals("web").len(), 5);
    }

    const SECRET: &str = "0123456789abcdef-secret";

    fn node_write(id: &str, secret_id: &str) -> ClientWrite {
        ClientWrite::NodeRegister(NodeRegisterRequest {
            node: Some(Node {
                id: id.into(),
                datacenter: "dc1".into(),
                resources: Some(stampede_proto::Resources {
                    cpu_mhz: 1000,
                    memory_mb: 1024,
                }),
                ..Default::default()
            }),
            secret_id: secret_id.into(),
        })
    }

    #[test]
    fn a_node_registers_with_a_secret_of_which_only_the_hash_is_written() {
        let mut state = State::default();
        for (secret, reason) in [
            ("", "secret_id: is required"),
            ("short", "secret_id: is 5 bytes long"),
            ("0123456789abcdef\u{7}", "secret_id: holds a byte"),
        ] {
            let err = prepare(&node_write("n1", secret), 0, &state, &Quotas::NONE).unwrap_err();
            assert!(matches!(err, Refused::Invalid(_)), "{err}");
            assert!(err.to_string().starts_with(reason), "{err}");
        }
        let prepared = prepare(&node_write("n1", SECRET), 0, &state, &Quotas::NONE).unwrap();
        let Some(Msg::NodeRegister(e)) = &prepared.entry.msg else {
            panic!("not a node registration");
        };
        assert_eq!(e.secret_hash, stampede_proto::node_secret::hash(SECRET));
        let bytes = prost::Message::encode_to_vec(&prepared.entry);
        assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));
        register(&mut state, 1, &node_write("n1", SECRET));
        // Again with its own secret, as ever; with another, refused.
        prepare(&node_write("n1", SECRET), 0, &state, &Quotas::NONE).unwrap();
        let err = prepare(
            &node_write("n1", "0123456789abcdef-thief"),
            0,
            &state,
            &Quotas::NONE,
        )
        .unwrap_err();
        assert_eq!(err, Refused::Denied(NodeDenied::Mismatch("n1".into())));
        assert_eq!(err.to_string(), "secret_id does not match node n1");
    }

    fn a_job() -> Job {
        use stampede_proto::{JobType, Resources, TaskGroup};
        Job {
            id: "web".into(),
            r#type: JobType::Service as i32,
            task_groups: vec![TaskGroup {
                name: "app".into(),
                count: Some(1),
                resources: Some(Resources {
                    cpu_mhz: 100,
                    memory_mb: 64,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }
}
