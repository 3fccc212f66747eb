#!/usr/bin/env bash
# Runs process test cases over and over, two at a time beside a CPU hog, to catch failures
# that show once in tens of runs (a crash under load, a race at shutdown). Each failed
# run keeps its test directory (daemon and worker logs; groupsgdd and groupsgd-worker
# write a crash report there on a fatal signal) and its core dump, if the system writes one.
#
#   scripts/soak.sh [--runs N] [--out DIR] [--no-hog] [TEST_BINARY:CASE_PATTERN ...]
#
# Defaults: 20 runs of each case, the cases that once failed only under load
# (docs/reliability.md, "Flakes looked at"). The build must exist (scripts/build.sh).
# Last line: one JSON object {"soak": ..., "runs": N, "failed": F, "crash_reports": C}.
# Exit status 1 when any run failed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
runs=20
out=
hog=1
cases=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-hog) hog=0; shift ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "soak.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) cases+=("$1"); shift ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: --runs takes a positive integer, not '$runs'" >&2; exit 2; }
if [[ ${#cases[@]} -eq 0 ]]; then
  cases=("tests/process/test_process:*top-k*"
         "tests/process/test_failover:*multi-node roles: the head restarted*")
fi
out=${out:-$root/results/soak-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"

export OPENBLAS_NUM_THREADS=1 GROUPSGD_BUILD_DIR=$build GROUPSGD_KEEP_TEST_DIRS=1
ulimit -c unlimited 2>/dev/null || true

hog_pid=
if [[ $hog == 1 ]]; then
  # One busy loop: the tests' processes share the cores with it, as on a loaded machine.
  ( while [[ ! -e "$out/.done" ]]; do timeout 5 sh -c 'while :; do :; done'; done ) &
  hog_pid=$!
  trap 'touch "$out/.done"; kill "$hog_pid" 2>/dev/null' EXIT
fi

# One run: the test binary with a doctest case filter, its test directories (the tests
# make theirs under $TMPDIR) in DIR.d beside its log DIR.log.
one() {
  local bin=$1 pattern=$2 run=$3
  mkdir -p "$run.d"
  echo "soak: $bin -tc='$pattern'" > "$run.log"
  (cd "$build" && TMPDIR=$run.d "./$bin" -tc="$pattern" >> "$run.log" 2>&1; echo "rc=$?" >> "$run.log")
}

total=0 failed=0 c=0
for spec in "${cases[@]}"; do
  bin=${spec%%:*}
  pattern=${spec#*:}
  [[ -x "$build/$bin" ]] || { echo "soak.sh: $build/$bin is not built (scripts/build.sh)" >&2; exit 2; }
  # Short run names (cCrR): the tests' Unix sockets live in their directories, and a
  # socket's path must stay under 108 bytes.
  c=$((c + 1))
  for ((i = 1; i <= runs; i += 2)); do
    one "$bin" "$pattern" "$out/c${c}r$i" & a=$!
    b=
    if ((i + 1 <= runs)); then one "$bin" "$pattern" "$out/c${c}r$((i + 1))" & b=$!; fi
    wait $a ${b:+$b}
  done
  bad=0
  for ((i = 1; i <= runs; i++)); do
    log=$out/c${c}r$i.log
    total=$((total + 1))
    if grep -q '^rc=0$' "$log"; then
      rm -rf "$log" "$out/c${c}r$i.d"
    else
      failed=$((failed + 1)); bad=$((bad + 1))
      echo "soak: FAILED $log (test directories: $out/c${c}r$i.d)"
    fi
  done
  echo "soak: case $c ($bin -tc='$pattern'): $runs runs, $bad failed"
done
touch "$out/.done"
[[ -n "$hog_pid" ]] && wait "$hog_pid"

# Crash reports land in the daemon's and workers' logs inside the test directories.
crash=$(grep -rl "fatal signal" "$out" 2>/dev/null | wc -l)
printf '{"soak": "%s", "runs": %d, "failed": %d, "crash_reports": %d}\n' "$out" "$total" "$failed" "$crash"
[[ $failed -eq 0 ]]
