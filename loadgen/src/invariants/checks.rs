//! The checks: pure functions over the servers' states and the stream's
//! record, each giving one [`Invariant`]. The ones that read every
//! allocation take one server at a time (`*_on`), so the audit holds one
//! server's allocations at once; `convergence` compares the others with
//! the first by a digest of each job's allocations ([`Baseline`]).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use stampede_proto::{DeploymentStatus, EvalStatus, Job, JobType, TaskGroup};

use super::record::{client_status_name, Outcome, Sightings, Write, WriteKind};
use super::state::{feasible, live, room, Alloc, AllocId, Allocs, JobsView, ServerState};
use super::{Found, Invariant};

#[cfg(test)]
fn views(servers: &[ServerState]) -> Vec<JobsView> {
    servers.iter().map(JobsView::of).collect()
}

/// On every node of every server, the live allocations fit the node.
#[cfg(test)]
pub fn capacity(servers: &[ServerState]) -> Invariant {
    let mut found = Found::default();
    let nodes: usize = servers.iter().map(|s| capacity_on(s, &mut found)).sum();
    Invariant::new(
        super::CAPACITY,
        found,
        format!("{nodes} nodes checked across {} servers", servers.len()),
    )
}

/// [`capacity`] on one server; how many nodes it checked.
pub fn capacity_on(s: &ServerState, found: &mut Found) -> usize {
    let used = s.used();
    for node in s.nodes.values() {
        let cap = node.resources.unwrap_or_default();
        let u = used.get(node.id.as_str()).copied().unwrap_or_default();
        if u.cpu_mhz > cap.cpu_mhz || u.memory_mb > cap.memory_mb {
            found.push(format!(
                "server {}: node {} holds {}/{} MHz, {}/{} MB",
                s.server, node.id, u.cpu_mhz, cap.cpu_mhz, u.memory_mb, cap.memory_mb
            ));
        }
    }
    s.nodes.len()
}

/// No two live allocations of one name (of one group on one node, for a
/// system job), and no more live allocations in a group than its count
/// (canaries aside).
#[cfg(test)]
pub fn duplicates(servers: &[ServerState]) -> Invariant {
    let mut found = Found::default();
    for s in servers {
        duplicates_on(s, &mut found);
    }
    Invariant::new(super::DUPLICATES, found, String::new())
}

/// [`duplicates`] on one server: every name live twice (by job, then
/// name), then every group above its count (by job, then group).
pub fn duplicates_on(s: &ServerState, found: &mut Found) {
    let mut twice = Found::default();
    let mut above = Found::default();
    for (job_id, allocs) in s.by_job() {
        let job = s.jobs.get(job_id);
        let system_job = job.is_some_and(|j| j.r#type == JobType::System as i32);
        // name or node -> allocation ids
        let mut by_slot: BTreeMap<String, Vec<&AllocId>> = BTreeMap::new();
        // group -> live count
        let mut per_group: BTreeMap<&str, u32> = BTreeMap::new();
        for (id, a) in allocs.iter().filter(|(_, a)| live(a) && !a.canary) {
            let system = a.job_type == JobType::System as i32 || system_job;
            let slot = match system {
                true => format!("{}.{} on node {}", a.job_id, a.task_group, a.node_id),
                false => a.name().into_owned(),
            };
            by_slot.entry(slot).or_default().push(id);
            if !system {
                *per_group.entry(&a.task_group).or_default() += 1;
            }
        }
        for (slot, ids) in by_slot.iter().filter(|(_, ids)| ids.len() > 1) {
            let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            twice.push(format!(
                "server {}: {slot} is live {} times ({})",
                s.server,
                ids.len(),
                ids.join(", ")
            ));
        }
        let Some(job) = job.filter(|j| !j.stop) else {
            continue; // stopped and purged jobs: acked_writes
        };
        for (group, n) in per_group {
            let count = group_of(job, group).map_or(0, |tg| tg.count());
            if n > count {
                above.push(format!(
                    "server {}: {job_id}.{group} has {n} live allocations, count {count}",
                    s.server
                ));
            }
        }
    }
    found.extend(twice);
    found.extend(above);
}

fn group_of<'a>(job: &'a Job, name: &str) -> Option<&'a TaskGroup> {
    job.task_groups.iter().find(|tg| tg.name == name)
}

