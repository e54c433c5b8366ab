#!/usr/bin/env bash
# Prints the latest `cargo bench` results as a Markdown table, for BENCHMARKS.md:
# benchmark id, median time per iteration, and the throughput at that median
# (elements/s, or MiB/s for benches that count bytes).
#
# Reads criterion's target/criterion (or $CARGO_TARGET_DIR/criterion)/GROUP/FUNCTION/new/benchmark.json
# (id and throughput) and estimates.json (times, in ns). An optional argument
# keeps only the ids matching that regular expression, e.g.
#   scripts/bench-table.sh '^state_apply/'
# Results of benches since renamed or removed stay in that directory: delete it
# before a run whose table should hold nothing else.
set -euo pipefail

dir="${CARGO_TARGET_DIR:-target}/criterion"
filter="${1:-}"

if ! command -v jq >/dev/null; then
    echo "bench-table: needs jq (apt-get install jq)" >&2
    exit 1
fi
shopt -s nullglob
results=("$dir"/*/*/new)
if ((${#results[@]} == 0)); then
    echo "bench-table: no results under $dir; run cargo bench first" >&2
    exit 1
fi

# Three significant digits or so, then a unit that keeps the number small.
row='
def num: if . >= 100 then round elif . >= 10 then (. * 10 | round) / 10
         else (. * 100 | round) / 100 end | tostring;
def time: if . >= 1e9 then "\(. / 1e9 | num) s" elif . >= 1e6 then "\(. / 1e6 | num) ms"
          elif . >= 1e3 then "\(. / 1e3 | num) µs" else "\(num) ns" end;
def rate: if . >= 1e9 then "\(. / 1e9 | num) G" elif . >= 1e6 then "\(. / 1e6 | num) M"
          elif . >= 1e3 then "\(. / 1e3 | num) K" else "\(num) " end;
$bench[0] as $b
| $estimates[0].median.point_estimate as $ns
| select($filter == "" or ($b.full_id | test($filter)))
| ($b.throughput // {}) as $t
| (if $t.Elements then "\($t.Elements / $ns * 1e9 | rate)elem/s"
   elif $t.Bytes then "\($t.Bytes / $ns * 1e9 / 1048576 | num) MiB/s"
   elif $t.BytesDecimal then "\($t.BytesDecimal / $ns * 1e9 / 1e6 | num) MB/s"
   else "" end) as $throughput
| "| `\($b.full_id)` | \($ns | time) | \($throughput) |"
'

echo "| benchmark | median time | throughput |"
echo "| --- | ---: | ---: |"
for r in "${results[@]}"; do
    jq -rn --arg filter "$filter" \
        --slurpfile bench "$r/benchmark.json" \
        --slurpfile estimates "$r/estimates.json" "$row"
done | sort -V -t'`' -k2,2
