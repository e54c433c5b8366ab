#!/usr/bin/env bash
# A capacity run across network namespaces: each of the 3 servers, the 2
# nodesim shards and loadgen in a namespace of its own, joined by a bridge
# (itself in a namespace: nothing is added to the host's network, and no
# packet can leave the machine), with link latency between them, driven by
# `loadgen capacity --inventory` (remote mode), as on Kubernetes (deploy/).
#
#   scripts/multihost.sh [--scenario NAME|FILE] [--duration D] --out DIR
#       [--server-delay 1ms] [--client-delay 0.5ms] [--loss PCT] [--subnet 10.231.77]
#
# Leaves the run directory DIR (summary.json, samples.json, report.html,
# inventory.toml, logs/) and exits non-zero if the run failed. Needs root
# (ip netns). Tears everything down on exit.
#
# Latency: this kernel has no netem qdisc (`tc qdisc ... netem` fails with
# "Specified qdisc kind is unknown"), so it is added in user space by
# `loadgen link`, a TCP proxy that delays every byte (stampede_launch::delay).
# Each server's namespace runs two: one for clients (--client-delay each way)
# and one for its peers (--server-delay each way), which the others reach
# through `cluster serve --peer-via`. The server listens on its namespace's
# 127.0.0.1 and the proxies on its address; otherwise the command lines are
# the manifests' (deploy/base). --loss drops that share of every host's
# outgoing packets on the bridge (iptables' statistic match inside each
# namespace; TCP retransmits them, so loss shows as latency).
set -euo pipefail
cd "$(dirname "$0")/.."

scenario=default duration="" out="" server_delay=1ms client_delay=0.5ms subnet=10.231.77 loss=""
die() { echo "multihost: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --scenario) scenario=${2:?--scenario needs a NAME or FILE}; shift 2 ;;
    --duration) duration=${2:?--duration needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --server-delay) server_delay=${2:?}; shift 2 ;;
    --client-delay) client_delay=${2:?}; shift 2 ;;
    --subnet) subnet=${2:?}; shift 2 ;;
    --loss) loss=${2:?--loss needs a percentage}; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$out" ]] || die "--out DIR is required"
[[ $(id -u) == 0 ]] || die "needs root to create network namespaces (ip netns)"
command -v ip >/dev/null || die "needs iproute2 (apt-get install iproute2)"
[[ "$subnet" =~ ^(10|192\.168|172\.(1[6-9]|2[0-9]|3[01]))(\.[0-9]{1,3}){1,2}$ ]] \
  || die "--subnet $subnet: give the first three octets of a private /24, e.g. 10.231.77"
[[ $(tr -cd . <<<"$subnet" | wc -c) == 2 ]] || die "--subnet $subnet: give exactly three octets"
if [[ -n "$loss" ]]; then
  [[ "$loss" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 100) }' \
    || die "--loss $loss: give a percentage above 0 and below 100, e.g. 0.5"
  command -v iptables >/dev/null || die "--loss needs iptables (apt-get install iptables)"
fi

# The scenario's fleet size: nodesim runs exactly that many nodes.
if [[ -f "$scenario" ]]; then file=$scenario; else file=loadgen/scenarios/$scenario.toml; fi
[[ -f "$file" ]] || die "--scenario $scenario: no such built-in scenario or file"
nodes=$(sed -n 's/^nodes *= *\([0-9_]*\).*/\1/p' "$file" | head -1 | tr -d _)
[[ -n "$nodes" ]] || die "$file has no top-level nodes = N"
if grep -q '^\[\[faults\]\]' "$file"; then die "$file has [[faults]], which need servers loadgen starts itself"; fi

# The binaries: STAMPEDE_BIN, else the release build.
BIN=${STAMPEDE_BIN:-${CARGO_TARGET_DIR:-target}/release}
if [[ -z "${STAMPEDE_BIN:-}" ]]; then
  bash scripts/build.sh
fi
for b in cluster nodesim loadgen; do
  [[ -x "$BIN/$b" ]] || die "$BIN/$b is missing (build them, or set STAMPEDE_BIN)"
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/data" "$out/logs" "$out/tls"
mkdir -p "$out/data" "$out/logs"
tag=st$$                       # namespace names: st<pid>-s1, ...
br=$tag-br
declare -A addr=([s1]=$subnet.11 [s2]=$subnet.12 [s3]=$subnet.13 [n0]=$subnet.20 [n1]=$subnet.21 [lg]=$subnet.30)
pids=()

