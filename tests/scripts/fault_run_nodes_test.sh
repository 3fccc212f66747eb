#!/usr/bin/env bash
# scripts/fault_run_nodes.sh on the built binaries (GROUPSGD_BUILD_DIR): a bad option is
# refused with exit 2, and one run with a node daemon SIGKILLed mid-run reports the failed
# node, reaches its target with the surviving group and keeps its accounting; one run with
# the primary head SIGKILLed reaches its target on the promoted standby with no version
# lost, its accounting kept and a takeover time measured.
#   fault_run_nodes_test.sh SOURCE_DIR
set -uo pipefail
root=$1
export BUILD_DIR=${GROUPSGD_BUILD_DIR:?set by CTest}
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"
log=${TMPDIR:-/tmp}/fault_run_nodes_test.$$.log

err=$("$root/scripts/fault_run_nodes.sh" --fault unplug 2>&1); rc=$?
check "an unknown fault is refused with exit 2" test "$rc" = 2
check "the refusal names the faults" grep -q "none, node-kill, node-kill-spare, serve-node-kill, head-restart, head-move, full-disk or primary-kill" <<<"$err"

# Target 0.85 (~10 s of training): the kill comes before the target (a node lost during
# the end-of-run drain is test_failover's "killed as the run stops").
line=$("$root/scripts/fault_run_nodes.sh" --fault node-kill --at 3 --target-acc 0.85 2>"$log" | tail -1)
check "the JSON line: one node failure, target reached, accounting ok" json_has "$line" \
  "node_failures == 1" "reached" "accounting_ok is True"
# The standby takes over 500 ms after the kill; the node's call to the dead head gives up
# after 500 ms: the first update on the new head ~1 s after the kill (5 s: a loaded machine).
line=$("$root/scripts/fault_run_nodes.sh" --fault primary-kill --at 3 --target-acc 0.85 2>>"$log" | tail -1)
check "primary-kill: target reached, 0 versions lost, accounting ok, takeover measured" json_has "$line" \
  "reached" "versions_lost == 0" "accounting_ok is True" "0 < takeover_s < 5"
finish fault_run_nodes "$log"
