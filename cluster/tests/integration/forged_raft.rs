//! Raft messages no genuine member could send, sent to every server: terms
//! and indexes near overflow, entries out of order, snapshot chunks at
//! absurd offsets or too large, a snapshot that does not decode, payloads
//! that are not raft messages, and forwarded writes that a direct call
//! would refuse. Each is refused with `InvalidArgument` naming the field
//! before openraft sees it; every server stays up, raft keeps running,
//! survives a restart, and a normal job still schedules.

use crate::common;

use cluster::raft::election::{PreVoteRequest, PreVoteResponse};
use cluster::raft::{Command, Entry, LogId, NodeId, SnapshotMeta, TypeConfig};
use common::{assert_refused, still_serves};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use std::collections::BTreeMap;

use cluster::raft::StoredMembership;
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, Membership, Vote};
use serde::Serialize;
use stampede_launch::testing::Harness;
use stampede_proto::raft_service_client::RaftServiceClient;
use stampede_proto::{
    forward_answer, forward_request::Write, ForwardRequest, Job, JobDeregisterRequest,
    JobRegisterRequest, LogEntry, NodeRegisterRequest, RaftPayload,
};
use tonic::transport::Channel;
use tonic::Code;

fn payload<T: Serialize>(msg: &T) -> RaftPayload {
    RaftPayload {
        data: bincode::serialize(msg).unwrap(),
    }
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Command::new(LogEntry::default())),
    }
}

fn append(vote: Vote<NodeId>, prev: Option<LogId>, entries: Vec<Entry>) -> RaftPayload {
    payload(&AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: prev,
        entries,
        leader_commit: None,
    })
}

fn chunk(vote: Vote<NodeId>, id: &str, offset: u64, data: Vec<u8>, done: bool) -> RaftPayload {
    payload(&InstallSnapshotRequest::<TypeConfig> {
        vote,
        meta: SnapshotMeta {
            last_log_id: Some(log_id(vote.leader_id.term, 1)),
            snapshot_id: id.into(),
            last_membership: StoredMembership::new(
                Some(log_id(1, 0)),
                members(&[1, 2, 3], &[1, 2, 3]),
            ),
        },
        offset,
        data,
        done,
    })
}

/// A membership of `voters`, of which `addressed` have an address, as it
/// comes off the wire (no voter is given a default address).
fn members(voters: &[NodeId], addressed: &[NodeId]) -> Membership<NodeId, BasicNode> {
    let nodes: BTreeMap<NodeId, BasicNode> = (addressed.iter())
        .map(|id| (*id, BasicNode::new(format!("127.0.0.1:{id}"))))
        .collect();
    let json = serde_json::json!({"configs": [voters], "nodes": nodes});
    serde_json::from_value(json).unwrap()
}