/// The writes of each job, in the order they were sent.
fn by_job(writes: &[Write]) -> BTreeMap<&str, Vec<&Write>> {
    let mut out: BTreeMap<&str, Vec<&Write>> = BTreeMap::new();
    for w in writes {
        out.entry(w.job_id.as_str()).or_default().push(w);
    }
    for ws in out.values_mut() {
        ws.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
    }
    out
}

/// Whether server `s` shows the effect of `kind` on `job_id` as the job's
/// last write: a registration's spec and count, a stopped job (or one
/// collected since) with nothing live, or a purged job gone with nothing
/// live.
fn shows(s: &JobsView, job_id: &str, kind: WriteKind) -> bool {
    let job = s.jobs.get(job_id);
    let nothing_live = s.live_of(job_id) == 0;
    match kind {
        WriteKind::Register { version, count } => job.is_some_and(|j| has_spec(j, version, count)),
        WriteKind::Stop => job.is_none_or(|j| j.stop) && nothing_live,
        WriteKind::Purge => job.is_none() && nothing_live,
    }
}

/// A running job (not stopped) whose group is at `version` with `count`.
fn has_spec(job: &Job, version: u64, count: u32) -> bool {
    !job.stop
        && job.task_groups.first().is_some_and(|tg| {
            tg.count() == count && tg.meta.get("spec") == Some(&version.to_string())
        })
}

/// What a server holds of a job, in words.
fn describe(s: &JobsView, job_id: &str) -> String {
    let live = s.live_of(job_id);
    match s.jobs.get(job_id) {
        None => format!("absent, {live} live allocations"),
        Some(j) if j.stop => format!("stopped, {live} live allocations"),
        Some(j) => {
            let (spec, count) = j
                .task_groups
                .first()
                .map_or((None, 0), |tg| (tg.meta.get("spec").cloned(), tg.count()));
            format!(
                "running at spec {} count {count}",
                spec.unwrap_or_else(|| "?".into())
            )
        }
    }
}

fn kind_name(kind: WriteKind) -> String {
    match kind {
        WriteKind::Register { version, count } => format!("spec {version} count {count}"),
        WriteKind::Stop => "stopped".into(),
        WriteKind::Purge => "purged".into(),
    }
}

/// Every acknowledged write's effect is the final state on every server,
/// unless a later write may have overridden it. The final state must be
/// that of one of the writes that may have been applied last: an
/// acknowledged write that no other acknowledged write was sent after, or
/// any write without a definite answer (which may have been applied at any
/// time, or never). Writes refused with a definite error are left out
/// (`definite_errors` checks them).
#[cfg(test)]
pub fn acked_writes(servers: &[ServerState], writes: &[Write], seen: &Sightings) -> Invariant {
    acked_writes_in(&views(servers), writes, seen)
}

/// [`acked_writes`] over what it reads of each server.
pub fn acked_writes_in(servers: &[JobsView], writes: &[Write], seen: &Sightings) -> Invariant {
    let mut found = Found::default();
    let mut jobs = 0;
    for (job_id, ws) in by_job(writes) {
        let acked: Vec<&Write> = ws
            .iter()
            .copied()
            .filter(|w| w.outcome == Outcome::Acked)
            .collect();
        if acked.is_empty() {
            continue;
        }
        jobs += 1;
        let last: Vec<WriteKind> = ws
            .iter()
            .filter(|w| match w.outcome {
                Outcome::Acked => !acked.iter().any(|o| o.sent_s > w.answered_s),
                Outcome::Indefinite { .. } => true,
                Outcome::Definite { .. } => false,
            })
            .map(|w| w.kind)
            .collect();
        for s in servers {
            // A job seen dead (its work done) that is gone was collected.
            let collected = !s.jobs.contains_key(job_id) && seen.seen_dead(job_id);
            if !collected && !last.iter().any(|k| shows(s, job_id, *k)) {
                let expected: Vec<String> = last.iter().map(|k| kind_name(*k)).collect();
                found.push(format!(
                    "server {}: {job_id} is {}, expected {}",
                    s.server,
                    describe(s, job_id),
                    expected.join(" or ")
                ));
            }
        }
    }
    Invariant::new(
        super::ACKED_WRITES,
        found,
        format!("{jobs} jobs with acknowledged writes checked"),
    )
}

