#!/usr/bin/env bash
# The release build of the three binaries (cluster, nodesim, loadgen) that
# scripts/run.sh runs and scripts/test.sh tests. Arguments go to cargo.
#
# `--test stamp` (build-stamp's one small test) is what makes the two
# builds one: a build that includes a test target makes cargo resolve
# every package's features with the workspace's dev-dependencies active,
# as `cargo nextest run --workspace --release` does, so the binaries, their
# libraries and every dependency compiled here are the very ones the test
# build uses. Without it, a dev-dependency that turns on one more feature
# of a shared crate (tokio's test-util, regex's Unicode tables) gives that
# crate, and everything built on it, a second build.
set -euo pipefail
cd "$(dirname "$0")/.."
# STAMPEDE_PROFILE=profiling builds the same with line tables (for perf).
cargo build --profile "${STAMPEDE_PROFILE:-release}" \
  --bin cluster --bin nodesim --bin loadgen --test stamp "$@"
