#!/usr/bin/env bash
# How well `loadgen history check` finds a real change and how often it
# cries wolf, on real runs of real builds (BENCHMARKS.md, "The run history"):
#
# 1. The last BUILDS first-parent commits that changed the servers or
#    nodesim (cluster/, proto/, nodesim/), oldest first, each built by
#    loadgen from its `git_rev` and run once (a short scenario): history
#    `plain`. History `planted` holds the same runs before build PLANT_AT
#    and, from it on, runs of the same builds with `--apply-delay DELAY`
#    (every applied batch waits): one known slowdown from one commit on.
# 2. AA runs of one build (the newest of them): history `aa`, checked with
#    each run its own point (`--each-run`).
#
# `history check --gate` every gated measure on each; what it flagged is
# in OUT/check-*/changes.json and printed at the end. Builds follow
# loadgen's profile (debug unless --release). 46 minutes with the defaults
# on 2 cores in the debug profile; keep the machine otherwise quiet.
#
#   scripts/history-experiment.sh [--out DIR] [--builds N] [--plant-at K]
#                                 [--aa N] [--delay DURATION] [--release]
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/history-experiment builds=20 plant_at=12 aa=30 delay=50ms profile=debug
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --builds) builds="$2"; shift 2 ;;
        --plant-at) plant_at="$2"; shift 2 ;;
        --aa) aa="$2"; shift 2 ;;
        --delay) delay="$2"; shift 2 ;;
        --release) profile=release; shift ;;
        *) echo "history-experiment: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
    esac
done
if ! [ "$plant_at" -ge 1 ] 2>/dev/null || ! [ "$plant_at" -lt "$builds" ]; then
    echo "history-experiment: --plant-at must be from 1 to --builds minus 1" >&2
    exit 2
fi

release=()
[ "$profile" = release ] && release=(--release)
cargo build --quiet "${release[@]}" --bin loadgen --bin cluster --bin nodesim
loadgen="$PWD/${CARGO_TARGET_DIR:-target}/$profile/loadgen"
mkdir -p "$out/runs"
out="$(cd "$out" && pwd)"

mapfile -t commits < <(git rev-list --first-parent -n "$builds" HEAD -- cluster proto nodesim | tac)
if [ "${#commits[@]}" -lt "$builds" ]; then
    echo "history-experiment: only ${#commits[@]} commits changed the servers or nodesim" >&2
    exit 2
fi

# One short run of revision $2 into run directory $1; further arguments
# are the servers'.
run() {
    local name="$1" rev="$2"
    shift 2
    local args="" a
    for a in "$@"; do args+="\"$a\", "; done
    cat > "$out/runs/$name.toml" <<EOF
name = "history-experiment"
description = "A short steady stream: 200 nodes, 4 jobs/s for 20 s"
servers = 3
nodes = 200
duration = "20s"
drain = "20s"
arrival = { process = "constant", rate = 4.0 }

[[jobs]]
name = "web"
type = "service"
weight = 6
count = 3
cpu_mhz = 100
memory_mb = 64

[[jobs]]
name = "etl"
type = "batch"
weight = 4
count = 5
cpu_mhz = 100
memory_mb = 64

[[variants]]
name = "build"
git_rev = "$rev"
server_args = [$args]
EOF
    if [ -f "$out/runs/$name/summary.json" ]; then
        echo "history-experiment: $name: done before, kept"
        return
    fi
    echo "history-experiment: $name: ${rev:0:12} $*"
    "$loadgen" capacity --scenario "$out/runs/$name.toml" --out "$out/runs/$name" \
        --no-history --no-prometheus > "$out/runs/$name.log" 2>&1 \
        || echo "history-experiment: $name: loadgen exited $? (see $out/runs/$name.log)"
}

# Records run $2 in history $1; a run that wrote no summary (a revision
# that did not build) is left out, and said.
import() {
    if [ ! -f "$out/runs/$2/summary.json" ]; then
        echo "history-experiment: $2 wrote no summary: left out of $1"
        return
    fi
    "$loadgen" history import --history "$out/$1.sqlite" "$out/runs/$2" > /dev/null
}

for i in "${!commits[@]}"; do
    c="${commits[$i]}"
    n=$(printf '%02d' "$i")
    run "plain-$n" "$c"
    import plain "plain-$n"
    if [ "$i" -ge "$plant_at" ]; then
        run "planted-$n" "$c" --apply-delay "$delay"
        import planted "planted-$n"
    else
        import planted "plain-$n"
    fi
done
for j in $(seq -w 1 "$aa"); do
    run "aa-$j" "${commits[-1]}"
    import aa "aa-$j"
done

gates=()
for m in placements_per_s p99_placement_ms p99_time_to_running_ms p50_time_to_running_ms \
    cpu_seconds_per_1000_placements server_rss_mib raft_bytes_per_placement; do
    gates+=(--gate "$m")
done
for h in plain planted aa; do
    each=()
    [ "$h" = aa ] && each=(--each-run)
    echo "== $h"
    "$loadgen" history check --history "$out/$h.sqlite" "${gates[@]}" "${each[@]}" \
        --out "$out/check-$h" && echo "exit 0" || echo "exit $?"
done
echo "history-experiment: the planted slowdown starts at ${commits[$plant_at]:0:12} (after ${commits[$((plant_at - 1))]:0:12})"