/// No write refused with a definite error took effect, where the final
/// state tells: a refused stop or purge whose job is nonetheless stopped or
/// gone (no other stop or purge of it was sent that may have taken
/// effect, and its registration was acknowledged so it was there), and a
/// refused registration whose exact spec and count the job holds (no other
/// write of that spec and count may have taken effect).
/// When a stop or purge `w` was refused `NotFound` though the job's
/// registration was acknowledged before `w` was sent, and no other stop or
/// purge was sent before `w` was answered (only those remove a job, a
/// purge at once, a stop through garbage collection): the time of that
/// acknowledgement. A write sent after an acknowledged one must see it.
fn refused_from_a_stale_view(w: &Write, code: &str, ws: &[&Write]) -> Option<f64> {
    if code != "NotFound" || !matches!(w.kind, WriteKind::Stop | WriteKind::Purge) {
        return None;
    }
    let removed = ws.iter().any(|o| {
        !std::ptr::eq(*o, w)
            && matches!(o.kind, WriteKind::Stop | WriteKind::Purge)
            && o.sent_s < w.answered_s
    });
    if removed {
        return None;
    }
    ws.iter()
        .filter(|o| o.outcome == Outcome::Acked && matches!(o.kind, WriteKind::Register { .. }))
        .map(|o| o.answered_s)
        .filter(|at| *at < w.sent_s)
        .reduce(f64::min)
}

#[cfg(test)]
pub fn definite_errors(servers: &[ServerState], writes: &[Write]) -> Invariant {
    definite_errors_in(&views(servers), writes)
}

/// [`definite_errors`] over what it reads of each server.
pub fn definite_errors_in(servers: &[JobsView], writes: &[Write]) -> Invariant {
    let mut found = Found::default();
    let mut refused = 0;
    for (job_id, ws) in by_job(writes) {
        let may_have = |w: &&&Write| !matches!(w.outcome, Outcome::Definite { .. });
        let registered = ws
            .iter()
            .any(|w| w.outcome == Outcome::Acked && matches!(w.kind, WriteKind::Register { .. }));
        let others_remove = ws
            .iter()
            .filter(may_have)
            .any(|w| matches!(w.kind, WriteKind::Stop | WriteKind::Purge));
        for w in &ws {
            let Outcome::Definite { code, .. } = &w.outcome else {
                continue;
            };
            refused += 1;
            if let Some(at) = refused_from_a_stale_view(w, code, &ws) {
                found.push(format!(
                    "{job_id} {} refused with {code} at {:.1}s, though its registration was \
                     acknowledged at {at:.1}s and nothing removed it before: refused from a \
                     state that was behind",
                    if w.kind == WriteKind::Stop {
                        "stop"
                    } else {
                        "purge"
                    },
                    w.sent_s,
                ));
            }
            for s in servers {
                let job = s.jobs.get(job_id);
                let took_effect = match w.kind {
                    WriteKind::Stop => !others_remove && job.is_some_and(|j| j.stop),
                    WriteKind::Purge => registered && !others_remove && job.is_none(),
                    WriteKind::Register { version, count } => {
                        let same = |o: &&&Write| o.kind == w.kind && !std::ptr::eq(**o, *w);
                        job.is_some_and(|j| has_spec(j, version, count))
                            && !ws.iter().filter(may_have).any(|o| same(&o))
                    }
                };
                if took_effect {
                    found.push(format!(
                        "server {}: {job_id} {} refused with {code} at {:.1}s, yet it is {}",
                        s.server,
                        match w.kind {
                            WriteKind::Register { .. } =>
                                format!("registration ({})", kind_name(w.kind)),
                            WriteKind::Stop => "stop".into(),
                            WriteKind::Purge => "purge".into(),
                        },
                        w.sent_s,
                        describe(s, job_id)
                    ));
                }
            }
        }
    }
    Invariant::new(
        super::DEFINITE_ERRORS,
        found,
        format!("{refused} writes refused with a definite error"),
    )
}