teardown() {
  local rc=$?
  # A process started through in_ns in the background is the child of a
  # subshell: stop both, or the child outlives the run.
  for p in "${pids[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for ns in "${!addr[@]}" br; do ip netns del "$tag-$ns" 2>/dev/null || true; done
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

# The bridge lives in a namespace of its own; each host is a veth into it.
ip netns add "$br"
ip -n "$br" link add br0 type bridge
ip -n "$br" link set br0 up
i=0
for h in s1 s2 s3 n0 n1 lg; do
  ns=$tag-$h
  ip netns add "$ns"
  ip -n "$br" link add "v$i" type veth peer name eth0 netns "$ns"
  ip -n "$br" link set "v$i" master br0 up
  ip -n "$ns" addr add "${addr[$h]}/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  if [[ -n "$loss" ]]; then
    ip netns exec "$ns" iptables -A OUTPUT -o eth0 -m statistic --mode random \
      --probability "$(awk -v l="$loss" 'BEGIN { printf "%.6f", l / 100 }')" -j DROP
  fi
  i=$((i + 1))
done
in_ns() { local h=$1; shift; ip netns exec "$tag-$h" "$@"; }

# gRPC clients check the role name server.stampede; HTTP clients (the
# health checks, loadgen sampling /metrics) check the address they dial.
"$BIN/cluster" tls init "$out/tls" --san "${addr[s1]},${addr[s2]},${addr[s3]}" >/dev/null
write_token=$("$BIN/cluster" acl token --scope write --token-file "$out/tls/token")
tls_role() { echo "--tls-ca=$out/tls/ca.pem --tls-cert=$out/tls/$1.pem --tls-key=$out/tls/$1.key"; }

peers="1=${addr[s1]}:4647,2=${addr[s2]}:4647,3=${addr[s3]}:4647"
servers="${addr[s1]}:4647,${addr[s2]}:4647,${addr[s3]}:4647"
for id in 1 2 3; do
  h=s$id a=${addr[s$id]}
  in_ns "$h" "$BIN/loadgen" link "$a:4647=127.0.0.1:4647@$client_delay" "$a:4747=127.0.0.1:4647@$server_delay" \
    >"$out/logs/link-$id.log" 2>&1 &
  pids+=($!)
  via=()
  for j in 1 2 3; do [[ $j == "$id" ]] || via+=("$j=${addr[s$j]}:4747"); done
  # shellcheck disable=SC2046
  in_ns "$h" "$BIN/cluster" serve --id="$id" --rpc=127.0.0.1:4647 --http="$a:4646" \
    --data-dir="$out/data/$id" --peers="$peers" --peer-via="$(IFS=,; echo "${via[*]}")" \
    $(tls_role server) --acl-token-file="$out/tls/token" >"$out/logs/server-$id.log" 2>&1 &
  pids+=($!)
done

export STAMPEDE_TLS_CA=$out/tls/ca.pem STAMPEDE_TLS_CERT=$out/tls/operator.pem STAMPEDE_TLS_KEY=$out/tls/operator.key
deadline=$((SECONDS + 60))
for id in 1 2 3; do
  until in_ns lg "$BIN/cluster" health --http="${addr[s$id]}:4646" --leader >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      in_ns lg "$BIN/cluster" health --http="${addr[s$id]}:4646" --leader || true
      die "server $id has no leader after 60s (logs in $out/logs)"
    fi
    sleep 0.5
  done
done
echo "multihost: servers up with a leader at $servers (peers +$server_delay, clients +$client_delay each way${loss:+, $loss% loss})" >&2

cat >"$out/inventory.toml" <<TOML
# The processes of this run (loadgen capacity --inventory).
TOML
for id in 1 2 3; do
  printf '[[servers]]\nrpc = "%s:4647"\nmetrics = "https://%s:4646/metrics"\n' "${addr[s$id]}" "${addr[s$id]}" >>"$out/inventory.toml"
done
for k in 0 1; do
  # shellcheck disable=SC2046
  in_ns "n$k" env STAMPEDE_TOKEN="$write_token" "$BIN/nodesim" --nodes="$nodes" --shard="$k/2" \
    --id-prefix=multihost --address="$servers" --metrics="${addr[n$k]}:9101" \
    $(tls_role client) --duration=2h >"$out/logs/nodesim-$k.log" 2>&1 &
  pids+=($!)
  printf '[[nodesim]]\nmetrics = "http://%s:9101/metrics"\n' "${addr[n$k]}" >>"$out/inventory.toml"
done

extra=()
[[ -n "$duration" ]] && extra+=(--duration "$duration")
set +e
# shellcheck disable=SC2046
in_ns lg env STAMPEDE_TOKEN="$write_token" "$BIN/loadgen" capacity --scenario="$scenario" \
  --inventory="$out/inventory.toml" --out="$out" --serve-metrics="${addr[lg]}:9102" --no-prometheus \
  $(tls_role operator) "${extra[@]}" 2>&1 | tee "$out/logs/loadgen.log"
rc=${PIPESTATUS[0]}
set -e
# The servers' last /metrics, and raft's latencies from them: the leader's
# commit (stampede_raft_apply_seconds: submission to applied, a quorum's
# round trip and fsyncs) and AppendEntries round trips, means over the run.
mkdir -p "$out/metrics"
for id in 1 2 3; do
  in_ns lg curl -sf --cacert "$out/tls/ca.pem" --cert "$out/tls/operator.pem" --key "$out/tls/operator.key" \
    "https://${addr[s$id]}:4646/metrics" >"$out/metrics/server-$id.prom" || true
done
awk '
  /^stampede_raft_is_leader / && $2 == 1 { leader = FILENAME }
  /^stampede_raft_apply_seconds_sum/ { as[FILENAME] = $2 } /^stampede_raft_apply_seconds_count/ { ac[FILENAME] = $2 }
  /^stampede_raft_append_rpc_seconds_sum/ { rs[FILENAME] = $2 } /^stampede_raft_append_rpc_seconds_count/ { rc[FILENAME] = $2 }
  END {
    if (leader == "" || ac[leader] == 0) { print "raft latency: no leader metrics"; exit }
    printf "raft commit mean %.2f ms over %d writes; AppendEntries round trip mean %.2f ms over %d (leader %s)\n",
      1000 * as[leader] / ac[leader], ac[leader], rc[leader] ? 1000 * rs[leader] / rc[leader] : 0, rc[leader], leader
  }' "$out"/metrics/server-*.prom | tee "$out/raft-latency.txt" >&2
for f in summary.json report.html; do
  [[ -f "$out/$f" ]] || { echo "multihost: $out/$f was not written" >&2; rc=1; }
done
echo "multihost: run directory $out (loadgen exited $rc)" >&2
exit "$rc"
