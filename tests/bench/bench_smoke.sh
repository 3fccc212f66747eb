#!/usr/bin/env bash
# A bench smoke test (CTest label "bench"): runs scripts/bench.sh NAME --quick [args] on the
# binaries already built in GROUPSGD_BUILD_DIR (no rebuild), results in the build tree, then
# checks the JSON lines (scripts/bench/check_json.py): shape, never speed.
#   bench_smoke.sh NAME [extra bench args]
# Exits 77 (CTest: skipped) when python3 is missing or the benchmark skipped itself (77:
# e.g. dataplane-netns without root).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=$1
shift
build=${GROUPSGD_BUILD_DIR:?set by CTest}
command -v python3 >/dev/null || { echo "bench_smoke: python3 is missing; skipped" >&2; exit 77; }
if [[ $name == pytorch || $name == lm ]] && ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "bench_smoke: python3-torch is not installed; skipped" >&2
  exit 77
fi
export BENCH_NO_BUILD=1 BUILD_DIR=$build GROUPSGD_RESULTS_DIR=$build/bench-smoke
mkdir -p "$GROUPSGD_RESULTS_DIR"
out=$GROUPSGD_RESULTS_DIR/$name-smoke.jsonl
status=0
"$root/scripts/bench.sh" "$name" --quick "$@" >"$out" || status=$?
cat "$out"
if [[ $status == 77 ]]; then
  echo "bench_smoke: scripts/bench.sh $name --quick $* skipped itself (exit 77)" >&2
  exit 77
fi
if [[ $status != 0 ]]; then
  echo "bench_smoke: scripts/bench.sh $name --quick $* exited $status" >&2
  exit 1
fi
python3 "$root/scripts/bench/check_json.py" "$name" "$out"