/// Every server holds the same jobs, allocations (with their statuses) and
/// deployments as the first.
#[cfg(test)]
pub fn convergence(servers: &[ServerState]) -> Invariant {
    let mut found = Found::default();
    let Some(first) = servers.first() else {
        return Invariant::new(super::CONVERGENCE, found, "no server read".into());
    };
    let base = Baseline::of(first);
    for s in &servers[1..] {
        let differing = base.differing(s);
        base.compare(s, &differing, &first.allocs, &mut found);
    }
    Invariant::new(super::CONVERGENCE, found, base.checked(servers.len()))
}

/// What `convergence` compares the other servers with, kept from the
/// first server once its allocations are dropped: its jobs' and
/// deployments' rows, and a digest of each job's allocations' rows. Where
/// a job's digest differs on another server, the first server's
/// allocations of that job are read again, and the rows compared one by
/// one to name what differs.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    server: u64,
    /// "job <id>" and "deployment <id>" -> row.
    rows: BTreeMap<String, String>,
    /// Job id (of the allocations, whether the server has the job or not)
    /// -> the digest of its allocations' rows.
    digests: HashMap<String, u128>,
    jobs: usize,
    allocs: usize,
    deployments: usize,
}

fn alloc_row(a: &Alloc) -> String {
    format!(
        "desired {} client {} on {} version {} healthy {:?} modified at {}",
        a.desired_status,
        client_status_name(a.client_status),
        a.node_id,
        a.job_version,
        a.healthy,
        a.modify_index
    )
}

/// Every job's and deployment's row of server `s`.
fn rows(s: &ServerState) -> BTreeMap<String, String> {
    let jobs = s.jobs.values().map(|j| {
        let row = format!(
            "version {} stop {} modified at {}",
            j.version, j.stop, j.modify_index
        );
        (format!("job {}", j.id), row)
    });
    let deployments = s.deployments.values().map(|d| {
        let row = format!(
            "status {} version {} modified at {}",
            d.status, d.job_version, d.modify_index
        );
        (format!("deployment {}", d.id), row)
    });
    jobs.chain(deployments).collect()
}

/// 128 bits of an allocation's id and row. A job's digest is their sum,
/// so it does not depend on the order they were read in.
fn row_hash(id: &AllocId, row: &str) -> u128 {
    let half = |seed: u8| {
        let mut h = DefaultHasher::new();
        seed.hash(&mut h);
        id.hash(&mut h);
        row.hash(&mut h);
        h.finish()
    };
    u128::from(half(0)) << 64 | u128::from(half(1))
}

/// The digest of each job's allocations on server `s`.
fn digests(s: &ServerState) -> HashMap<&str, u128> {
    let mut out: HashMap<&str, u128> = HashMap::new();
    for (id, a) in s.allocs.iter() {
        let d = out.entry(&a.job_id).or_default();
        *d = d.wrapping_add(row_hash(id, &alloc_row(a)));
    }
    out
}

impl Baseline {
    pub fn of(first: &ServerState) -> Self {
        Self {
            server: first.server,
            rows: rows(first),
            digests: digests(first)
                .into_iter()
                .map(|(j, d)| (j.to_string(), d))
                .collect(),
            jobs: first.jobs.len(),
            allocs: first.allocs.len(),
            deployments: first.deployments.len(),
        }
    }

