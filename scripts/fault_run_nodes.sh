#!/usr/bin/env bash
# One multi-process training run with a node or head fault injected mid-run, to see what
# the fault costs in accuracy (scripts/fault_run.sh does the same for trainer and
# evaluator faults on the demo). Grouped mode, 4 trainers + an evaluator, 2 groups,
# target --target-acc (default 0.85); the fault comes --at seconds (default 5) after the
# trainers started.
#
#   scripts/fault_run_nodes.sh --fault none|node-kill|node-kill-spare|serve-node-kill|
#                              head-restart|head-move|full-disk|primary-kill [--at S]
#                              [--target-acc A]
#
#   none          the baseline: one daemon (--role all) checkpointing every 20 versions,
#                 no fault
#   node-kill     a head (--role coordinator) and two node daemons with one group PS
#                 each; node b is SIGKILLed (its group fails, its trainers move)
#   node-kill-spare  node a hosts group 0, node b group 1 and a spare group PS; node a
#                 is SIGKILLed (group 0 is re-created on node b's spare)
#   serve-node-kill  a --serve daemon with a pool of two node daemons (one group PS each)
#                 and one job (submitted with groupsgdctl, trainers and evaluator with
#                 --job); node b is SIGKILLed: the job's group fails, its trainers move
#   head-restart  one daemon (--role all) checkpointing every 20 versions, SIGKILLed and
#                 restarted 1.5 s later on the same endpoint from its checkpoints
#   head-move     the same, restarted on another endpoint (trainers know both)
#   full-disk     the baseline with its checkpoint directory a 1.5 MiB tmpfs (room for one
#                 checkpoint of the MLP) in a private mount namespace: every later write
#                 fails with ENOSPC while training goes on (root only; exit 1 otherwise)
#   primary-kill  a primary head (--role coordinator, synchronous standby link), its
#                 standby (--role standby) and a node daemon with both group PSes, node
#                 and trainers given PRIMARY,STANDBY; the primary is SIGKILLed and the
#                 standby takes over (standby_takeover_ms 500, the node's
#                 coordinator_timeout_ms 500)
# Last line: one JSON object: the fault, reached, acc_at_target, final_test_acc,
# time_to_target_s (of the run that reached it), accounting_ok,
# samples_lost_in_failed_groups, node_failures, resumed_version, checkpoint_failures; with
# primary-kill also versions_lost (the last version the primary applied, from its debug
# log, minus the promoted head's resumed_version, at least 0) and takeover_s (the kill to
# the first update applied on the promoted head). Exit status 0 when the
# run reached its target, 3 when not, 1 when it could not run.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
fault="" at=5 target=0.85
while [[ $# -gt 0 ]]; do
  case $1 in
    --fault) fault=${2:-}; shift 2 ;;
    --at) at=${2:-}; shift 2 ;;
    --target-acc) target=${2:-}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "fault_run_nodes.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $fault in
  none|node-kill|node-kill-spare|serve-node-kill|head-restart|head-move|full-disk|primary-kill) ;;
  *) echo "fault_run_nodes.sh: --fault takes none, node-kill, node-kill-spare, serve-node-kill, head-restart, head-move, full-disk or primary-kill, not '$fault'" >&2
     exit 2 ;;
esac
if [[ $fault == full-disk ]] && ! unshare -m true 2>/dev/null; then
  echo "fault_run_nodes.sh: full-disk needs a private mount namespace (root): unshare -m failed" >&2
  exit 1
fi
for v in "$at" "$target"; do
  [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "fault_run_nodes.sh: --at and --target-acc take numbers, not '$v'" >&2; exit 2; }
