#!/usr/bin/env bash
# scripts/fault_run_nodes.sh on the built binaries (GROUPSGD_BUILD_DIR): a bad option is
# refused with exit 2, and one run with a node daemon SIGKILLed mid-run reports the failed
# node, reaches its target with the surviving group and keeps its accounting.
#   fault_run_nodes_test.sh SOURCE_DIR
set -uo pipefail
root=$1
export BUILD_DIR=${GROUPSGD_BUILD_DIR:?set by CTest}
fails=0
check() {  # check WHAT COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what" >&2; fails=$((fails + 1)); fi
}
log=${TMPDIR:-/tmp}/fault_run_nodes_test.$$.log

err=$("$root/scripts/fault_run_nodes.sh" --fault unplug 2>&1); rc=$?
check "an unknown fault is refused with exit 2" test "$rc" = 2
check "the refusal names the faults" grep -q "node-kill, head-restart or head-move" <<<"$err"

# Target 0.85 (~10 s of training): the kill must come before the target, not during the
# end-of-run drain (a node lost then is a known gap: docs/reliability.md, "Not yet").
line=$("$root/scripts/fault_run_nodes.sh" --fault node-kill --at 3 --target-acc 0.85 2>"$log" | tail -1)
check_json() {
  python3 - "$line" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
problems = []
if r["node_failures"] != 1: problems.append(f"{r['node_failures']} node failures, expected 1")
if not r["reached"]: problems.append("target not reached")
if r["accounting_ok"] is not True: problems.append("accounting not ok")
print("\n".join(problems) or "json ok: " + sys.argv[1])
sys.exit(1 if problems else 0)
PY
}
check "the JSON line: one node failure, target reached, accounting ok" check_json
(( fails > 0 )) && { echo "--- the run's stderr:" >&2; tail -30 "$log" >&2; }
rm -f "$log"
(( fails == 0 )) && echo "fault_run_nodes: all checks passed"
exit $(( fails > 0 ))