    /// The jobs whose allocations differ on `s` from the first server's
    /// (by digest), also those of a job only one of them has allocations of.
    pub fn differing(&self, s: &ServerState) -> BTreeSet<String> {
        let theirs = digests(s);
        let ours = self
            .digests
            .iter()
            .filter(|(j, d)| theirs.get(j.as_str()) != Some(d))
            .map(|(j, _)| j.clone());
        let only_theirs = theirs
            .keys()
            .filter(|j| !self.digests.contains_key(**j))
            .map(|j| j.to_string());
        ours.chain(only_theirs).collect()
    }

    /// Every row of server `s` that differs from the first server's:
    /// the allocations of the `differing` jobs one by one (`first_allocs`:
    /// the first server's allocations of at least those jobs), then every
    /// deployment and job, each in the order of its key.
    pub fn compare(
        &self,
        s: &ServerState,
        differing: &BTreeSet<String>,
        first_allocs: &Allocs,
        found: &mut Found,
    ) {
        let mut differ = |key: &dyn std::fmt::Display, a: Option<&String>, b: Option<&String>| {
            if a != b {
                let show = |r: Option<&String>| r.cloned().unwrap_or_else(|| "absent".into());
                found.push(format!(
                    "{key}: server {} {}, server {} {}",
                    self.server,
                    show(a),
                    s.server,
                    show(b)
                ));
            }
        };
        // Both ordered by id: walked side by side, so a server that differs
        // everywhere costs no copy of either.
        fn of_differing<'a>(
            allocs: &'a Allocs,
            differing: &'a BTreeSet<String>,
        ) -> std::iter::Peekable<impl Iterator<Item = (&'a AllocId, &'a Alloc)>> {
            allocs
                .iter()
                .filter(|(_, a)| differing.contains(&*a.job_id))
                .peekable()
        }
        let mut ours = of_differing(first_allocs, differing);
        let mut theirs = of_differing(&s.allocs, differing);
        loop {
            let next = match (ours.peek(), theirs.peek()) {
                (None, None) => break,
                (Some((a, _)), Some((b, _))) => a.cmp(b),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
            };
            let (a, b) = match next {
                std::cmp::Ordering::Less => (ours.next(), None),
                std::cmp::Ordering::Greater => (None, theirs.next()),
                std::cmp::Ordering::Equal => (ours.next(), theirs.next()),
            };
            let Some(id) = a.or(b).map(|(id, _)| id) else {
                break;
            };
            let (a, b) = (a.map(|(_, a)| alloc_row(a)), b.map(|(_, b)| alloc_row(b)));
            differ(&format_args!("alloc {id}"), a.as_ref(), b.as_ref());
        }
        let other = rows(s);
        let keys: BTreeSet<&String> = self.rows.keys().chain(other.keys()).collect();
        for k in keys {
            differ(k, self.rows.get(k), other.get(k));
        }
    }

    /// What was compared, for a detail without violations.
    pub fn checked(&self, servers: usize) -> String {
        format!(
            "{} jobs, {} allocations, {} deployments on each of {servers} servers",
            self.jobs, self.allocs, self.deployments,
        )
    }
}