done
daemon=$build/daemon/groupsgdd worker=$build/worker/groupsgd-worker ctl=$build/daemon/groupsgdctl
[[ -x $daemon && -x $worker ]] || { echo "fault_run_nodes.sh: build first (no $daemon or $worker)" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-nodes.XXXXXX")
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ep1=tcp://127.0.0.1:$(free_port) ep2=tcp://127.0.0.1:$(free_port)
run=(--mode grouped --workers 4 --groups 2 --heartbeat-ms 250 --heartbeat-misses 12
     --step-deadline-ms 1000 --target-acc "$target" --max-seconds 120 --progress-ms 0)
checkpoints=(--checkpoint-dir "$dir/ck" --checkpoint-every-versions 20 --checkpoint-interval-s 0)
single_head=("$daemon" "${run[@]}" "${checkpoints[@]}")  # role all, checkpointing
node() {  # node LOG [SLOTS]: a node daemon offering SLOTS group PSes (default 1)
  "$daemon" --role node --coordinator "$ep1" --node-groups "${2:-1}" --mode grouped --workers 4 \
    --groups 2 --step-deadline-ms 1000 2>"$dir/$1" &
}
wait_for() {  # wait_for FILE TEXT: up to 30 s
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "fault_run_nodes.sh: '$2' not seen in $1" >&2; return 1
}

trainers_at=$ep1
if [[ $fault == node-kill || $fault == node-kill-spare ]]; then
  "$daemon" --role coordinator --listen "$ep1" "${run[@]}" --summary-file "$dir/s.json" \
    2>"$dir/head.log" & head=$!
  node node-a.log; victim=$!; pids+=("$victim")
  wait_for "$dir/head.log" "1 of 2 groups ready" || exit 1
  if [[ $fault == node-kill ]]; then
    node node-b.log; victim=$!; pids+=("$victim")
  else
    node node-b.log 2; pids+=($!)
  fi
  wait_for "$dir/head.log" "2 of 2 groups ready" || exit 1
elif [[ $fault == serve-node-kill ]]; then
  "$daemon" --serve --listen "$ep1" --state-dir "$dir/state" --control-socket "$dir/ctl.sock" \
    --max-group-slots 0 --heartbeat-ms 250 --heartbeat-misses 12 --step-deadline-ms 1000 \
    --progress-ms 0 2>"$dir/head.log" & head=$!
  wait_for "$dir/head.log" "serving jobs" || exit 1
  "$daemon" --role node --coordinator "$ep1" --node-groups 1 2>"$dir/node-a.log" & pids+=($!)
  "$daemon" --role node --coordinator "$ep1" --node-groups 1 2>"$dir/node-b.log" & victim=$!
  pids+=("$victim")
  for _ in $(seq 300); do
    "$ctl" --socket "$dir/ctl.sock" --json job list 2>/dev/null |
      python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["group_slots"]["node_slots"] != 2)' && break
    sleep 0.1
  done
  printf '{"name": "g", "mode": "grouped", "workers": 4, "groups": 2, "model": "mlp", "target_acc": %s, "max_seconds": 120}\n' \
    "$target" >"$dir/g.json"
  "$ctl" --socket "$dir/ctl.sock" job submit "$dir/g.json" >"$dir/submit.log" 2>&1 ||
    { echo "fault_run_nodes.sh: the job was refused: $(cat "$dir/submit.log")" >&2; exit 1; }
  job_args=(--job g)
elif [[ $fault == primary-kill ]]; then
  # The standby gets the primary's flags (it becomes this head) and its own endpoint.
  replication=tcp://127.0.0.1:$(free_port)
  pair=(--role coordinator "${run[@]}" --standby-takeover-ms 500)
  "$daemon" "${pair[@]}" --listen "$ep1" --replication-listen "$replication" --log-level debug \
    2>"$dir/head1.log" & head=$!
  wait_for "$dir/head1.log" "waiting for a standby" || exit 1
  "$daemon" "${pair[@]}" --role standby --primary "$replication" --listen "$ep2" \
    --summary-file "$dir/s2.json" 2>"$dir/standby.log" & standby=$!
  pids+=("$standby")
  wait_for "$dir/head1.log" "standby attached" || exit 1
  trainers_at=$ep1,$ep2
  "$daemon" --role node --coordinator "$trainers_at" --node-groups 2 --mode grouped --workers 4 \
    --groups 2 --step-deadline-ms 1000 --coordinator-timeout-ms 500 --give-up-s 90 \
    2>"$dir/node.log" & pids+=($!)
  wait_for "$dir/head1.log" "2 of 2 groups ready" || exit 1
