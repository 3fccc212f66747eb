#!/usr/bin/env bash
# data_allocation shards against ranges (docs/protocol.md, "Sample ranges"): scripts/demo.sh
# --json with a 4x straggler, each allocation R times to the target accuracy (time to
# target) and R times to a sample budget (final test accuracy), alternating the two
# allocations so that load on the machine falls on both alike. One JSON line per run,
# then a summary line with the medians.
#   scripts/bench/data_allocation.sh [--repeats R] [--workers W] [--target A] [--budget N]
#     [--mode M] [--quick]      (also: scripts/bench.sh data-allocation ...)
# --quick: one run of each kind to 0.80 and 40,000 samples (checks the output, not speed).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeats=3 workers=4 target=0.85 budget=120000 mode=adaptive
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeats) repeats=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --quick) repeats=1 target=0.80 budget=40000; shift ;;
    *) echo "data_allocation: unknown option '$1'" >&2; exit 2 ;;
  esac
done
export BENCH_NO_BUILD=${BENCH_NO_BUILD:-1}
demo() {  # ALLOCATION KIND(target|budget): one run's JSON line
  local extra=(--target-acc "$target")
  [[ $2 == budget ]] && extra=(--target-acc 0.99 --max-samples "$budget")
  local line
  # A budget run does not reach its target: demo.sh exits 1, its summary is still printed.
  line=$("$root/scripts/demo.sh" --mode "$mode" --workers "$workers" --stragglers 1 --slowdown 4 \
    --json "${extra[@]}" --daemon-args "--data-allocation $1" 2>/dev/null | tail -1) || true
  echo "$line" | python3 -c 'import json, sys
s = json.loads(sys.stdin.read())
e = s.get("epochs", [])
print(json.dumps({"allocation": sys.argv[1], "kind": sys.argv[2],
                  "time_to_target_s": s.get("time_to_target_s"),
                  "final_test_acc": s.get("final_test_acc"),
                  "samples_trained": s.get("samples_trained"),
                  "accounting_ok": s.get("accounting_ok"),
                  "finished_epochs": sum(1 for x in e if x["finished"]),
                  "duplicates": sum(x["duplicates"] for x in e)}))' "$1" "$2"
}
for kind in target budget; do
  for ((r = 0; r < repeats; ++r)); do
    for alloc in shards ranges; do demo "$alloc" "$kind"; done
  done
done | tee /dev/stderr | python3 -c 'import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
def med(alloc, kind, key):
    v = [r[key] for r in runs if r["allocation"] == alloc and r["kind"] == kind and r[key] is not None]
    return statistics.median(v) if v else None
out = {a: {"time_to_target_s": med(a, "target", "time_to_target_s"),
           "final_test_acc_at_budget": med(a, "budget", "final_test_acc")} for a in ("shards", "ranges")}
t = out["shards"]["time_to_target_s"], out["ranges"]["time_to_target_s"]
out["time_ranges_vs_shards"] = t[1] / t[0] if all(t) else None
print(json.dumps({"summary": out}))'
