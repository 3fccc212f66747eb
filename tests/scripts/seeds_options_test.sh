#!/usr/bin/env bash
# scripts/bench/seeds.sh and what it adds to the scripts it drives, without a build: bad
# options are refused with exit 2 and a message naming the option (demo.sh --slowdowns,
# --add-at, --drain-at; straggler.sh's +ablation modes; seeds.sh --papers; chao.py
# --experiments), and seeds_summary.py / check_json.py seeds fail on a paper without
# output.
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export BENCH_NO_BUILD=1 BUILD_DIR=$work/build GROUPSGD_RESULTS_DIR=$work/results
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fails=$((fails + 1)); fi; }
refused() {  # refused NAME PATTERN CMD...: exit 2 and PATTERN on stderr
  local name=$1 pattern=$2 rc=0
  shift 2
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  check "$name: exit 2" "[[ $rc == 2 ]]"
  check "$name: says '$pattern'" "grep -q -- '$pattern' '$work/err'"
}

refused "demo --add-at without seconds" "--add-at T\[:F\]" "$root/scripts/demo.sh" --add-at soon
refused "demo --drain-at without a name" "--drain-at T:NAME" "$root/scripts/demo.sh" --drain-at 3
refused "demo --slowdowns with pytorch trainers" "need the cpp trainers" \
  "$root/scripts/demo.sh" --trainer pytorch --slowdowns "4 2"
refused "demo --slowdowns with more stragglers than workers" "more stragglers than workers" \
  "$root/scripts/demo.sh" --workers 2 --slowdowns "4 2 2"
refused "straggler.sh unknown ablation" "unknown ablation .+bogus" \
  "$root/scripts/bench/straggler.sh" --modes "adaptive+bogus" --cases none-1x-0of8
refused "seeds.sh unknown paper" "unknown paper .bogus" "$root/scripts/bench/seeds.sh" --papers bogus
refused "seeds.sh unknown option" "unknown option .--fast" "$root/scripts/bench/seeds.sh" --fast
refused "chao.py unknown experiment" "unknown experiment .bogus" \
  python3 "$root/scripts/bench/chao.py" --experiments bogus

# A paper whose benchmark left no output: the seeds summary says so and is not ok.
mkdir -p "$work/empty"
rc=0
python3 "$root/scripts/bench/seeds_summary.py" --dir "$work/empty" --papers "chao" >"$work/sum.jsonl" || rc=$?
check "seeds_summary: exit 1 without output" "[[ $rc == 1 ]]"
check "seeds_summary: 'chao: no output'" "grep -q 'chao: no output' '$work/sum.jsonl'"
rc=0
python3 "$root/scripts/bench/check_json.py" seeds "$work/sum.jsonl" 2>"$work/err" || rc=$?
check "check_json seeds refuses it" "[[ $rc == 1 ]]"

echo "$fails failed"
exit $((fails > 0))