elif [[ $fault == full-disk ]]; then
  mkdir -p "$dir/ck"
  # The daemon in its own mount namespace, over a tmpfs only it sees (gone with it).
  # shellcheck disable=SC2016  # $1 and $@ are the inner shell's
  unshare -m --propagation private bash -c 'mount -t tmpfs -o size=1536k tmpfs "$1" && shift && exec "$@"' \
    _ "$dir/ck" "${single_head[@]}" --listen "$ep1" --summary-file "$dir/s.json" \
    2>"$dir/head.log" & head=$!
else
  "${single_head[@]}" --listen "$ep1" --summary-file "$dir/s.json" 2>"$dir/head1.log" & head=$!
  [[ $fault == head-move ]] && trainers_at=$ep1,$ep2
fi
pids+=("$head")
back_off=(--timeout-ms 1500 --backoff-max-ms 1000 --give-up-s 90)
[[ $fault == primary-kill ]] && back_off=(--timeout-ms 500 --backoff-max-ms 300 --give-up-s 90)
for i in 1 2 3 4; do
  "$worker" --coordinator "$trainers_at" ${job_args[@]+"${job_args[@]}"} --device-ms 10 --name "w$i" \
    "${back_off[@]}" 2>"$dir/w$i.log" &
  pids+=($!)
done
"$worker" --coordinator "$trainers_at" ${job_args[@]+"${job_args[@]}"} --evaluate --name evaluator \
  "${back_off[@]}" 2>"$dir/evaluator.log" &
pids+=($!)
sleep "$at"
summary=$dir/s.json
if [[ $fault == node-kill || $fault == node-kill-spare || $fault == serve-node-kill ]]; then
  kill -KILL "$victim"
elif [[ $fault == primary-kill ]]; then
  killed_at=$(date +%s.%N)
  kill -KILL "$head"; wait "$head" 2>/dev/null
  head=$standby summary=$dir/s2.json
elif [[ $fault == none || $fault == full-disk ]]; then
  :  # the baseline; full-disk's fault is the tmpfs filling up on its own
else
  kill -KILL "$head"; wait "$head" 2>/dev/null
  sleep 1.5
  ep=$ep1; [[ $fault == head-move ]] && ep=$ep2
  "${single_head[@]}" --listen "$ep" --summary-file "$dir/s2.json" 2>"$dir/head2.log" & head=$!
  pids+=("$head")
  summary=$dir/s2.json
fi
echo "fault_run_nodes: $fault at ${at}s" >&2
if [[ $fault == serve-node-kill ]]; then
  # The daemon stays up for other jobs: the job's summary appears when it ends.
  summary=$dir/state/jobs/g/summary.json
  for _ in $(seq 1500); do [[ -s $summary ]] && break; sleep 0.1; done
  kill -TERM "$head"
fi
wait "$head"
[[ -s $summary ]] || { echo "fault_run_nodes.sh: no summary; the head's log:" >&2; tail -20 "$dir"/head*.log >&2; exit 1; }
python3 - "$summary" "$fault" "$at" "$dir" "${killed_at:-0}" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))
extra = {}
if sys.argv[2] == "primary-kill":
    # The primary's debug lines "applied delta ... v=N"; the promoted head's
    # "takeover: first update applied on the promoted head at unix time T".
    applied = [int(v) for v in re.findall(r"applied delta .* v=(\d+)", open(sys.argv[4] + "/head1.log").read())]
    first = re.search(r"takeover: first update applied on the promoted head at unix time ([0-9.]+)",
                      open(sys.argv[4] + "/standby.log").read())
    resumed = (s.get("head_restart") or {}).get("resumed_version")
    extra = {"versions_lost": None if resumed is None else max(0, max(applied, default=0) - resumed),
             "primary_last_applied": max(applied, default=None),
             "takeover_s": round(float(first.group(1)) - float(sys.argv[5]), 3) if first else None}
keys = ("reached", "acc_at_target", "final_test_acc", "time_to_target_s", "accounting_ok",
        "samples_lost_in_failed_groups")
print(json.dumps({"fault": sys.argv[2], "at_s": float(sys.argv[3]), **{k: s.get(k) for k in keys},
                  "node_failures": len(s.get("node_failures") or []),
                  "resumed_version": (s.get("head_restart") or {}).get("resumed_version"),
                  "checkpoint_failures": (s.get("central") or {}).get("checkpoint_failures"), **extra}))
sys.exit(0 if s.get("reached") else 3)
PY
