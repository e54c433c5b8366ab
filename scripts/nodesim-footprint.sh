#!/usr/bin/env bash
# Measures nodesim's memory and CPU per simulated node (BENCHMARKS.md):
# starts a local 3-server release cluster and a fleet of NODES, places ALLOCS
# allocations on it (in jobs of up to 10,000), waits until every node is ready
# and every allocation running and healthy, then samples nodesim's RSS and CPU
# over WINDOW idle seconds.
#
#   scripts/nodesim-footprint.sh NODES [ALLOCS] [WINDOW]
#   scripts/nodesim-footprint.sh 10000 100000 60
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000}
ALLOCS=${2:-0}
WINDOW=${3:-60}
# STAMPEDE_BIN=DIR measures the cluster and nodesim binaries in DIR instead
# of building them from this checkout.
if [ -n "${STAMPEDE_BIN:-}" ]; then
  bin=$STAMPEDE_BIN
else
  bash scripts/setup-debian.sh
  cargo build --release -q --bin cluster --bin nodesim
  bin="${CARGO_TARGET_DIR:-target}/release"
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Without TLS, as when the figures were first taken: nodesim is given
# no certificate here.
"$bin/cluster" dev --servers 3 --insecure >"$work/dev.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q '^metrics:' "$work/dev.log" && break; sleep 0.1; done
servers=$(awk '$3 ~ /^127\.0\.0\.1:/ {print $3}' "$work/dev.log" | paste -sd, -)
[ -n "$servers" ] || { cat "$work/dev.log"; echo "the cluster did not start" >&2; exit 1; }

"$bin/nodesim" --nodes "$NODES" --address "$servers" --metrics 127.0.0.1:0 \
  --id-prefix fp >"$work/nodesim.out" 2>"$work/nodesim.log" &
nodesim=$!
pids+=($nodesim)
for _ in $(seq 600); do grep -q 'metrics at' "$work/nodesim.log" && break; sleep 0.1; done
metrics=$(sed -n 's|.*metrics at \(http://[^ ]*\).*|\1|p' "$work/nodesim.log")
metric() { curl -sf "$metrics" | awk -v s="$1" '$1 == s {print $2}'; }

wait_for() { # SERIES VALUE: until nodesim's SERIES reaches VALUE (15 min at most)
  for _ in $(seq 9000); do
    v=$(metric "$1"); [ "${v%.*}" = "$2" ] && return 0; sleep 0.1
  done
  echo "timed out: $1 is ${v:-absent}, not $2" >&2; exit 1
}
start=$(date +%s.%N)
wait_for 'stampede_nodesim_nodes{state="ready"}' "$NODES"
ready=$(date +%s.%N)

left=$ALLOCS; n=0
while [ "$left" -gt 0 ]; do
  count=$((left > 10000 ? 10000 : left))
  printf '{"id":"fp-%d","type":"service","task_groups":[{"name":"app","count":%d,"resources":{"cpu_mhz":100,"memory_mb":64}}]}' \
    "$n" "$count" >"$work/job.json"
  "$bin/cluster" job run --address "$servers" "$work/job.json" >/dev/null
  left=$((left - count)); n=$((n + 1))
done
[ "$ALLOCS" -eq 0 ] || wait_for 'stampede_nodesim_allocs{client_status="running"}' "$ALLOCS"
placed=$(date +%s.%N)
# Let the last health reports go out before the quiet window starts.
sleep 5
# CPU from /proc in clock ticks: the process metric counts whole seconds only.
ticks() { awk '{print $14 + $15}' "/proc/$nodesim/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks)
sleep "$WINDOW"
t1=$(ticks)
cpu0=0
cpu1=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" 'BEGIN {print (b - a) / hz}')
rss=$(metric process_resident_memory_bytes)
errors=$(curl -sf "$metrics" | awk '$1 ~ /^stampede_nodesim_errors_total/ && $2 > 0 {
  sub(/.*kind="/, "", $1); sub(/"}/, "", $1); printf "%s%s %d", sep, $1, $2; sep = ", "
} END {if (!sep) printf "none"}')
awk -v n="$NODES" -v a="$ALLOCS" -v rss="$rss" -v c0="$cpu0" -v c1="$cpu1" -v w="$WINDOW" \
  -v t0="$start" -v t1="$ready" -v t2="$placed" -v e="$errors" 'BEGIN {
  printf "nodes %d  allocs %d  ready after %.1fs  allocs running after %.1fs more\n", n, a, t1 - t0, t2 - t1
  printf "nodesim RSS %.1f MiB = %.2f KiB per node; CPU %.4f cores over %ds idle; errors: %s\n",
    rss / 1048576, rss / 1024 / n, (c1 - c0) / w, w, e
}'
