#!/usr/bin/env bash
# The mutation suite: each scheduler bug planted in the servers
# (STAMPEDE_PLANTED_BUG) must be caught by its invariant in a short audit
# run (loadgen/tests/planted_bugs.rs). Long by nature, about six and a half
# minutes on two cores, so apart from scripts/test.sh; .ci/run runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh --tests
# The debug binaries its runs start (the plants exist only in debug builds),
# with the features the test build resolves (the reason is in scripts/build.sh).
cargo build --bin cluster --bin nodesim --bin loadgen --test planted_bugs
cargo test --test planted_bugs "$@" -- --ignored
