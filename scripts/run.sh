#!/usr/bin/env bash
# The main job: installs what is missing, builds release binaries, and runs a
# capacity-planning run with the built-in default scenario: a local 3-server
# cluster, a simulated fleet and a job stream, then a summary table and a run
# directory (summary.json, samples.json, report.html). Arguments go to
# `loadgen capacity`, e.g. `scripts/run.sh --scenario client-updates --out runs/cu`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
bash scripts/prune-target.sh
bash scripts/build.sh
exec "${CARGO_TARGET_DIR:-target}/release/loadgen" capacity "$@"
