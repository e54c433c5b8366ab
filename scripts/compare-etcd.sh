#!/usr/bin/env bash
# stampede side by side with etcd: committed writes per second on this
# machine, with the same closed-loop writer model for both (`loadgen writes`:
# N writers, one write in flight each, round-robin across three members,
# a warm-up and then a measured window).
#
#   scripts/compare-etcd.sh [--duration 10s] [--warmup 2s] [--runs 1] [--writers 1,64,256]
#
# It installs what is missing (Debian's etcd-server and etcd-client, jq),
# builds the release binaries, then, one after the other:
#   1. a 3-member etcd cluster on 127.0.0.1 (Debian's etcd, its default
#      settings), driven by `loadgen writes --etcd-endpoints` (puts through
#      etcd's v3 JSON gateway, each value the bytes of the node stampede's
#      writer registers) at each writer count, then etcd's own benchmark
#      client, `etcdctl check perf --load=xl`;
#   2. a 3-server stampede (`cluster dev --servers 3 --insecure`: etcd runs
#      without TLS too), driven by `loadgen writes --address` (node
#      registrations) at each writer count.
# Data dirs are in a temporary directory, removed at exit with every process
# it started.
#
# stdout: one JSON line per system and writer count, nothing else:
#   {"system": "etcd", "writers": 64, "writes_per_second": 4100.5, "p50_ms": 14.2, "p99_ms": 40.1}
# each the median of --runs runs by writes/s (with an even count, the lower
# middle run). stderr: progress, and a table with the stampede/etcd ratio per
# writer count and the `etcdctl check perf` figure.
#
# STAMPEDE_BIN=DIR uses the cluster and loadgen binaries in DIR instead of
# building them from this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
}
die() {
  echo "compare-etcd.sh: $*" >&2
  exit 2
}

duration=10s
warmup=2s
runs=1
writers=1,64,256
while (($#)); do
  opt=$1
  case "$opt" in
    -h | --help) usage; exit 0 ;;
    --duration=* | --warmup=* | --runs=* | --writers=*)
      value=${opt#*=}
      opt=${opt%%=*}
      shift
      ;;
    --duration | --warmup | --runs | --writers)
      (($# >= 2)) || die "$opt needs a value"
      value=$2
      shift 2
      ;;
    *) die "unknown option '$opt' (--duration, --warmup, --runs, --writers; --help says more)" ;;
  esac
  case "$opt" in
    --duration) duration=$value ;;
    --warmup) warmup=$value ;;
    --runs) runs=$value ;;
    --writers) writers=$value ;;
  esac
done

