#!/usr/bin/env bash
# The mutation suite: each scheduler bug planted in the servers
# (STAMPEDE_PLANTED_BUG) must be caught by its invariant in a short audit
# run (loadgen/tests/planted_bugs.rs). Long by nature, about six and a half
# minutes on two cores, so apart from scripts/test.sh; .ci/run runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh --tests
cargo test -p loadgen --test planted_bugs "$@" -- --ignored