/// A raft client of server `id` holding a server certificate: what a buggy
/// or restarted member sends must not brick the cluster either.
fn client(c: &Harness, id: u64) -> RaftServiceClient<Channel> {
    stampede_proto::sized!(RaftServiceClient::new(
        c.channel(id, stampede_proto::security::Role::Server)
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_raft_messages_are_refused_and_the_cluster_carries_on() {
    let (mut c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let status = c.status(leader).await.unwrap();
    // The leader's own vote: a chunk with it passes the vote check and
    // reaches the offset, size and decode checks.
    let current = Vote::new_committed(status.term, leader);
    let overflowing = Vote::new(u64::MAX, 7);

    for id in c.ids() {
        let mut raft = client(&c, id);
        let on = |what: &str| format!("{what} (server {id})");

        let r = raft
            .vote(payload(&VoteRequest::new(overflowing, None)))
            .await;
        assert_refused(
            &on("vote at term 2^64-1"),
            r,
            Code::InvalidArgument,
            "vote.leader_id.term",
        );
        let near: Vote<NodeId> = Vote::new(u64::MAX - (1 << 31), 7);
        let r = raft.vote(payload(&VoteRequest::new(near, None))).await;
        assert_refused(
            &on("vote 2^31 below overflow"),
            r,
            Code::InvalidArgument,
            "vote.leader_id.term",
        );
        let r = raft
            .vote(payload(&VoteRequest::new(
                Vote::new(1, leader),
                Some(log_id(1, u64::MAX)),
            )))
            .await;
        assert_refused(
            &on("vote at index 2^64-1"),
            r,
            Code::InvalidArgument,
            "last_log_id.index",
        );

        let r = raft.append_entries(append(overflowing, None, vec![])).await;
        assert_refused(
            &on("append at term 2^64-1"),
            r,
            Code::InvalidArgument,
            "vote.leader_id.term",
        );
        let r = raft
            .append_entries(append(
                Vote::new_committed(1, leader),
                Some(log_id(1, u64::MAX - 1)),
                vec![],
            ))
            .await;
        assert_refused(
            &on("append after index 2^64-2"),
            r,
            Code::InvalidArgument,
            "prev_log_id.index",
        );
        let r = raft
            .append_entries(append(
                Vote::new_committed(1, leader),
                Some(log_id(1, 4)),
                vec![entry(1, 5), entry(1, 9)],
            ))
            .await;
        assert_refused(
            &on("append with a gap"),
            r,
            Code::InvalidArgument,
            "entries[1].log_id.index",
        );
        let r = raft
            .append_entries(append(
                Vote::new_committed(1, leader),
                None,
                vec![entry(3, 0)],
            ))
            .await;
        assert_refused(
            &on("append past its term"),
            r,
            Code::InvalidArgument,
            "entries[0].log_id.leader_id.term",
        );
        let junk = Entry {
            log_id: log_id(1, 0),
            payload: EntryPayload::Normal(Command::from_bytes(vec![0xff, 0xff, 0xff])),
        };
        let r = raft
            .append_entries(append(Vote::new_committed(1, leader), None, vec![junk]))
            .await;
        assert_refused(
            &on("append of bytes that are not a log entry"),
            r,
            Code::InvalidArgument,
            "entries[0].payload",
        );
        // A membership with a voter that has no address (openraft unwraps
        // it at the next election), or with a stranger: refused.
        for (what, voters, addressed) in [
            (
                "membership with a voter without an address",
                &[1, 2, 3][..],
                &[1, 2][..],
            ),
            ("membership with a stranger", &[1, 2, 3, 9], &[1, 2, 3, 9]),
        ] {
            let forged = Entry {
                log_id: log_id(status.term, 0),
                payload: EntryPayload::Membership(members(voters, addressed)),
            };
            let r = raft
                .append_entries(append(current, None, vec![forged]))
                .await;
            assert_refused(
                &on(what),
                r,
                Code::InvalidArgument,
                "entries[0].payload: not the configured membership",
            );
        }
        // A term far ahead of the receiver's, and a vote from a stranger.
        let far = Vote::new(status.term + (1 << 24) + 10, leader);
        let r = raft.vote(payload(&VoteRequest::new(far, None))).await;
        assert_refused(
            &on("vote 2^24 terms ahead"),
            r,
            Code::InvalidArgument,
            "vote.leader_id.term",
        );
        let r = raft.append_entries(append(far, None, vec![])).await;
        assert_refused(
            &on("append 2^24 terms ahead"),
            r,
            Code::InvalidArgument,
            "vote.leader_id.term",
        );
        let stranger: Vote<NodeId> = Vote::new(status.term + 1, 9);
        let r = raft.vote(payload(&VoteRequest::new(stranger, None))).await;
        assert_refused(
            &on("vote from a stranger"),
            r,
            Code::InvalidArgument,
            "vote.leader_id.node_id: server 9 is not a member",
        );
        // Pre-votes: a stranger, a term out of reach, bytes that are not one.
        let pre_vote = |candidate, term, last: Option<LogId>| {
            payload(&PreVoteRequest {
                candidate,
                term,
                last_log_id: last,
            })
        };
        let r = raft.pre_vote(pre_vote(9, status.term + 1, None)).await;
        assert_refused(
            &on("pre-vote from a stranger"),
            r,
            Code::InvalidArgument,
            "candidate: server 9 is not a member",
        );
        let r = raft
            .pre_vote(pre_vote(leader, status.term + (1 << 24) + 10, None))
            .await;
        assert_refused(
            &on("pre-vote 2^24 terms ahead"),
            r,
            Code::InvalidArgument,
            "term",
        );
        let r = raft
            .pre_vote(pre_vote(leader, status.term + 1, Some(log_id(1, u64::MAX))))
            .await;
        assert_refused(
            &on("pre-vote at index 2^64-1"),
            r,
            Code::InvalidArgument,
            "last_log_id.index",
        );
        let r = raft
            .pre_vote(RaftPayload {
                data: vec![0xff; 3],
            })
            .await;
        assert_refused(&on("pre-vote of junk"), r, Code::InvalidArgument, "data");
        // A genuine member's pre-vote, while the leader is alive: refused,
        // and it raised no term.
        let other = c.ids_except(id)[0];
        let answer = raft
            .pre_vote(pre_vote(
                other,
                status.term + 1,
                Some(log_id(u64::from(u32::MAX), 1 << 40)),
            ))
            .await
            .unwrap()
            .into_inner();
        let answer: PreVoteResponse = bincode::deserialize(&answer.data).unwrap();
        assert!(
            !answer.granted,
            "{}: {answer:?}",
            on("a pre-vote with the leader alive")
        );
        assert_eq!(c.status(id).await.unwrap().term, status.term);

        let mut snapshot: InstallSnapshotRequest<TypeConfig> =
            bincode::deserialize(&chunk(current, "strangers", 0, vec![1], true).data).unwrap();
        snapshot.meta.last_membership =
            StoredMembership::new(Some(log_id(1, 0)), members(&[1, 2], &[1, 2]));
        let r = raft.install_snapshot(payload(&snapshot)).await;
        assert_refused(
            &on("snapshot of another membership"),
            r,
            Code::InvalidArgument,
            "meta.last_membership",
        );

        let r = raft
            .install_snapshot(chunk(current, "forged", 1 << 62, vec![1], false))
            .await;
        assert_refused(
            &on("chunk at offset 2^62"),
            r,
            Code::InvalidArgument,
            "offset",
        );
        let r = raft
            .install_snapshot(chunk(current, "forged", u64::MAX, vec![1], false))
            .await;
        assert_refused(
            &on("chunk at offset 2^64-1"),
            r,
            Code::InvalidArgument,
            "offset",
        );
        let r = raft
            .install_snapshot(chunk(current, "forged", 10, vec![1], false))
            .await;
        assert_refused(
            &on("chunk out of order"),
            r,
            Code::InvalidArgument,
            "offset: is 10",
        );
        let r = raft
            .install_snapshot(chunk(overflowing, "forged", 0, vec![1], true))
            .await;
        assert_refused(
            &on("chunk at term 2^64-1"),
            r,
            Code::InvalidArgument,
            "vote.leader_id.term",
        );
        // Garbage that does not decode as a StateSnapshot, in two chunks.
        let r = raft
            .install_snapshot(chunk(current, "garbage", 0, vec![0xff; 100], false))
            .await;
        assert!(r.is_ok(), "{}", on("the first chunk is taken"));
        let r = raft
            .install_snapshot(chunk(current, "garbage", 100, vec![0xff; 100], true))
            .await;
        assert_refused(
            &on("garbage snapshot"),
            r,
            Code::InvalidArgument,
            "data: the finished snapshot does not decode",
        );

        for (what, data) in [("empty", vec![]), ("random", vec![0xa5; 37])] {
            let bad = RaftPayload { data };
            let r = raft.append_entries(bad.clone()).await;
            assert_refused(
                &on(&format!("{what} append")),
                r,
                Code::InvalidArgument,
                "data: not a raft message",
            );
            let r = raft.vote(bad.clone()).await;
            assert_refused(
                &on(&format!("{what} vote")),
                r,
                Code::InvalidArgument,
                "data: not a raft message",
            );
            let r = raft.install_snapshot(bad).await;
            assert_refused(
                &on(&format!("{what} snapshot")),
                r,
                Code::InvalidArgument,
                "data: not a raft message",
            );
        }
        // The same checks on the stream the leader replicates over: a
        // forged message is refused with the same status, and it is the
        // stream's last answer.
        for (what, bad, field) in [
            (
                "streamed append at term 2^64-1",
                append(overflowing, None, vec![]),
                "vote.leader_id.term",
            ),
            (
                "streamed random bytes",
                RaftPayload {
                    data: vec![0xa5; 37],
                },
                "data: not a raft message",
            ),
        ] {
            let after = append(Vote::new_committed(1, leader), None, vec![]);
            let mut answers = raft
                .append_entries_stream(tokio_stream::iter([bad, after]))
                .await
                .expect("the stream opens")
                .into_inner();
            assert_refused(
                &on(what),
                answers.message().await,
                Code::InvalidArgument,
                field,
            );
            assert!(
                matches!(answers.message().await, Ok(None) | Err(_)),
                "{}",
                on("nothing is answered after a refused message")
            );
        }

        // A vote, no previous entry, then a list that claims 2^62 entries.
        let mut data = bincode::serialize(&Vote::new_committed(1u64, leader)).unwrap();
        data.push(0);
        data.extend((1u64 << 62).to_le_bytes());
        let r = raft.append_entries(RaftPayload { data }).await;
        assert_refused(
            &on("2^62 entries claimed"),
            r,
            Code::InvalidArgument,
            "data: not a raft message",
        );

        // Forwarded writes are validated as the direct calls are.
        let forward = |write| ForwardRequest { write, ticket: 0 };
        let r = raft.forward(forward(None)).await;
        assert_refused(
            &on("forward of nothing"),
            r,
            Code::InvalidArgument,
            "write: is required",
        );
        let job = Job {
            id: "x".repeat(1 << 20),
            ..Default::default()
        };
        let r = raft
            .forward(forward(Some(Write::JobRegister(JobRegisterRequest {
                job: Some(job),
            }))))
            .await;
        assert_refused(
            &on("forward of a 1 MiB job id"),
            r,
            Code::InvalidArgument,
            "job.id",
        );
        let mut node = stampede_launch::testing::node("forged");
        node.status = 99;
        let r = raft
            .forward(forward(Some(Write::NodeRegister(NodeRegisterRequest {
                node: Some(node),
                secret_id: stampede_launch::testing::secret_of("forged"),
            }))))
            .await;
        assert_refused(
            &on("forward of an unknown status"),
            r,
            Code::InvalidArgument,
            "node.status",
        );
        let r = raft
            .forward(forward(Some(Write::JobDeregister(JobDeregisterRequest {
                job_id: "ghost".into(),
                purge: true,
            }))))
            .await;
        // Whether the job exists is the leader's to decide, on current
        // state: a follower that is sent it names the leader instead.
        if id == leader {
            assert_refused(
                &on("forward of an unknown job"),
                r,
                Code::NotFound,
                "job_id",
            );
        } else {
            assert_refused(
                &on("forward of an unknown job"),
                r,
                Code::Unavailable,
                "this server is not the leader",
            );
        }

        // On the stream, each refusal is the answer to its own ticket, and
        // the stream goes on; a write without a ticket ends it.
        let long_id = Job {
            id: "x".repeat(1 << 20),
            ..Default::default()
        };
        let requests = [
            ForwardRequest {
                write: None,
                ticket: 7,
            },
            ForwardRequest {
                write: Some(Write::JobRegister(JobRegisterRequest {
                    job: Some(long_id),
                })),
                ticket: 8,
            },
            ForwardRequest {
                write: Some(Write::JobDeregister(JobDeregisterRequest {
                    job_id: "ghost".into(),
                    purge: true,
                })),
                ticket: 9,
            },
        ];
        let mut answers = raft
            .forward_stream(tokio_stream::iter(requests))
            .await
            .expect("the stream opens")
            .into_inner();
        let mut refused = std::collections::BTreeMap::new();
        while let Some(answer) = answers.message().await.expect("refusals are answers") {
            let Some(forward_answer::Outcome::Refused(r)) = answer.outcome else {
                panic!(
                    "{}: {answer:?}",
                    on("a forged write on the stream was taken")
                );
            };
            refused.insert(answer.ticket, (Code::from(r.code), r.message));
        }
        assert_eq!(
            refused.keys().copied().collect::<Vec<_>>(),
            [7, 8, 9],
            "{}",
            on("stream")
        );
        let unknown_job = match id == leader {
            true => (9, Code::NotFound, "job_id"),
            false => (9, Code::Unavailable, "not the leader"),
        };
        for (ticket, code, field) in [
            (7, Code::InvalidArgument, "write: is required"),
            (8, Code::InvalidArgument, "job.id"),
            unknown_job,
        ] {
            let (got, message) = &refused[&ticket];
            assert_eq!(*got, code, "{}: {message}", on("stream refusal"));
            assert!(
                message.contains(field),
                "{}: {message}",
                on("stream refusal")
            );
        }
        let mut answers = raft
            .forward_stream(tokio_stream::iter([ForwardRequest {
                write: None,
                ticket: 0,
            }]))
            .await
            .expect("the stream opens")
            .into_inner();
        assert_refused(
            &on("a write on the stream without a ticket"),
            answers.message().await,
            Code::InvalidArgument,
            "ticket: is required",
        );
    }
    // The one chunk above too large for any snapshot: 64 MiB and a byte.
    let follower = c.ids_except(leader)[0];
    let mut raft = client(&c, follower);
    let r = raft
        .install_snapshot(chunk(current, "big", 0, vec![0; (64 << 20) + 1], false))
        .await;
    assert_refused(
        "a chunk of 64 MiB and a byte",
        r,
        Code::InvalidArgument,
        "data: is 67108865 bytes",
    );

    still_serves(&mut c, "after-forgery").await;
    // Nothing forged was stored: a restarted server comes back and joins.
    c.restart(follower).unwrap();
    c.leader().await;
    still_serves(&mut c, "after-restart").await;
    // No forged term or membership lingers to block an election: with the
    // leader killed, the other two elect one within 2 s.
    let leader = c.leader().await;
    c.kill(leader).unwrap();
    let killed = std::time::Instant::now();
    let next = c
        .wait_for_leader(std::time::Duration::from_secs(2))
        .await
        .expect("a new leader within 2 s of the leader's kill");
    assert_ne!(next, leader);
    eprintln!("new leader {next} after {:?}", killed.elapsed());
    c.spawn(leader).unwrap();
    c.leader().await;
    still_serves(&mut c, "after-failover").await;
}
