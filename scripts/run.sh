#!/usr/bin/env bash
# The main job: installs what is missing, builds release binaries, and starts a
# local 3-server cluster, printing its status (Ctrl-C stops it). Arguments go
# to `cluster dev`, e.g. `scripts/run.sh --duration 30s`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/stampede-target}"
cargo build --release --bin cluster
exec "$CARGO_TARGET_DIR/release/cluster" dev --servers 3 "$@"
