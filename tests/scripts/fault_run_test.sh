#!/usr/bin/env bash
# scripts/fault_run.sh on the built binaries (GROUPSGD_BUILD_DIR, no rebuild): bad options
# are refused with exit 2, and one demo run with a trainer SIGKILLed mid-run reports the
# death, reaches its target with the survivors and keeps its accounting.
#   fault_run_test.sh SOURCE_DIR
set -uo pipefail
root=$1
export BENCH_NO_BUILD=1 BUILD_DIR=${GROUPSGD_BUILD_DIR:?set by CTest}
fails=0
check() {  # check WHAT CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what" >&2; fails=$((fails + 1)); fi
}

err=$("$root/scripts/fault_run.sh" --fault unplug 2>&1); rc=$?
check "an unknown fault is refused with exit 2" test "$rc" = 2
check "the refusal names the faults" grep -q "kill, stop or evaluator-kill" <<<"$err"
err=$("$root/scripts/fault_run.sh" --fault kill --at soon 2>&1); rc=$?
check "a bad --at is refused with exit 2" test "$rc" = 2

line=$("$root/scripts/fault_run.sh" --fault kill --at 3 --workers 3 --stragglers 0 \
  --target-acc 0.80 --max-seconds 90 --daemon-args "--step-deadline-ms 1000" 2>"${TMPDIR:-/tmp}/fault_run_test.$$.log" | tail -1)
rc=$?
check "the run exits 0" test "$rc" = 0
check_json() {
  python3 - "$line" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
problems = []
if r["fault"] != "kill" or not r["injected"]: problems.append("the kill was not injected")
if r["deaths"] != 1: problems.append(f"{r['deaths']} deaths, expected 1")
if not r["reached"]: problems.append("target not reached")
if r["accounting_ok"] is not True: problems.append("accounting not ok")
if not r["samples_trained_by_dead_workers"]: problems.append("the dead trainer was credited nothing")
print("\n".join(problems) or "json ok: " + sys.argv[1])
sys.exit(1 if problems else 0)
PY
}
check "the JSON line: one death, target reached, accounting ok" check_json
if (( fails > 0 )); then
  echo "--- the run's log:" >&2
  tail -30 "${TMPDIR:-/tmp}/fault_run_test.$$.log" >&2
fi
rm -f "${TMPDIR:-/tmp}/fault_run_test.$$.log"
(( fails == 0 )) && echo "fault_run: all checks passed"
exit $(( fails > 0 ))
