#!/usr/bin/env bash
# Fuzz campaign: builds the libFuzzer targets (clang, build-fuzz/) and runs each for
# SECONDS (default 60) on a scratch copy of its seed corpus, then prints one JSON line per
# target from libFuzzer's final stats: executions, exec/s, coverage (cov = edges, ft =
# features), corpus size, new units, peak RSS and findings (crash/leak/timeout/oom
# artifacts, kept under the work directory). Exit 1 when any target found something.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      env: FUZZ_BUILD_DIR, FUZZ_WORK_DIR, FUZZ_JOBS
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
build=${FUZZ_BUILD_DIR:-build-fuzz}
work=${FUZZ_WORK_DIR:-$build/fuzz-campaign}
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(ls tests/fuzz/corpus)
fi
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "fuzz.sh: SECONDS must be a positive integer" >&2; exit 2; }
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is needed (scripts/install-deps.sh --extra)" >&2; exit 2; }

if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DGROUPSGD_FUZZ=ON -DGROUPSGD_WITH_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j"${FUZZ_JOBS:-2}" --target "${targets[@]}" >/dev/null

found=0
for t in "${targets[@]}"; do
  dir="$work/$t"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  # New inputs go to the scratch corpus (first directory); the seeds are only read.
  "$build/tests/fuzz/$t" "$dir/corpus" "tests/fuzz/corpus/$t" -max_total_time="$seconds" \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" -rss_limit_mb=2048 \
    >"$dir/log" 2>&1 || true
  stat() {
    local v
    v=$(awk -v k="stat::$1:" '$1 == k {print $2}' "$dir/log" | tail -n1)
    echo "${v:-null}"
  }
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$dir/log" | tail -n1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$done_line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$done_line")
  corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$done_line")
  findings=$(find "$dir/artifacts" -type f | wc -l)
  found=$((found + findings))
  printf '{"target":"%s","seconds":%s,"execs":%s,"exec_per_s":%s,"cov":%s,"ft":%s,"corpus":%s,"new_units":%s,"peak_rss_mb":%s,"findings":%s}\n' \
    "$t" "$seconds" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
    "${cov:-null}" "${ft:-null}" "${corp:-null}" "$(stat new_units_added)" \
    "$(stat peak_rss_mb)" "$findings"
done
[[ $found -eq 0 ]]
