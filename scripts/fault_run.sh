#!/usr/bin/env bash
# One demo training run with a fault injected mid-run, to see what the fault costs in
# accuracy: the demo (scripts/demo.sh) runs to its target while this script hits one
# trainer (or the evaluator) at --at seconds after the daemon started.
#
#   scripts/fault_run.sh --fault kill|stop|evaluator-kill [--at S] [--stop-s S]
#                        [--trainer NAME] [DEMO ARGS...]
#
#   kill            SIGKILL the trainer (it does not come back; the run goes on without it)
#   stop            SIGSTOP the trainer, SIGCONT after --stop-s seconds (default 3)
#   evaluator-kill  SIGKILL the evaluator (the demo restarts it)
#   --at S          when, in seconds after the daemon started (default 4)
#   --trainer NAME  which trainer (default w2: the demo's w1 is its straggler)
# DEMO ARGS go to scripts/demo.sh (default: --workers 4 --target-acc 0.85 --max-seconds 120).
# Last line: one JSON object: the fault, the demo's exit status and its summary's reached,
# acc_at_target, final_test_acc, time_to_target_s, accounting_ok, samples_dropped,
# samples_trained_by_dead_workers, deaths (the run's death events) and evaluators_lost.
# Exit status: the demo's.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

fault="" at=4 stop_s=3 trainer=w2
demo_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --fault) fault=${2:-}; shift 2 ;;
    --at) at=${2:-}; shift 2 ;;
    --stop-s) stop_s=${2:-}; shift 2 ;;
    --trainer) trainer=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) demo_args+=("$1"); shift ;;
  esac
done
case $fault in
  kill|stop|evaluator-kill) ;;
  *) echo "fault_run.sh: --fault takes kill, stop or evaluator-kill, not '$fault'" >&2; exit 2 ;;
esac
for v in "$at" "$stop_s"; do
  [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "fault_run.sh: --at and --stop-s take seconds, not '$v'" >&2; exit 2; }
done
[[ ${#demo_args[@]} -eq 0 ]] && demo_args=(--workers 4 --target-acc 0.85 --max-seconds 120)

out=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-fault.XXXXXX")
trap 'rm -rf "$out"' EXIT
"$root/scripts/demo.sh" --json "${demo_args[@]}" >"$out/demo.out" 2>&1 &
demo=$!

# The demo's processes, found by their command lines under this demo's run directory.
run_dir=""
for _ in $(seq 600); do
  run_dir=$(sed -n 's/.*logs in \([^ ]*\)$/\1/p' "$out/demo.out" | head -1)
  [[ -n $run_dir && -s $run_dir/endpoint ]] && break
  kill -0 "$demo" 2>/dev/null || break
  sleep 0.1
done
if [[ -z $run_dir || ! -s $run_dir/endpoint ]]; then
  wait "$demo"; status=$?
  cat "$out/demo.out" >&2
  echo "fault_run.sh: the demo did not start its daemon" >&2
  exit $(( status == 0 ? 1 : status ))
fi
endpoint=$(cat "$run_dir/endpoint")
sleep "$at"
target_pid() {
  if [[ $fault == evaluator-kill ]]; then cat "$run_dir/evaluator.pid" 2>/dev/null
  else pgrep -f -- "--coordinator $endpoint .*--name $trainer " | head -1; fi
}
pid=$(target_pid)
injected=false
if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
  case $fault in
    kill|evaluator-kill) kill -KILL "$pid" && injected=true ;;
    stop) kill -STOP "$pid" && injected=true && sleep "$stop_s" && kill -CONT "$pid" ;;
  esac
fi
echo "fault_run: $fault of pid ${pid:-none} at ${at}s: injected=$injected" >&2

wait "$demo"; status=$?
cat "$out/demo.out" >&2
summary=$(grep '^{' "$out/demo.out" | tail -1)
python3 - "$fault" "$at" "$injected" "$status" "$summary" <<'EOF'
import json, sys
fault, at, injected, status, line = sys.argv[1:6]
s = json.loads(line) if line else {}
keys = ("reached", "acc_at_target", "final_test_acc", "time_to_target_s", "accounting_ok", "samples_dropped",
        "samples_trained_by_dead_workers")
deaths = sum(1 for e in s.get("events", []) if e.get("kind") == "death")
print(json.dumps({"fault": fault, "at_s": float(at), "injected": injected == "true",
                  "demo_exit": int(status), **{k: s.get(k) for k in keys}, "deaths": deaths,
                  "evaluators_lost": s.get("evaluation", {}).get("evaluators_lost")}))
EOF
exit "$status"
