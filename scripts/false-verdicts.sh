#!/usr/bin/env bash
# The comparison's false-verdict rate on this machine: compares every pair
# of variants of one run of one build against itself (an A/A run such as
# examples/scenarios/same-build.toml) with `loadgen compare`, round by
# round, and counts the pairs in which a gated measure was called better or
# worse. Every such call is false: the variants are the same build.
#
#   scripts/false-verdicts.sh runs/aa [LOADGEN]
#
# Prints one line per pair (its gated verdicts) and the total; writes each
# pair's compare.json under RUN/aa-pairs/.
set -euo pipefail
run="${1:?usage: scripts/false-verdicts.sh RUN_DIR [LOADGEN]}"
loadgen="${2:-target/release/loadgen}"
[ -f "$run/summary.json" ] || { echo "false-verdicts: no $run/summary.json" >&2; exit 2; }
command -v jq >/dev/null || { echo "false-verdicts: needs jq (scripts/setup-debian.sh installs it)" >&2; exit 2; }
mapfile -t names < <(jq -r '.variants[].name' "$run/summary.json")
pairs=0
false_calls=0
for ((i = 0; i < ${#names[@]}; i++)); do
  for ((j = i + 1; j < ${#names[@]}; j++)); do
    a="${names[$i]}" b="${names[$j]}"
    out="$run/aa-pairs/$a-$b"
    "$loadgen" compare "$run" "$run" --variant-a "$a" --variant-b "$b" --out "$out" >/dev/null || true
    calls="$(jq -r '[.variants[].measures[] | select(.gated and (.verdict == "better" or .verdict == "worse")) | "\(.measure) \(.verdict) x\(.ratio * 1000 | round / 1000)"] | join(", ")' "$out/compare.json")"
    verdicts="$(jq -r '[.variants[].measures[] | select(.gated) | .verdict] | group_by(.) | map("\(.[0]) \(length)") | join(", ")' "$out/compare.json")"
    pairs=$((pairs + 1))
    if [ -n "$calls" ]; then
      false_calls=$((false_calls + 1))
      echo "$a-$b: FALSE VERDICT: $calls"
    else
      echo "$a-$b: $verdicts"
    fi
  done
done
echo "false-verdicts: $false_calls of $pairs pairs called a gated measure better or worse"