/// Every group short of its count is short for want of room: no node it
/// may use has room for one more, and the job has a blocked evaluation.
/// For a system job: every node it may use without its allocation has no
/// room for it.
pub fn liveness(s: &ServerState) -> Invariant {
    let mut found = Found::default();
    let used = s.used();
    let used_on = |node: &str| used.get(node).copied().unwrap_or_default();
    let by_job = s.by_job();
    let blocked: HashSet<&str> = s
        .evals
        .values()
        .filter(|e| e.status == EvalStatus::Blocked as i32)
        .map(|e| e.job_id.as_str())
        .collect();
    // Jobs with a deployment of their current version still running.
    let rolling_out: HashSet<&str> = s
        .deployments
        .values()
        .filter(|d| d.status == DeploymentStatus::Running as i32)
        .filter(|d| {
            s.jobs
                .get(&d.job_id)
                .is_some_and(|j| j.version == d.job_version)
        })
        .map(|d| d.job_id.as_str())
        .collect();
    for job in s.jobs.values().filter(|j| !j.stop) {
        let blocked = blocked.contains(job.id.as_str());
        let system = job.r#type == JobType::System as i32;
        let batch = job.r#type == JobType::Batch as i32;
        let all: &[(&AllocId, &Alloc)] = by_job.get(job.id.as_str()).map_or(&[], |v| v);
        for tg in &job.task_groups {
            let ask = tg.resources.unwrap_or_default();
            let ours = || {
                all.iter()
                    .map(|(_, a)| *a)
                    .filter(|a| *a.task_group == tg.name)
            };
            let roomy = |node: &&stampede_proto::Node| {
                feasible(node, job, tg) && room(node, used_on(&node.id), ask)
            };
            if system {
                let covered: BTreeSet<&str> =
                    ours().filter(|a| live(a)).map(|a| &*a.node_id).collect();
                let missing: Vec<&str> = s
                    .nodes
                    .values()
                    .filter(|n| !covered.contains(n.id.as_str()))
                    .filter(roomy)
                    .map(|n| n.id.as_str())
                    .collect();
                if !missing.is_empty() {
                    found.push(format!(
                        "{}.{}: not on {} node(s) with room, e.g. {}",
                        job.id,
                        tg.name,
                        missing.len(),
                        missing[0]
                    ));
                }
                continue;
            }
            // A batch allocation that completed has done its index's work.
            let placed: BTreeSet<u32> = ours()
                .filter(|a| {
                    live(a)
                        || (batch
                            && a.client_status
                                == stampede_proto::AllocClientStatus::Complete as i32)
                })
                .map(|a| a.index)
                .collect();
            let short = (tg.count() as usize).saturating_sub(placed.len());
            if short == 0 {
                continue;
            }
            // A rolling update places max_parallel at a time and waits for
            // each step's health: while a step's allocation of the current
            // version is not yet running and healthy (its node slow to say
            // so, under load), the rest waits for it, not for room. Whether
            // the deployment itself gets stuck is the `deployments` check's.
            let rolling = tg.update.is_some_and(|u| u.max_parallel > 0)
                && rolling_out.contains(job.id.as_str());
            let waiting_on_health = rolling
                && ours().any(|a| {
                    live(a)
                        && a.job_version >= tg.spec_version
                        && !(a.client_status == stampede_proto::AllocClientStatus::Running as i32
                            && a.healthy == Some(true))
                });
            if waiting_on_health {
                continue;
            }
            if let Some(node) = s.nodes.values().find(roomy) {
                found.push(format!(
                    "{}.{}: {short} unplaced while node {} has room ({})",
                    job.id,
                    tg.name,
                    node.id,
                    job_story(s, &job.id)
                ));
            } else if !blocked {
                found.push(format!(
                    "{}.{}: {short} unplaced without a blocked evaluation ({})",
                    job.id,
                    tg.name,
                    job_story(s, &job.id)
                ));
            }
        }
    }
    Invariant::new(
        super::LIVENESS,
        found,
        format!("server {}: {} jobs checked", s.server, s.jobs.len()),
    )
}

/// What the server last did for job `job_id`, for a liveness violation to
/// explain itself: its newest evaluation (how it ended and why) and its
/// newest deployment.
fn job_story(s: &ServerState, job_id: &str) -> String {
    let newest_eval = s
        .evals
        .values()
        .filter(|e| e.job_id == job_id)
        .max_by_key(|e| (e.modify_index, e.create_index));
    let eval = match newest_eval {
        Some(e) => format!(
            "newest evaluation {} at index {}, triggered by {}: {}{}",
            e.id,
            e.modify_index,
            e.triggered_by,
            EvalStatus::try_from(e.status).map_or("unknown status", |st| st.as_str_name()),
            match e.status_description.as_str() {
                "" => String::new(),
                why => format!(" ({why})"),
            }
        ),
        None => "no evaluation".into(),
    };
    let deployment = s
        .deployments
        .values()
        .filter(|d| d.job_id == job_id)
        .max_by_key(|d| d.modify_index)
        .map_or("no deployment".into(), |d| {
            format!(
                "newest deployment of version {}: {}",
                d.job_version,
                DeploymentStatus::try_from(d.status)
                    .map_or("unknown status", |st| st.as_str_name())
            )
        });
    format!("{eval}; {deployment}")
}

