#!/usr/bin/env bash
# scripts/bench/standby_cost.sh's bad options are refused with exit 2 and a message naming
# them, before anything runs (no build needed).
#   standby_cost_options_test.sh SOURCE_DIR
set -uo pipefail
root=$1
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"
script=$root/scripts/bench/standby_cost.sh
err=$("$script" --pairs 3 2>&1); rc=$?
check "an unknown option is refused with exit 2" test "$rc" = 2
check "the refusal names it" grep -q "unknown option '--pairs'" <<<"$err"
err=$("$script" --runs 0 2>&1); rc=$?
check "--runs 0 is refused with exit 2" test "$rc" = 2
check "the refusal says what --runs takes" grep -q "positive number, not '0'" <<<"$err"
finish standby_cost_options
