#!/usr/bin/env bash
# Keeps the shared build directory (.cargo/config.toml: ~/.cargo/stampede-build)
# from filling the disk. Every clone at a new path builds its own copies of
# the workspace crates and test binaries beside the old ones, and cargo never
# removes them. When the free space under it falls below STAMPEDE_MIN_FREE_GIB
# (default 12), this removes the debug profile's outputs (release builds
# stay), so the build that follows starts clean instead of failing half-way
# with ENOSPC.
set -euo pipefail
build="${CARGO_BUILD_BUILD_DIR:-${CARGO_HOME:-$HOME/.cargo}/stampede-build}"
min_gib="${STAMPEDE_MIN_FREE_GIB:-12}"
probe="$build"
while [ ! -d "$probe" ]; do probe="$(dirname "$probe")"; done
free_kib="$(df -Pk "$probe" | awk 'NR == 2 { print $4 }')"
if [ "$free_kib" -lt $((min_gib * 1024 * 1024)) ] && [ -d "$build/debug" ]; then
    echo "prune-target: $((free_kib / 1024 / 1024)) GiB free under $build (< $min_gib GiB): removing $build/debug" >&2
    rm -rf "$build/debug"
fi
