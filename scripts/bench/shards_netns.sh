#!/usr/bin/env bash
# Central shards on rate-limited links (docs/shards.md; docs/benchmarks.md, "Central
# shards"): the exchange throughput of the group PSes with 1, 2 and 4 central shards, each
# shard on its own emulated host whose link is shaped to RATE each way (tc tbf). The head
# (coordinator + shard 0) is in the head namespace, its link shaped too; shards 1..S-1 are
# groupsgdd --role central-shard in sides 2..S; the group PSes (a node daemon with two)
# and the four trainers are in side 1, whose link is not shaped: every exchange crosses
# the shaped links of the shards, so with one shard one link carries them all and with S
# shards S links carry 1/S each. No evaluator (its fetches would share the links).
#
#   shards_netns.sh [--quick] [--repeats R] [--rate 20mbit] [--seconds 20] [--shards "1 2 4"]
#                   [--split even|tensors] [--check]
#
# One JSON line per run, then a summary {"bench": "shards_netns", ...} with the median
# exchanges per second at each S and their ratio to S = 1. --check (the CTest smoke,
# tests/bench): exit 1 unless every run's accounting held and 2 shards exchanged at least
# 1.3x as often as one. Needs root: exits 77 (skipped) otherwise. Binaries from BUILD_DIR (default build/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
export GROUPSGDD=${GROUPSGDD:-$build/daemon/groupsgdd}
export GROUPSGD_WORKER=${GROUPSGD_WORKER:-$build/worker/groupsgd-worker}
export GROUPSGDCTL=${GROUPSGDCTL:-$build/daemon/groupsgdctl}
repeats=3 rate=20mbit seconds=20 shard_counts="1 2 4" split=even check=0 target=
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) repeats=1 seconds=10 ;;
    --repeats) repeats=$2; shift ;;
    --rate) rate=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --shards) shard_counts=$2; shift ;;
    --split) split=$2; shift ;;
    --target) target=$2; shift ;;
    --check) check=1 ;;
    *) echo "shards_netns: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
# shellcheck source=../../tests/netns/lib.sh
source "$root/tests/netns/lib.sh"
require_netns

max_shards=1
for s in $shard_counts; do ((s > max_shards)) && max_shards=$s; done
make_topology "$max_shards" >&2  # side 1: groups and trainers; sides 2..S: shards 1..S-1
in_ns rt tc qdisc add dev rh root tbf rate "$rate" burst 64kb latency 400ms
in_ns head tc qdisc add dev h0 root tbf rate "$rate" burst 64kb latency 400ms
for ((i = 2; i <= max_shards; i++)); do
  in_ns rt tc qdisc add dev "r$i" root tbf rate "$rate" burst 64kb latency 400ms
  in_ns "s$i" tc qdisc add dev s0 root tbf rate "$rate" burst 64kb latency 400ms
done
log "the head's and every shard host's link shaped to $rate each way; side 1 (groups) not" >&2

active_trainers() { ctl_status | jq -r '.workers.active'; }
active_at_least() { (($(active_trainers) >= $1)); }

