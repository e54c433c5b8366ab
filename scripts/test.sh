#!/usr/bin/env bash
# The test suite: installs what is missing, then runs every test in the workspace
# (the planted-bug mutation runs are the second suite, scripts/test-mutations.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh --tests
bash scripts/prune-target.sh
# A bare cargo command, in an environment without our variables, links
# Debian's RocksDB (.cargo/config.toml) and compiles none of its C++.
bash scripts/check-bare-cargo.sh
# The Kubernetes manifests against the API schemas, offline, and proof that
# a broken manifest is refused.
bash scripts/validate-deploy.sh --self-test
# vendor/openraft is openraft's release plus vendor/openraft.patch, nothing else.
bash scripts/openraft-vendor.sh --check
# No module imports a module that imports it back, and cluster's layers
# import only the layers listed above them in cluster/src/lib.rs; first
# proof that a loop is refused.
bash scripts/check-imports.sh --self-test
bash scripts/check-imports.sh
# No source file over 800 lines before its tests, no function over 100
# lines outside tests; first proof that both are refused.
bash scripts/check-sizes.sh --self-test
bash scripts/check-sizes.sh
# The CPU budget of a profiled run (scripts/profile.sh) puts each stack
# under its mechanism.
python3 scripts/cpu_budget.py --self-test
# Every test of the workspace, each in a process of its own and as many at
# once as there are cores, across all the test binaries
# (.config/nextest.toml); cargo-nextest is installed if missing. Built in
# the release profile: the tests share every compiled crate and the three
# binaries with scripts/run.sh (scripts/build.sh says how), and the
# clusters they start are the optimised servers a capacity run starts.
# (The planted bugs exist only in debug builds: scripts/test-mutations.sh
# builds its own.)
command -v cargo-nextest >/dev/null 2>&1 || cargo install cargo-nextest --locked
cargo nextest run --workspace --release "$@"
# The manifests' command lines and probes against the binaries' real flags.
bash scripts/build.sh --quiet
bin="${CARGO_TARGET_DIR:-target}/release"
# BENCHMARKS.md's headline table: dates, commits, commands and links.
STAMPEDE_BIN="$bin" bash scripts/check-benchmarks.sh --self-test
STAMPEDE_BIN="$bin" bash scripts/check-benchmarks.sh
STAMPEDE_BIN="$bin" bash scripts/validate-deploy.sh
# The guides' links and commands against the checkout and the binaries' real
# subcommands and flags, after proof that a dangling link or unknown flag is caught.
STAMPEDE_BIN="$bin" bash scripts/check-docs.sh --self-test