# What loadgen takes (humantime), checked before anything is installed or built.
duration_re='^([0-9]+(ns|us|ms|s|m|min|h))+$'
[[ $duration =~ $duration_re ]] || die "--duration: '$duration' is not a duration (e.g. 10s, 500ms, 2m)"
[[ $duration =~ [1-9] ]] || die "--duration: '$duration' must be more than 0"
[[ $warmup =~ $duration_re ]] || die "--warmup: '$warmup' is not a duration (e.g. 2s, 500ms, 0s)"
[[ $runs =~ ^[1-9][0-9]*$ ]] && ((runs <= 99)) || die "--runs: '$runs' is not a whole number from 1 to 99"
[[ $writers =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--writers: '$writers' is not a comma-separated list of writer counts (e.g. 1,64,256)"
IFS=, read -r -a counts <<<"$writers"
for n in "${counts[@]}"; do
  [[ $n =~ ^[1-9][0-9]{0,4}$ ]] && ((n <= 10000)) || die "--writers: '$n' is not a writer count from 1 to 10000"
done

bash scripts/setup-debian.sh --etcd >&2
if [ -n "${STAMPEDE_BIN:-}" ]; then
  bin=$STAMPEDE_BIN
else
  cargo build --release --bin cluster --bin loadgen >&2
  bin="${CARGO_TARGET_DIR:-target}/release"
fi
for b in cluster loadgen; do
  [ -x "$bin/$b" ] || die "no $b binary in $bin"
done
export ETCDCTL_API=3
# The clusters here are insecure: loadgen must not present the caller's
# credentials for another cluster.
unset STAMPEDE_TLS_CA STAMPEDE_TLS_CERT STAMPEDE_TLS_KEY STAMPEDE_TOKEN

work=$(mktemp -d "${TMPDIR:-/tmp}/compare-etcd.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# port=<a 127.0.0.1 port nothing listens on, not handed out before>
taken=" "
free_port() {
  while :; do
    port=$((20000 + RANDOM % 40000))
    [[ $taken == *" $port "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
    taken+="$port "
    return
  done
}

# Runs `loadgen writes` --runs times for each writer count; ARGS select the
# system. Prints each count's median as one JSON line, keeps it for the table.
measure() { # SYSTEM LOADGEN-ARGS...
  local system=$1 n r out
  shift
  for n in "${counts[@]}"; do
    for ((r = 1; r <= runs; r++)); do
      out="$work/$system-$n-$r.json"
      "$bin/loadgen" writes "$@" --writers "$n" --duration "$duration" --warmup "$warmup" \
        --json >"$out" || die "$system: loadgen writes with $n writers failed"
      jq -r --arg r "$r/$runs" \
        '"\(.system), \(.writers) writers, run \($r): \(.writes_per_second | floor) writes/s, p50 \(.latency_p50_ms) ms, p99 \(.latency_p99_ms) ms, \(.errors) errors\(if .first_error then " (first: \(.first_error))" else "" end)"' \
        "$out" >&2
    done
    jq -s -c 'sort_by(.writes_per_second) | .[(length - 1) / 2 | floor]
      | {system, writers, writes_per_second, p50_ms: .latency_p50_ms, p99_ms: .latency_p99_ms}' \
      "$work/$system-$n-"*.json | tee "$work/median-$system-$n.json"
  done
}

# 1. etcd: three members, each its own client and peer port and data dir.
names=(m1 m2 m3)
clients=()
initial=()
declare -A peer
for m in "${names[@]}"; do
  free_port
  clients+=("http://127.0.0.1:$port")
  free_port
  peer[$m]="http://127.0.0.1:$port"
  initial+=("$m=${peer[$m]}")
done
endpoints=$(IFS=,; echo "${clients[*]}")
echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p'): 3 members at $endpoints" >&2
for i in 0 1 2; do
  m=${names[$i]}
  etcd --name "$m" --data-dir "$work/etcd-$m" \
    --listen-client-urls "${clients[$i]}" --advertise-client-urls "${clients[$i]}" \
    --listen-peer-urls "${peer[$m]}" --initial-advertise-peer-urls "${peer[$m]}" \
    --initial-cluster "$(IFS=,; echo "${initial[*]}")" --initial-cluster-state new \
    --initial-cluster-token compare-etcd >"$work/etcd-$m.log" 2>&1 &
  pids+=($!)
done
healthy=false
for _ in $(seq 300); do
  if etcdctl --endpoints "$endpoints" endpoint health >/dev/null 2>&1; then
    healthy=true
    break
  fi
  sleep 0.2
done
if ! $healthy; then
  for m in "${names[@]}"; do echo "--- etcd $m ---" >&2; tail -n 20 "$work/etcd-$m.log" >&2; done
  die "etcd did not become healthy within 60 s"
fi
measure etcd --etcd-endpoints "$endpoints"

echo "etcdctl check perf --load=xl (etcd's own benchmark client, about a minute)" >&2
timeout 300 etcdctl --endpoints "$endpoints" check perf --load=xl >"$work/check-perf.log" 2>&1 || true
perf=$(tr '\r' '\n' <"$work/check-perf.log" | grep -o '[0-9][0-9.]* writes/s' | head -n 1 || true)
# Its verdict for the load class: PASS or FAIL, alone on the last such line.
verdict=$(tr '\r' '\n' <"$work/check-perf.log" | grep -E '^(PASS|FAIL)$' | tail -n 1 || true)

for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
rm -rf "$work"/etcd-m*

# 2. stampede: three servers, without TLS as etcd here.
"$bin/cluster" dev --servers 3 --insecure --data-dir "$work/stampede" >"$work/dev.log" 2>&1 &
dev=$!
pids+=("$dev")
for _ in $(seq 600); do
  grep -q '^metrics:' "$work/dev.log" && break
  kill -0 "$dev" 2>/dev/null || break
  sleep 0.2
done
grep -q '^metrics:' "$work/dev.log" || { cat "$work/dev.log" >&2; die "the stampede cluster did not start"; }
servers=$(awk '$3 ~ /^127\.0\.0\.1:/ {print $3}' "$work/dev.log" | paste -sd, -)
echo "stampede: 3 servers at $servers" >&2
measure stampede --address "$servers"

# The table, on stderr.
{
  echo
  printf '%-8s  %30s  %30s  %14s\n' writers "etcd writes/s (p50/p99 ms)" "stampede writes/s (p50/p99 ms)" "stampede/etcd"
  for n in "${counts[@]}"; do
    e="$work/median-etcd-$n.json"
    s="$work/median-stampede-$n.json"
    jq -r -s '[.[] | .writes_per_second, .p50_ms, .p99_ms] | @tsv' "$e" "$s" |
      awk -F'\t' -v n="$n" '{
        ratio = $1 > 0 ? sprintf("%.2f", $4 / $1) : "-"
        printf "%-8s  %30s  %30s  %14s\n", n,
          sprintf("%.0f (%.2f/%.2f)", $1, $2, $3), sprintf("%.0f (%.2f/%.2f)", $4, $5, $6), ratio
      }'
  done
  echo
  echo "etcdctl check perf --load=xl: ${perf:-no figure} (etcd's verdict for that load class: ${verdict:-none})"
  echo "each figure: the median of $runs run(s) of $duration after $warmup of warm-up"
} >&2
