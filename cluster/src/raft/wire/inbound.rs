//! Checks on the raft messages a peer sends, before openraft sees them.
//!
//! openraft trusts its peers: a vote whose term is near `u64::MAX` makes
//! every raft core that grants it overflow and panic at its next election
//! (and again on every restart, as the vote is stored), and entries that
//! are not consecutive break its assertions. A buggy or restarted member
//! must not brick the cluster, so terms and indexes that no genuine cluster
//! reaches are refused here, and so are entries out of order and entries
//! whose bytes are not a log entry. The API turns the error into
//! `InvalidArgument` naming the field.
//!
//! Membership is static (`--peers`), so a message is also checked against
//! the receiver's own view ([`Receiver`]): its sender must be a member, a
//! membership it carries (an entry, a snapshot's) must name exactly the
//! configured members, each with an address (openraft unwraps a voter's
//! address at its next election), and its term may be ahead of the
//! receiver's by at most [`MAX_TERM_AHEAD`]. These guard against a buggy or
//! misconfigured member; a server certificate is full trust, and a member
//! that means harm can still stop the cluster by other means.

use std::collections::BTreeSet;

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{EntryPayload, Membership, Vote};

use crate::raft::{LogId, NodeId, TypeConfig, MAX_TERM_AHEAD};

/// What the receiver knows that a genuine message agrees with.
#[derive(Debug, Clone, Copy)]
pub struct Receiver<'a> {
    /// The configured members (`--peers`).
    pub members: &'a BTreeSet<NodeId>,
    /// The receiver's own current term.
    pub term: u64,
}

impl Receiver<'_> {
    fn vote(&self, field: &str, v: &Vote<NodeId>) -> Result<(), Implausible> {
        vote(field, v)?;
        let term = v.leader_id.term;
        if term > self.term.saturating_add(MAX_TERM_AHEAD) {
            return Err(Implausible::TermAhead {
                field: format!("{field}.leader_id.term"),
                value: term,
                own: self.term,
            });
        }
        self.member(&format!("{field}.leader_id.node_id"), v.leader_id.node_id)
    }

    fn member(&self, field: &str, id: NodeId) -> Result<(), Implausible> {
        if self.members.contains(&id) {
            return Ok(());
        }
        Err(Implausible::NotAMember {
            field: field.to_string(),
            id,
            members: self.members.iter().copied().collect(),
        })
    }

    fn membership(
        &self,
        field: &str,
        m: &Membership<NodeId, openraft::BasicNode>,
    ) -> Result<(), Implausible> {
        let voters: BTreeSet<NodeId> = m.voter_ids().collect();
        let learners: Vec<NodeId> = m.learner_ids().collect();
        let unaddressed: Vec<NodeId> = (voters.iter().copied())
            .filter(|id| m.get_node(id).is_none())
            .collect();
        if voters == *self.members && learners.is_empty() && unaddressed.is_empty() {
            return Ok(());
        }
        Err(Implausible::Membership {
            field: field.to_string(),
            detail: format!(
                "voters {voters:?}, learners {learners:?}, voters without an address {unaddressed:?}; the configured members are {:?}, all voters, each with an address",
                self.members
            ),
        })
    }
}

/// Largest term or log index a peer may send: 2^32 below overflow, which a
/// cluster electing a leader every millisecond reaches in 500 million years.
pub const MAX_TERM_OR_INDEX: u64 = u64::MAX - (1 << 32);

/// A raft message that cannot come from a genuine member.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Implausible {
    #[error("{field}: {value} cannot be genuine; at most {MAX_TERM_OR_INDEX} allowed")]
    Overflowing { field: String, value: u64 },
    #[error("{field}: {detail}")]
    OutOfOrder { field: String, detail: String },
    #[error("{field}: not a log entry: {detail}")]
    Undecodable { field: String, detail: String },
    #[error("{field}: {value} is more than {MAX_TERM_AHEAD} ahead of this server's term {own}")]
    TermAhead { field: String, value: u64, own: u64 },
    #[error("{field}: server {id} is not a member (members: {members:?})")]
    NotAMember {
        field: String,
        id: NodeId,
        members: Vec<NodeId>,
    },
    #[error("{field}: not the configured membership: {detail}")]
    Membership { field: String, detail: String },
}

fn bounded(field: impl FnOnce() -> String, value: u64) -> Result<(), Implausible> {
    if value > MAX_TERM_OR_INDEX {
        return Err(Implausible::Overflowing {
            field: field(),
            value,
        });
    }
    Ok(())
}

fn vote(field: &str, v: &Vote<NodeId>) -> Result<(), Implausible> {
    bounded(|| format!("{field}.leader_id.term"), v.leader_id.term)
}

fn log_id(field: &str, id: Option<&LogId>) -> Result<(), Implausible> {
    let Some(id) = id else { return Ok(()) };
    bounded(|| format!("{field}.leader_id.term"), id.leader_id.term)?;
    bounded(|| format!("{field}.index"), id.index)
}

