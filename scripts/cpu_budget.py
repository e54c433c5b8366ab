#!/usr/bin/env python3
"""A placement's CPU budget by process and by mechanism, from a profiled run
(`scripts/profile.sh`): each process's samples (its folded stacks) are put
under the first mechanism whose pattern a stack matches, and each share is
turned into CPU-seconds per 1,000 placements with the run's own figure for
that process (`cpu_seconds_per_1000_placements_by_process` in summary.json).

    scripts/cpu_budget.py RUN_DIR              every process profiled in RUN_DIR/profile
    scripts/cpu_budget.py --self-test          proof that stacks land where they should

A stack counts once, under the first mechanism in the order below that
names one of its frames: the order goes from what a placement does (apply a
report, check a plan) to the machinery every call runs in (gRPC and its
streams, the runtime), so a report's apply counts as the apply, not as the
gRPC call it came in, and only what no mechanism claims counts as machinery.
Stacks that match none are "other" (the kernel, the allocator's own
threads, what has no frame of ours).
"""
import collections
import json
import os
import re
import sys

# (mechanism, pattern), the first match wins: one list per kind of process.
SERVER = [
    ("snapshots: build, send, install", r"encode_snapshot|build_snapshot|install_snapshot|snapshot-build|SnapshotStore"),
    ("apply: clients' reports", r"update_alloc_from_client"),
    ("apply: plans", r"State>::apply_plan|state::apply::.*apply_plan"),
    ("apply: other entries, waking queries", r"StateMachine::apply_slice|ApplyHub::applied"),
    ("client updates: checked, forwarded", r"LeaderCalls::update_alloc|update_relay"),
    ("client updates: the leader's batches", r"leader::alloc_updates"),
    ("plans: the leader's check and commit", r"leader::plan_apply"),
    ("scheduling (workers)", r"cluster::control::worker|cluster::scheduler::"),
    ("node queries", r"Api::client_allocs|cluster::state::blocking"),
    ("node calls: heartbeats, dispatch", r"Api::node_call|Api::update_status|leader::heartbeat"),
    ("raft: log store (RocksDB)", r"raft::storage::log_store|rocksdb::|rocksdb:"),
    ("raft: replication and its network", r"raft::wire|openraft::replication"),
    ("raft: core", r"openraft::"),
    ("gRPC, HTTP/2, TLS: framing, decoding, the streams", r"\bh2::|hyper::|tonic::|rustls::|hyper_util::|api::call_stream|api::auth"),
    ("tokio runtime", r"tokio::"),
]
NODESIM = [
    ("runners", r"MockRunner|nodesim::runner::"),
    ("node queries: answers taken in", r"nodesim::node::SimNode::(watch_loop|take|apply)"),
    ("update buffers", r"NodeSink|alloc_sync::merge|AllocSync::push"),
    ("update sends", r"AllocSync::send_batch|update_sender|AllocSync::(run|tick|sub_tick|visit)"),
    ("heartbeats, registration", r"SimNode::(heartbeat_loop|register)"),
    ("calls on the streams", r"nodesim::calls::"),
    ("gRPC, HTTP/2, TLS", r"\bh2::|hyper::|tonic::|rustls::|hyper_util::"),
    ("tokio runtime", r"tokio::"),
]
LOADGEN = [
    ("the stream: submissions, following jobs", r"loadgen::stream"),
    ("sampling the processes", r"loadgen::sampler|process_metrics"),
    ("gRPC, HTTP/2, TLS", r"\bh2::|hyper::|tonic::|rustls::|hyper_util::"),
    ("tokio runtime", r"tokio::"),
]


def mechanisms_of(name):
    if name.startswith("server"):
        return SERVER
    if name.startswith("nodesim"):
        return NODESIM
    return LOADGEN


def shares(lines, mechanisms):
    """Each mechanism's share of the samples in folded `lines` ("a;b;c N")."""
    compiled = [(m, re.compile(p)) for m, p in mechanisms]
    counts, total = collections.Counter(), 0
    for line in lines:
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        name = next((m for m, p in compiled if p.search(stack)), "other")
        counts[name] += int(n)
    return {m: c / total for m, c in counts.items()} if total else {}


def budget(run_dir):
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    variant = summary["variants"][0]
    by_process = variant.get("cpu_seconds_per_1000_placements_by_process") or {}
    profile = os.path.join(run_dir, "profile")
    out = []
    for folded in sorted(f for f in os.listdir(profile) if f.endswith(".folded")):
        name = folded[: -len(".folded")]
        cost = by_process.get(name)
        with open(os.path.join(profile, folded)) as f:
            got = shares(f, mechanisms_of(name))
        head = f"{name}: {cost:.4f} CPU-s per 1,000 placements" if cost is not None else f"{name}:"
        out.append(head)
        for m, s in sorted(got.items(), key=lambda kv: -kv[1]):
            per = f"{s * cost:.4f}" if cost is not None else "-"
            out.append(f"  {100 * s:5.1f}%  {per:>7}  {m}")
    return "\n".join(out)


def self_test():
    lines = [
        "main;tokio::run;cluster::raft::state_machine::StateMachine::apply_slice;cluster::state::allocs::<impl State>::update_alloc_from_client;imbl::get 30",
        "main;tokio::run;cluster::raft::state_machine::StateMachine::apply_slice;memcpy 10",
        "main;tonic::server;cluster::api::call_stream::Answers;cluster::control::calls::LeaderCalls::update_alloc;imbl::get 20",
        "main;tonic::server;cluster::api::call_stream::Answers;h2::codec::write 25",
        "swapper;[k] finish_task_switch 15",
    ]
    got = shares(lines, SERVER)
    want = {
        "apply: clients' reports": 0.3,
        "apply: other entries, waking queries": 0.1,
        "client updates: checked, forwarded": 0.2,
        "gRPC, HTTP/2, TLS: framing, decoding, the streams": 0.25,
        "other": 0.15,
    }
    if {k: round(v, 6) for k, v in got.items()} != want:
        print(f"cpu_budget self-test: FAILED: {got}", file=sys.stderr)
        return 1
    print("cpu_budget self-test: ok: each stack under its most specific mechanism")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(budget(sys.argv[1]))
