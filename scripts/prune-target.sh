#!/usr/bin/env bash
# Keeps the shared cargo target directory from filling the disk. Every clone at
# a new path builds its own copies of the workspace crates and test binaries
# beside the old ones, and cargo never removes them. When the free space under
# the target directory falls below STAMPEDE_MIN_FREE_GIB (default 12), this
# removes the debug profile's outputs (release binaries stay), so the build
# that follows starts clean instead of failing half-way with ENOSPC.
set -euo pipefail
target="${CARGO_TARGET_DIR:-$HOME/.cache/stampede-target}"
min_gib="${STAMPEDE_MIN_FREE_GIB:-12}"
probe="$target"
while [ ! -d "$probe" ]; do probe="$(dirname "$probe")"; done
free_kib="$(df -Pk "$probe" | awk 'NR == 2 { print $4 }')"
if [ "$free_kib" -lt $((min_gib * 1024 * 1024)) ] && [ -d "$target/debug" ]; then
    echo "prune-target: $((free_kib / 1024 / 1024)) GiB free under $target (< $min_gib GiB): removing $target/debug" >&2
    rm -rf "$target/debug"
fi