/// AppendEntries: bounded terms and indexes, and entries that follow
/// `prev_log_id` one index at a time, in terms that never go down or past
/// the sender's own.
pub fn append_entries(
    rpc: &AppendEntriesRequest<TypeConfig>,
    at: Receiver,
) -> Result<(), Implausible> {
    at.vote("vote", &rpc.vote)?;
    log_id("prev_log_id", rpc.prev_log_id.as_ref())?;
    log_id("leader_commit", rpc.leader_commit.as_ref())?;
    let first = rpc.prev_log_id.map_or(0, |l| l.index + 1);
    let mut term = rpc.prev_log_id.map_or(0, |l| l.leader_id.term);
    for (i, e) in rpc.entries.iter().enumerate() {
        let next = first + i as u64;
        let field = || format!("entries[{i}].log_id");
        log_id(&field(), Some(&e.log_id))?;
        if e.log_id.index != next {
            return Err(Implausible::OutOfOrder {
                field: format!("{}.index", field()),
                detail: format!(
                    "is {}; expected {next}, the next after the one before",
                    e.log_id.index
                ),
            });
        }
        let t = e.log_id.leader_id.term;
        if t < term || t > rpc.vote.leader_id.term {
            return Err(Implausible::OutOfOrder {
                field: format!("{}.leader_id.term", field()),
                detail: format!(
                    "is {t}; expected {term} to {} (not below the entry before, not above the sender's vote)",
                    rpc.vote.leader_id.term
                ),
            });
        }
        term = t;
        // Decoded here, so bytes that are not a LogEntry never reach the
        // log (where applying them would stop raft); the log and the wire
        // carry the bytes, so this is the one decode before the apply.
        match &e.payload {
            EntryPayload::Normal(cmd) => {
                cmd.entry().map_err(|err| Implausible::Undecodable {
                    field: format!("entries[{i}].payload"),
                    detail: err.to_string(),
                })?;
            }
            EntryPayload::Membership(m) => at.membership(&format!("entries[{i}].payload"), m)?,
            EntryPayload::Blank => {}
        }
    }
    Ok(())
}

/// Vote: bounded terms and indexes.
pub fn vote_request(rpc: &VoteRequest<NodeId>, at: Receiver) -> Result<(), Implausible> {
    at.vote("vote", &rpc.vote)?;
    log_id("last_log_id", rpc.last_log_id.as_ref())
}

/// A pre-vote (`raft::election`), given its fields: a member candidate, a
/// term within reach of the receiver's, a bounded last log id.
pub fn pre_vote(
    candidate: NodeId,
    term: u64,
    last_log_id: Option<&LogId>,
    at: Receiver,
) -> Result<(), Implausible> {
    bounded(|| "term".into(), term)?;
    if term > at.term.saturating_add(MAX_TERM_AHEAD) {
        return Err(Implausible::TermAhead {
            field: "term".into(),
            value: term,
            own: at.term,
        });
    }
    at.member("candidate", candidate)?;
    log_id("last_log_id", last_log_id)
}