run_once() {  # run_once SHARDS REPEAT: one JSON line
  local shards=$1 repeat=$2 k n shard_pids=() eps=""
  rm -f "$WORK/summary.json" "$WORK/endpoint"
  WORKER_PIDS=()
  for ((k = 1; k < shards; k++)); do
    rm -f "$WORK/shard$k.ep"
    ip netns exec "${NS}-s$((k + 1))" "$GROUPSGDD" --role central-shard --central-shards "$shards" \
      --central-shard-split "$split" --shard-index "$k" --listen "tcp://10.77.$((k + 1)).1:0" \
      --endpoint-file "$WORK/shard$k.ep" >"$WORK/shard$k-$shards-$repeat.log" 2>&1 &
    shard_pids+=("$!")
    PIDS+=("$!")
    wait_for 20 "shard $k's endpoint" test -s "$WORK/shard$k.ep"
    eps+="${eps:+,}$(cat "$WORK/shard$k.ep")"
  done
  local shard_args=()
  ((shards > 1)) && shard_args=(--central-shards "$shards" --central-shard-split "$split"
    --central-shard-endpoints "$eps")
  local stop_args=(--max-samples 100000000 --max-seconds "$seconds")
  [[ -n $target ]] && stop_args+=(--target-acc "$target")
  start_daemon --role coordinator --mode grouped --workers 4 --groups 2 --exchange-period 1 \
    "${stop_args[@]}" "${shard_args[@]}"
  ip netns exec "${NS}-s1" "$GROUPSGDD" --role node --coordinator "$ENDPOINT" --bind-host 10.77.1.1 \
    --node-groups 2 --mode grouped --workers 4 --groups 2 --progress-ms 0 \
    >"$WORK/node-$shards-$repeat.log" 2>&1 &
  local node_pid=$!
  PIDS+=("$node_pid")
  wait_for 20 "the node's group PSes" grep -q "2 of 2 groups ready" "$WORK/daemon.log"
  for ((n = 0; n < 4; n++)); do
    start_worker 1 "w$n" --device-ms 2
  done
  if [[ -n $target ]]; then
    ip netns exec "${NS}-head" "$GROUPSGD_WORKER" --coordinator "$ENDPOINT" --name eval --evaluate \
      --eval-interval-ms 1000 >"$WORK/eval-$shards-$repeat.log" 2>&1 &
    PIDS+=("$!")
  fi
  wait_finish "$((seconds + 60))"
  kill -TERM "$node_pid" ${shard_pids[@]+"${shard_pids[@]}"} 2>/dev/null || true
  wait "$node_pid" ${shard_pids[@]+"${shard_pids[@]}"} 2>/dev/null || true
  jq -c --argjson s "$shards" --argjson r "$repeat" --arg rate "$rate" --arg split "$split" \
    '{bench: "shards_netns_run", shards: $s, split: $split, repeat: $r, rate: $rate,
      exchanges: ([.group_stats[] | .exchanges] | add), elapsed_s, samples_trained, accounting_ok,
      central_version, reached, time_to_target_s, final_test_acc,
      exchanges_per_s: (([.group_stats[] | .exchanges] | add) / .elapsed_s),
      samples_per_s: (.samples_trained / .elapsed_s)}' "$SUMMARY"
}

results=()
for ((r = 0; r < repeats; r++)); do
  for s in $shard_counts; do
    line=$(run_once "$s" "$r")
    echo "$line"
    results+=("$line")
  done
done
printf '%s\n' "${results[@]}" | CHECK=$check python3 -c '
import json, os, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
counts = sorted({r["shards"] for r in rows})
s = {"bench": "shards_netns", "rate": rows[0]["rate"], "split": rows[0]["split"],
     "repeats": len(rows) // len(counts), "ok": all(r["accounting_ok"] for r in rows)}
for c in counts:
    s[f"exchanges_per_s_{c}"] = statistics.median(
        r["exchanges_per_s"] for r in rows if r["shards"] == c)
if rows[0].get("time_to_target_s") is not None or any(r["reached"] for r in rows):
    # --target: medians over the runs that reached it; a run that did not counts as missing.
    for c in counts:
        times = [r["time_to_target_s"] for r in rows if r["shards"] == c and r["reached"]]
        runs = sum(1 for r in rows if r["shards"] == c)
        s[f"reached_{c}"] = f"{len(times)}/{runs}"
        s[f"time_to_target_s_{c}"] = statistics.median(times) if times else None
    t1 = s.get("time_to_target_s_1")
    for c in counts:
        tc = s.get(f"time_to_target_s_{c}")
        if t1 and tc and c != 1:
            s[f"time_ratio_{c}"] = tc / t1
base = s.get("exchanges_per_s_1")
for c in counts:
    if base and c != 1:
        s[f"speedup_{c}"] = s[f"exchanges_per_s_{c}"] / base
s["targets_met"] = {"speedup_2_ge_1_8": s.get("speedup_2", 0) >= 1.8,
                    "speedup_4_ge_3_2": s.get("speedup_4", 0) >= 3.2}
print(json.dumps(s))
if os.environ.get("CHECK") == "1" and not (s["ok"] and s.get("speedup_2", 0) >= 1.3):
    sys.exit("shards_netns --check: accounting broken or 2 shards under 1.3x one")
'
