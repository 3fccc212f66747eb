#!/usr/bin/env bash
# ASHL's stage and compression ablation over a bandwidth-limited link (docs/seeds.md):
# the head (coordinator, central PS, group PSes) and the evaluator in one network
# namespace, four trainers each in its own, behind a router; the links of the last
# --shaped trainers (default 1: w4 alone, a bandwidth straggler; 4: every trainer) shaped
# to RATE each way (tc tbf, as placement_netns.sh does), the others unshaped. Unlike
# straggler.sh's link straggler (a fixed delay per exchange), the delay shrinks with the
# bytes sent, so compression can pay.
#
#   ashl_netns.sh [--quick] [--repeats R] [--rate 20mbit] [--shaped N] [--target 0.85]
#                 [--modes "M..."]
#
# Modes as straggler.sh's: adaptive, with +nostages, +stages, +fp16, +topk, +auto (compress_gradients
# auto, the default: plain adaptive is the same; the run line's `compression` lists each
# group's final choice), +dense (compress_gradients dense). One JSON line per run,
# then {"bench": "ashl_netns", ...} with the median time to target per mode and its ratio
# to adaptive's. Needs root: exits 77 (skipped) otherwise. Binaries from BUILD_DIR.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeats=3 rate=20mbit target=0.85 max_s=120 shaped=1
modes="adaptive adaptive+nostages adaptive+fp16 adaptive+topk adaptive+nostages+fp16 adaptive+nostages+topk"
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) repeats=1 target=0.78 max_s=60 modes="adaptive adaptive+fp16" ;;
    --repeats) repeats=$2; shift ;;
    --rate) rate=$2; shift ;;
    --shaped) shaped=$2; shift ;;
    --target) target=$2; shift ;;
    --modes) modes=$2; shift ;;
    *) echo "ashl_netns: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $shaped =~ ^[1-4]$ ]] || { echo "ashl_netns: --shaped is 1 to 4, not '$shaped'" >&2; exit 2; }
# shellcheck source=netns_links.sh
source "$root/scripts/bench/netns_links.sh"

echo '{"adaptive": {"coarse_period": 1, "coarse_max_groups": 2}}' >"$WORK/nostages.json"
echo '{"adaptive": {"coarse_period": 4, "coarse_max_groups": 4}}' >"$WORK/stages.json"
mode_flags() {  # the daemon flags of adaptive+SUFFIX+...
  local s
  [[ $1 == adaptive || $1 == adaptive+* ]] || { echo "ashl_netns: mode '$1' is not adaptive[+...]" >&2; return 1; }
  for s in $(tr '+' ' ' <<<"${1#adaptive}"); do
    case $s in
      nostages) echo "--config $WORK/nostages.json" ;;  # the default since 2026-11-29
      stages) echo "--config $WORK/stages.json" ;;  # the coarse stage of before
      fp16) echo "--compress-gradients fp16 --compress-deltas fp16" ;;
      topk) echo "--compress-gradients topk:0.1 --compress-deltas topk:0.1" ;;
      auto) echo "--compress-gradients auto" ;;  # the default since 2026-11-29
      dense) echo "--compress-gradients dense" ;;  # adaptive as it ran before that
      *) echo "ashl_netns: unknown ablation '+$s'" >&2; return 1 ;;
    esac
  done
}
for m in $modes; do mode_flags "$m" >/dev/null || exit 2; done

make_topology 4 >&2
shape_links "$rate" $(seq $((5 - shaped)) 4)
log "the links of trainers w$((5 - shaped))..w4 shaped to $rate each way" >&2

run_once() {  # run_once MODE REPEAT: one JSON line
  local mode=$1 repeat=$2 i
  rm -f "$WORK/summary.json" "$WORK/endpoint"
  # shellcheck disable=SC2034  # read by lib.sh's wait_finish
  WORKER_PIDS=()
  # shellcheck disable=SC2046  # the mode's flags are meant to be word-split
  start_daemon --mode adaptive --workers 4 --data-allocation ranges --target-acc "$target" \
    --max-seconds "$max_s" --heartbeat-ms 250 --control-ms 500 $(mode_flags "$mode")
  start_evaluator
  for i in 1 2 3 4; do start_worker "$i" "w$i" --device-ms 10; done
  wait_finish "$((max_s + 30))"
  jq -c --arg m "$mode" --argjson r "$repeat" --arg rate "$rate" --argjson shaped "$shaped" \
    '{bench: "ashl_netns_run", mode: $m, repeat: $r, rate: $rate, shaped: $shaped, reached,
      time_to_target_s,
      elapsed_s, samples_trained, final_test_acc, regroups, stop_reason, accounting_ok,
      compression: [.gradient_compression.groups[]? |
                    {phase: (.compression_phase // .compression), link_mbit}],
      comm_ms: ([.worker_stats[] | select(.comm_ms != null) | .comm_ms] | add / length)}' \
    "$SUMMARY"
}

results=()
for ((r = 1; r <= repeats; r++)); do
  for m in $modes; do
    line=$(run_once "$m" "$r")
    echo "$line"
    results+=("$line")
  done
done
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
modes = list(dict.fromkeys(r["mode"] for r in rows))
def stats(xs):
    xs = [x for x in xs if x is not None]
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3),
            "max": round(max(xs), 3), "n": len(xs)} if xs else {"median": None, "n": 0}
res = {m: {"time_to_target_s": stats([r["time_to_target_s"] for r in rows if r["mode"] == m]),
           "final_test_acc": stats([r["final_test_acc"] for r in rows if r["mode"] == m]),
           "reached": sum(bool(r["reached"]) for r in rows if r["mode"] == m)} for m in modes}
meds = {m: e["time_to_target_s"]["median"] for m, e in res.items() if e["time_to_target_s"]["median"]}
d = meds.get("adaptive")
s = {"bench": "ashl_netns", "rate": rows[0]["rate"], "shaped_trainers": rows[0]["shaped"],
     "repeats": max(r["repeat"] for r in rows),
     "results": res, "fastest": min(meds, key=meds.get) if meds else None,
     "vs_default": {m: round(v / d, 3) for m, v in meds.items()} if d else None,
     "ok": all(r["accounting_ok"] for r in rows)}
print(json.dumps(s))
'
