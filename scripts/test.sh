#!/usr/bin/env bash
# The test suite: installs what is missing, then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh --tests
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/stampede-target}"
# Every profile links Debian's RocksDB; nothing compiles its C++.
. scripts/rocksdb-env.sh
bash scripts/prune-target.sh
# The Kubernetes manifests against the API schemas, offline, and proof that
# a broken manifest is refused.
bash scripts/validate-deploy.sh --self-test
# No module imports a module that imports it back, and cluster's layers
# import only the layers below them; and proof that a loop is refused.
bash scripts/check-imports.sh --self-test && bash scripts/check-imports.sh
cargo test --workspace "$@"
# The manifests' command lines and probes against the binaries' real flags.
cargo build --quiet --bin cluster --bin nodesim --bin loadgen
STAMPEDE_BIN="$CARGO_TARGET_DIR/debug" bash scripts/validate-deploy.sh
