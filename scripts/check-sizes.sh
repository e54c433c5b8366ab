#!/usr/bin/env bash
# Checks that no source file is over 800 lines before its tests and no
# function over 100 lines outside tests (scripts/check_sizes.py says how
# they are counted).
#
#   scripts/check-sizes.sh                # every crate
#   scripts/check-sizes.sh --self-test    # prove that a long function and a long file are refused
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/check_sizes.py "$@"
