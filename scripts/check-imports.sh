#!/usr/bin/env bash
# Checks that no module of a crate imports, through any chain, a module that
# imports it back, and that cluster's layers import only the layers listed
# above them in cluster/src/lib.rs's layout (scripts/check_imports.py says
# what counts as an import and at which level loops are looked for).
#
#   scripts/check-imports.sh                # cluster, launch, loadgen and nodesim
#   scripts/check-imports.sh loadgen        # the crates given
#   scripts/check-imports.sh --self-test    # prove that a loop is refused and a clean crate passes
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/check_imports.py "$@"