/// InstallSnapshot: bounded terms and indexes in the vote and the
/// snapshot's metadata. Offsets and sizes are the receiver's to check, see
/// [`crate::raft::SnapshotReceiver`].
pub fn install_snapshot(
    rpc: &InstallSnapshotRequest<TypeConfig>,
    at: Receiver,
) -> Result<(), Implausible> {
    at.vote("vote", &rpc.vote)?;
    log_id("meta.last_log_id", rpc.meta.last_log_id.as_ref())?;
    log_id(
        "meta.last_membership.log_id",
        rpc.meta.last_membership.log_id().as_ref(),
    )?;
    at.membership(
        "meta.last_membership",
        rpc.meta.last_membership.membership(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::{Command, Entry};
    use openraft::CommittedLeaderId;
    use stampede_proto::LogEntry;

    static MEMBERS: std::sync::LazyLock<BTreeSet<NodeId>> =
        std::sync::LazyLock::new(|| [1, 2, 3].into());

    /// A member of {1, 2, 3} at term 5.
    fn at() -> Receiver<'static> {
        Receiver {
            members: &MEMBERS,
            term: 5,
        }
    }

    /// One whose own term is high enough that only the absolute bound applies.
    fn far() -> Receiver<'static> {
        Receiver {
            members: &MEMBERS,
            term: u64::MAX,
        }
    }

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: id(term, index),
            payload: EntryPayload::Normal(Command::new(LogEntry::default())),
        }
    }

    fn append(
        term: u64,
        prev: Option<LogId>,
        entries: Vec<Entry>,
    ) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(term, 1),
            prev_log_id: prev,
            entries,
            leader_commit: None,
        }
    }

    #[test]
    fn genuine_messages_pass() {
        let ok = append(
            3,
            Some(id(1, 4)),
            vec![entry(1, 5), entry(3, 6), entry(3, 7)],
        );
        assert_eq!(append_entries(&ok, at()), Ok(()));
        assert_eq!(
            append_entries(&append(1, None, vec![entry(1, 0)]), at()),
            Ok(())
        );
        let v = VoteRequest::new(Vote::new(7, 2), Some(id(5, 100)));
        assert_eq!(vote_request(&v, at()), Ok(()));
    }

    #[test]
    fn terms_and_indexes_near_overflow_are_named() {
        let v = VoteRequest::new(Vote::new(u64::MAX, 2), None);
        let err = vote_request(&v, far()).unwrap_err().to_string();
        assert!(
            err.starts_with("vote.leader_id.term: 18446744073709551615 cannot be genuine"),
            "{err}"
        );
        let v = VoteRequest::new(Vote::new(1, 2), Some(id(1, u64::MAX - 1)));
        let err = vote_request(&v, far()).unwrap_err().to_string();
        assert!(err.starts_with("last_log_id.index: "), "{err}");
        let a = append(2, None, vec![entry(2, 0)]);
        let a = AppendEntriesRequest {
            leader_commit: Some(id(2, u64::MAX)),
            ..a
        };
        let err = append_entries(&a, at()).unwrap_err().to_string();
        assert!(err.starts_with("leader_commit.index: "), "{err}");
    }

    #[test]
    fn entries_out_of_order_are_refused() {
        let gap = append(3, Some(id(1, 4)), vec![entry(1, 5), entry(1, 7)]);
        let err = append_entries(&gap, at()).unwrap_err().to_string();
        assert!(
            err.starts_with("entries[1].log_id.index: is 7; expected 6"),
            "{err}"
        );
        let back = append(3, Some(id(2, 4)), vec![entry(1, 5)]);
        let err = append_entries(&back, at()).unwrap_err().to_string();
        assert!(
            err.starts_with("entries[0].log_id.leader_id.term: is 1"),
            "{err}"
        );
        let ahead = append(3, None, vec![entry(4, 0)]);
        assert!(append_entries(&ahead, at()).is_err());
    }

    #[test]
    fn entries_that_do_not_decode_are_refused() {
        let junk = Entry {
            log_id: id(1, 6),
            payload: EntryPayload::Normal(Command::from_bytes(vec![0xff, 0xff, 0xff])),
        };
        let rpc = append(1, Some(id(1, 4)), vec![entry(1, 5), junk]);
        let err = append_entries(&rpc, at()).unwrap_err().to_string();
        assert!(
            err.starts_with("entries[1].payload: not a log entry: "),
            "{err}"
        );
    }

    fn membership(voters: &[NodeId], addressed: &[NodeId]) -> Entry {
        let nodes: std::collections::BTreeMap<NodeId, openraft::BasicNode> = addressed
            .iter()
            .map(|id| (*id, openraft::BasicNode::new(format!("127.0.0.1:{id}"))))
            .collect();
        let voters: BTreeSet<NodeId> = voters.iter().copied().collect();
        // As bytes off the wire: no voter is given a default address.
        let json = serde_json::json!({"configs": [voters], "nodes": nodes});
        let m: Membership<NodeId, openraft::BasicNode> = serde_json::from_value(json).unwrap();
        Entry {
            log_id: id(1, 5),
            payload: EntryPayload::Membership(m),
        }
    }

    #[test]
    fn only_the_configured_membership_with_addresses_passes() {
        let ok = append(1, Some(id(1, 4)), vec![membership(&[1, 2, 3], &[1, 2, 3])]);
        assert_eq!(append_entries(&ok, at()), Ok(()));
        for (voters, addressed) in [
            (&[1, 2, 3, 9][..], &[1, 2, 3, 9][..]),
            (&[1, 2], &[1, 2]),
            (&[1, 2, 3], &[1, 2]),
        ] {
            let bad = append(1, Some(id(1, 4)), vec![membership(voters, addressed)]);
            let err = append_entries(&bad, at()).unwrap_err().to_string();
            assert!(
                err.starts_with("entries[0].payload: not the configured membership"),
                "{voters:?} {addressed:?}: {err}"
            );
        }
    }

    #[test]
    fn a_term_far_ahead_of_the_receivers_or_a_non_member_is_refused() {
        let ahead = VoteRequest::new(Vote::new(5 + MAX_TERM_AHEAD + 1, 2), None);
        let err = vote_request(&ahead, at()).unwrap_err().to_string();
        assert!(err.contains("ahead of this server's term 5"), "{err}");
        let just = VoteRequest::new(Vote::new(5 + MAX_TERM_AHEAD, 2), None);
        assert_eq!(vote_request(&just, at()), Ok(()));
        let stranger = VoteRequest::new(Vote::new(6, 9), None);
        let err = vote_request(&stranger, at()).unwrap_err().to_string();
        assert!(
            err.starts_with("vote.leader_id.node_id: server 9 is not a member"),
            "{err}"
        );
        let from_stranger = AppendEntriesRequest {
            vote: Vote::new_committed(5, 9),
            ..append(5, None, vec![])
        };
        assert!(append_entries(&from_stranger, at()).is_err());
    }
}
