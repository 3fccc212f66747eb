#!/usr/bin/env bash
# scripts/fault_run.sh on the built binaries (GROUPSGD_BUILD_DIR, no rebuild): bad options
# are refused with exit 2, and one demo run with a trainer SIGKILLed mid-run reports the
# death, reaches its target with the survivors and keeps its accounting.
#   fault_run_test.sh SOURCE_DIR
set -uo pipefail
root=$1
export BENCH_NO_BUILD=1 BUILD_DIR=${GROUPSGD_BUILD_DIR:?set by CTest}
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"
log=${TMPDIR:-/tmp}/fault_run_test.$$.log

err=$("$root/scripts/fault_run.sh" --fault unplug 2>&1); rc=$?
check "an unknown fault is refused with exit 2" test "$rc" = 2
check "the refusal names the faults" grep -q "kill, stop or evaluator-kill" <<<"$err"
err=$("$root/scripts/fault_run.sh" --fault kill --at soon 2>&1); rc=$?
check "a bad --at is refused with exit 2" test "$rc" = 2

# Target 0.85 (several seconds of training): the kill must come before the target.
line=$("$root/scripts/fault_run.sh" --fault kill --at 2 --workers 3 --stragglers 0 \
  --target-acc 0.85 --max-seconds 90 --daemon-args "--step-deadline-ms 1000" 2>"$log" | tail -1)
rc=$?
check "the run exits 0" test "$rc" = 0
check "the JSON line: one death, target reached, accounting ok" json_has "$line" \
  "fault == 'kill' and injected" "deaths == 1" "reached" "accounting_ok is True" \
  "samples_trained_by_dead_workers > 0"
finish fault_run "$log"