/// No deployment stays running once its job's version is fully placed,
/// running and healthy: every rolling group has at least its count of
/// live allocations of its current spec, all running and healthy.
pub fn deployments(s: &ServerState) -> Invariant {
    let mut found = Found::default();
    let by_job = s.by_job();
    for d in s
        .deployments
        .values()
        .filter(|d| d.status == DeploymentStatus::Running as i32)
    {
        let Some(job) = s.jobs.get(&d.job_id).filter(|j| !j.stop) else {
            continue;
        };
        if d.job_version != job.version {
            continue;
        }
        let live_allocs = || {
            by_job
                .get(job.id.as_str())
                .map_or(&[][..], |v| v)
                .iter()
                .map(|(_, a)| *a)
                .filter(|a| live(a))
        };
        let rolling: Vec<&TaskGroup> = job
            .task_groups
            .iter()
            .filter(|tg| tg.update.is_some_and(|u| u.max_parallel > 0))
            .collect();
        let done = !rolling.is_empty()
            && rolling.iter().all(|tg| {
                let current: Vec<_> = live_allocs()
                    .filter(|a| *a.task_group == tg.name && a.job_version >= tg.spec_version)
                    .collect();
                current.len() >= tg.count() as usize
                    && current.iter().all(|a| {
                        a.client_status == stampede_proto::AllocClientStatus::Running as i32
                            && a.healthy == Some(true)
                    })
            });
        if done {
            // What the deployment wants against the job's count tells a
            // deployment left behind by a scale from one that was not watched.
            let wants: Vec<String> = rolling
                .iter()
                .map(|tg| {
                    let total = d.task_groups.get(&tg.name).map_or(0, |g| g.desired_total);
                    format!("{} wants {total} of count {}", tg.name, tg.count())
                })
                .collect();
            found.push(format!(
                "deployment {} of {} version {} is running with every allocation running and healthy ({})",
                d.id,
                job.id,
                job.version,
                wants.join(", ")
            ));
        }
    }
    Invariant::new(
        super::DEPLOYMENTS,
        found,
        format!(
            "server {}: {} deployments checked",
            s.server,
            s.deployments.len()
        ),
    )
}

/// No allocation seen terminal on its client was seen live at a later index.
pub fn terminal_stays_terminal(seen: &Sightings) -> Invariant {
    let mut changed: Vec<(&AllocId, String)> = Vec::new();
    for (id, s) in &seen.allocs {
        if let Some((first, again)) = s.created_twice() {
            changed.push((
                id,
                format!(
                    "alloc {id}: created at index {first}, stored again at index {again} after garbage collection removed it"
                ),
            ));
            continue;
        }
        let Some((t, ts)) = s.terminal() else {
            continue;
        };
        // The latest sighting after the first terminal one that is not that
        // same terminal status: live again, or another terminal status.
        let later = [s.live(), s.last_terminal()]
            .into_iter()
            .flatten()
            .filter(|(i, status)| *i > t && *status != ts)
            .max();
        if let Some((l, ls)) = later {
            changed.push((
                id,
                format!(
                    "alloc {id}: {} at index {t}, {} at index {l}",
                    client_status_name(ts),
                    client_status_name(ls)
                ),
            ));
        }
    }
    changed.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut found = Found::default();
    for (_, v) in changed {
        found.push(v);
    }
    Invariant::new(
        super::TERMINAL_STAYS_TERMINAL,
        found,
        format!("{} allocations followed", seen.allocs.len()),
    )
}
