#!/usr/bin/env bash
# Where a placement's CPU goes, process by process: runs `loadgen capacity`
# (the release build with line tables) and, from AT seconds into it for
# SECONDS seconds, samples every process of the run (each server, each
# nodesim, loadgen itself) with `perf record`, then writes a flamegraph of
# each (inferno) and its top functions beside the run's own results.
#
#   scripts/profile.sh [--at S] [--seconds N] [--hz F] -- CAPACITY_ARGS...
#   scripts/profile.sh --at 30 --seconds 20 -- \
#       --scenario examples/scenarios/c2m-mini-profile.toml --out runs/prof
#
# Writes, in the run directory (--out, required): profile/NAME.perf.data,
# profile/NAME.svg (open in a browser: the widest towers are the costs) and
# profile/NAME.top.txt (the 25 functions with the most samples of their own),
# profile/NAME.folded (the stacks, one line each, with their samples),
# for NAME in server-1 ... nodesim[-K] loadgen; and profile/budget.txt,
# each process's CPU-seconds per 1,000 placements (summary.json's
# cpu_seconds_per_1000_placements_by_process) split by mechanism
# (scripts/cpu_budget.py: applying reports, checking plans, gRPC, ...).
# Needs perf (linux-perf) and inferno (cargo install inferno), both
# installed here when missing; perf must be allowed to attach to the
# processes (root, or kernel.perf_event_paranoid <= 1).
set -euo pipefail
cd "$(dirname "$0")/.."

at=60 seconds=20 hz=199
while [[ $# -gt 0 ]]; do
  case "$1" in
    --at) at="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --hz) hz="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "profile.sh: unknown option $1 (capacity's own arguments go after --)" >&2; exit 2 ;;
  esac
done
for n in "$at" "$seconds" "$hz"; do
  [[ "$n" =~ ^[0-9]+$ && "$n" -gt 0 ]] || { echo "profile.sh: --at, --seconds and --hz take whole numbers above 0 (got $n)" >&2; exit 2; }
done
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [[ "${args[$i]}" == "--out" ]] && out="${args[$((i + 1))]:-}"
done
[[ -n "$out" ]] || { echo "profile.sh: give the run directory: -- ... --out DIR" >&2; exit 2; }

bash scripts/setup-debian.sh
if ! command -v perf >/dev/null; then
  apt-get install -y -qq linux-perf >/dev/null
fi
if ! command -v inferno-flamegraph >/dev/null; then
  cargo install --locked --quiet inferno
fi
# The release build with line tables (Cargo.toml's `profiling`), so that
# the flamegraphs name inlined frames.
STAMPEDE_PROFILE=profiling bash scripts/build.sh
bin="${CARGO_TARGET_DIR:-target}/profiling"

"$bin/loadgen" capacity "${args[@]}" &
loadgen=$!
trap 'kill "$loadgen" 2>/dev/null || true' INT TERM
sleep "$at"
kill -0 "$loadgen" 2>/dev/null || { echo "profile.sh: the run ended before ${at}s" >&2; wait "$loadgen"; exit 1; }

# The run's processes: loadgen and its children, named as the summary names
# them (server-ID from its --id, nodesim or nodesim-K in start order).
mkdir -p "$out/profile"
declare -A names
names[$loadgen]=loadgen
nodesims=()
for pid in $(pgrep -P "$loadgen" || true); do
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  case "$cmd" in
    *" serve "*)
      id=$(sed -n 's/.* --id \([0-9]*\) .*/\1/p' <<<"$cmd")
      names[$pid]="server-${id:-$pid}" ;;
    *nodesim*) nodesims+=("$pid") ;;
  esac
done
if [[ ${#nodesims[@]} -eq 1 ]]; then
  names[${nodesims[0]}]=nodesim
else
  k=0
  for pid in "${nodesims[@]}"; do names[$pid]="nodesim-$k"; k=$((k + 1)); done
fi

echo "profile.sh: sampling ${#names[@]} processes for ${seconds}s at ${hz} Hz"
recorders=()
for pid in "${!names[@]}"; do
  perf record -q -F "$hz" -g --call-graph dwarf,16384 -p "$pid" \
    -o "$out/profile/${names[$pid]}.perf.data" -- sleep "$seconds" 2>/dev/null &
  recorders+=($!)
done
wait "${recorders[@]}" || true
status=0
wait "$loadgen" || status=$?

for data in "$out"/profile/*.perf.data; do
  name=$(basename "$data" .perf.data)
  perf script -i "$data" 2>/dev/null | inferno-collapse-perf >"$out/profile/$name.folded"
  inferno-flamegraph --title "$name" <"$out/profile/$name.folded" >"$out/profile/$name.svg"
  # head stops reading early: the pipe's SIGPIPE upstream is no failure.
  perf report -i "$data" --no-children -g none --sort symbol --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -25 >"$out/profile/$name.top.txt" || true
  echo "profile.sh: $out/profile/$name.svg"
done
# The budget: each process's CPU per 1,000 placements, by mechanism.
if [[ -f "$out/summary.json" ]]; then
  python3 scripts/cpu_budget.py "$out" | tee "$out/profile/budget.txt"
fi
exit "$status"
