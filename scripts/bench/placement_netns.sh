#!/usr/bin/env bash
# PS placement on rate-limited links (docs/cluster.md, "Placement"; docs/benchmarks.md):
# two emulated hosts, each a network namespace with a node daemon hosting one group PS and
# two trainers, every host's link to the router shaped to RATE each way (tc tbf); the head
# (coordinator, central PS) and the evaluator in a third namespace. Trainers register in
# the order side2, side1, side2, side1, each saying its host (GROUPSGD_HOST). With
# ps_placement = hosts each group's PS is on its members' host: only the group PS's
# exchanges with the central PS cross the shaped links. With `order` (least-loaded by
# registration alone) this order puts every trainer on the other host's PS: every push and
# reply crosses two shaped links. That is the worst case of `order`; an arrival order
# chosen by chance puts half the trainers remote on average.
#
#   placement_netns.sh [--quick] [--repeats R] [--rate 100mbit] [--target 0.80]
#
# One JSON line per run, then a summary {"bench": "placement_netns", ...} with the medians
# and the ratio hosts / order of time to target (target <= 0.85; a run that missed the
# target counts as its time limit, so the ratio is then an upper bound). Needs root: exits 77
# (skipped) otherwise. Binaries from BUILD_DIR (default build/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeats=3 rate=100mbit target=0.80 budget=120000 max_s=150
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) repeats=1 target=0.78 budget=40000 max_s=60 ;;
    --repeats) repeats=$2; shift ;;
    --rate) rate=$2; shift ;;
    --target) target=$2; shift ;;
    *) echo "placement_netns: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
# shellcheck source=netns_links.sh
source "$root/scripts/bench/netns_links.sh"

make_topology 2 >&2
shape_links "$rate" 1 2
log "both hosts' links shaped to $rate each way" >&2

active_trainers() { ctl_status | jq -r '.workers.active'; }
active_at_least() { (($(active_trainers) >= $1)); }

run_once() {  # run_once PLACEMENT REPEAT: one JSON line
  local placement=$1 repeat=$2 i n=0 side
  rm -f "$WORK/summary.json" "$WORK/endpoint"
  WORKER_PIDS=()
  start_daemon --role coordinator --mode grouped --workers 4 --groups 2 \
    --ps-placement "$placement" --max-samples "$budget" --max-seconds "$max_s" \
    --target-acc "$target"
  for i in 1 2; do
    ip netns exec "${NS}-s$i" env GROUPSGD_HOST="side$i" "$GROUPSGDD" --role node \
      --coordinator "$ENDPOINT" --bind-host "10.77.$i.1" --node-groups 1 --mode grouped \
      --workers 4 --groups 2 --progress-ms 0 >"$WORK/node$i-$placement-$repeat.log" 2>&1 &
    PIDS+=("$!")
    wait_for 20 "node $i's group PS" grep -q "$i of 2 groups ready" "$WORK/daemon.log"
  done
  for side in 2 1 2 1; do
    ip netns exec "${NS}-s$side" env GROUPSGD_HOST="side$side" "$GROUPSGD_WORKER" \
      --coordinator "$ENDPOINT" --name "w$n" --device-ms 2 >"$WORK/w$n.log" 2>&1 &
    PIDS+=("$!")
    WORKER_PIDS+=("$!")
    n=$((n + 1))
    wait_for 30 "trainer $n to be placed" active_at_least "$n"
  done
  start_evaluator  # after the trainers: the run's target is judged with all four placed
  local on_host
  on_host=$("$GROUPSGDCTL" --socket "$WORK/ctl.sock" --json groups | jq '[.groups[].members_on_host] | add')
  wait_finish "$((max_s + 30))"
  pkill -TERM -f -- "--role node --coordinator $ENDPOINT" 2>/dev/null || true
  sleep 0.5
  jq -c --arg p "$placement" --argjson r "$repeat" --arg rate "$rate" --argjson on "$on_host" \
    '{bench: "placement_netns_run", placement: $p, repeat: $r, rate: $rate,
      members_on_ps_host: $on, reached, time_to_target_s, elapsed_s, samples_trained,
      final_test_acc, stop_reason, accounting_ok,
      comm_ms: ([.worker_stats[] | .comm_ms] | add / length),
      samples_per_s: (.samples_trained / .elapsed_s)}' \
    "$SUMMARY"
}

results=()
for ((r = 0; r < repeats; r++)); do
  for placement in hosts order; do
    line=$(run_once "$placement" "$r")
    echo "$line"
    results+=("$line")
  done
done
printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
def med(p, k):
    # A run that missed the target counts as its time limit (censored), as elapsed_s.
    v = [r[k] if r[k] is not None or k != "time_to_target_s" else r["elapsed_s"]
         for r in rows if r["placement"] == p]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None
s = {"bench": "placement_netns", "rate": rows[0]["rate"], "repeats": len(rows) // 2,
     "ok": all(r["accounting_ok"] for r in rows)}
for p in ("hosts", "order"):
    for k in ("time_to_target_s", "comm_ms", "samples_per_s", "members_on_ps_host"):
        s[f"{p}_{k}"] = med(p, k)
    s[f"{p}_reached"] = sum(bool(r["reached"]) for r in rows if r["placement"] == p)
h, o = s["hosts_time_to_target_s"], s["order_time_to_target_s"]
s["time_to_target_ratio"] = h / o if h and o else None
s["samples_per_s_ratio"] = (s["hosts_samples_per_s"] / s["order_samples_per_s"]
                           if s["order_samples_per_s"] else None)
s["targets_met"] = {"time_to_target_le_0_85": s["time_to_target_ratio"] is not None
                    and s["time_to_target_ratio"] <= 0.85}
print(json.dumps(s))
'
