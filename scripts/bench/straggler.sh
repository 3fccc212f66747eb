#!/usr/bin/env bash
# The straggler benchmark: scripts/demo.sh --json over and over, 8 workers of which one is
# a straggler F times slower (F = 1, 2, 4, 8) of three kinds, for every training mode:
#   compute   --slowdown F
#   link      --link-ms (F-1)*STEP_MS     (a fixed delay on every exchange)
#   erratic   --erratic P:(F-1)*STEP_MS/P (random pauses; the mean step is F times longer)
# (STEP_MS = the normal step: device time 10 ms + ~2 ms; F = 1 is one run per mode, kind
# "none"). Two runs per case: to the target accuracy (time_to_target_s) and, separately,
# a fixed sample budget (final_test_acc). One JSON line per run on stdout, then a summary
# JSON line; raw demo output under results/straggler-<UTC time>/; plots (gnuplot) of time
# to target vs slowdown per kind, and accuracy vs time at 4x compute, into docs/img/.
# Usually started as `scripts/bench.sh straggler [options]`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

quick=0 kinds="compute link erratic" slowdowns="1 2 4 8" modes="sync async grouped2 grouped4 adaptive"
target=0.85 budget=200000 max_seconds=300 workers=8 device_ms=10 step_ms=12 stall_prob=0.1
repeats=1 plots=1 img_dir=""
usage() {
  cat <<USAGE
usage: scripts/bench/straggler.sh [options]
  --quick            compute kind, slowdown 1 and 4, sync and adaptive, demo --quick
                     (target 0.80, 50 s per run), no sample-budget runs; plots into the
                     results directory. Checks the output, not the speed (~2-4 minutes).
                     Options given with it override these (--quick --modes adaptive).
  --kinds "K..."     of compute link erratic (default all)
  --slowdowns "F..." (default "1 2 4 8")
  --modes "M..."     of sync async grouped2 grouped4 adaptive (groupedG = grouped, G groups)
  --target A         target test accuracy (default 0.85)
  --budget N         samples of the fixed-budget runs; 0 = none (default 200000)
  --max-seconds S    per run (default 300)
  --step-ms T        the normal step time used to size link and erratic delays (default 12)
  --stall-prob P     erratic: chance of a pause per step (default 0.1)
  --repeats R        runs per case (default 1)
  --img-dir DIR      where the PNGs go (default docs/img; with --quick the results dir)
  --no-plots         skip gnuplot
USAGE
}
# --quick sets the defaults below; options given beside it (--modes, ...) still win.
for arg in "$@"; do
  if [[ $arg == --quick ]]; then
    quick=1 kinds=compute slowdowns="1 4" modes="sync adaptive" target=0.80 budget=0 max_seconds=50
  fi
done
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) shift ;;
    --kinds) kinds=$2; shift 2 ;;
    --slowdowns) slowdowns=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --max-seconds) max_seconds=$2; shift 2 ;;
    --step-ms) step_ms=$2; shift 2 ;;
    --stall-prob) stall_prob=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --img-dir) img_dir=$2; shift 2 ;;
    --no-plots) plots=0; shift ;;
    --help|-h) usage; exit 0 ;;
    *) echo "straggler: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
run_dir=${GROUPSGD_RESULTS_DIR:-$root/results}/straggler-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
if [[ -z $img_dir ]]; then
  img_dir=$root/docs/img
  [[ $quick == 1 ]] && img_dir=$run_dir
fi
runs=$run_dir/runs.jsonl
: >"$runs"
log() { echo "straggler: $*" >&2; }
command -v python3 >/dev/null || { log "needs python3 (scripts/install-deps.sh --extra)"; exit 1; }

# Straggler flags for demo.sh: kind, slowdown.
straggler_args() {
  local kind=$1 f=$2
  case "$kind" in
    none) echo "--slowdown 1" ;;
    compute) echo "--slowdown $f" ;;
    link) echo "--slowdown 1 --link-ms $(awk -v f="$f" -v t="$step_ms" 'BEGIN { print (f - 1) * t }')" ;;
    erratic) echo "--slowdown 1 --erratic $stall_prob:$(awk -v f="$f" -v t="$step_ms" -v p="$stall_prob" 'BEGIN { print (f - 1) * t / p }')" ;;
    *) log "unknown kind '$kind'"; return 1 ;;
  esac
}

mode_args() {
  case "$1" in
    sync|async|adaptive) echo "--mode $1" ;;
    grouped*) echo "--mode grouped --groups ${1#grouped}" ;;
    *) log "unknown mode '$1'"; return 1 ;;
  esac
}

# One demo run; appends its JSON line to $runs and prints it.
run_one() {
  local kind=$1 f=$2 mode=$3 what=$4 rep=$5
  local tag="$kind-${f}x-$mode-$what-r$rep" rc=0 started
  # Progress lines every 250 ms (the evaluator reports every 500 ms) for accuracy vs time.
  local args=(--workers "$workers" --stragglers 1 --device-ms "$device_ms" --json
    --daemon-args "--progress-ms 250")
  # shellcheck disable=SC2207  # the helpers print flags meant to be word-split
  args+=($(mode_args "$mode") $(straggler_args "$kind" "$f"))
  if [[ $quick == 1 ]]; then args+=(--quick); else args+=(--max-seconds "$max_seconds"); fi
  if [[ $what == budget ]]; then
    args+=(--target-acc 0 --max-samples "$budget")
  elif [[ $quick == 0 ]]; then
    args+=(--target-acc "$target")
  fi
  log "$tag: scripts/demo.sh ${args[*]}"
  started=$(date +%s.%N)
  "$root/scripts/demo.sh" "${args[@]}" >"$run_dir/$tag.out" 2>"$run_dir/$tag.err" || rc=$?
  python3 "$root/scripts/bench/straggler_summary.py" run --out "$run_dir/$tag.out" --rc "$rc" \
    --kind "$kind" --slowdown "$f" --mode "$mode" --run "$what" --repeat "$rep" \
    --wall "$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" | tee -a "$runs"
}

log "results in $run_dir"
for rep in $(seq 1 "$repeats"); do
  for what in target budget; do
    [[ $what == budget && $budget == 0 ]] && continue
    for mode in $modes; do
      for f in $slowdowns; do
        if [[ $f == 1 ]]; then
          run_one none 1 "$mode" "$what" "$rep"
          continue
        fi
        for kind in $kinds; do run_one "$kind" "$f" "$mode" "$what" "$rep"; done
      done
    done
  done
done

summary_args=(summary --runs "$runs" --dir "$run_dir" --target "$target" --budget "$budget"
  --workers "$workers" --img-dir "$img_dir")
[[ $quick == 1 ]] && summary_args+=(--quick)
[[ $plots == 0 ]] && summary_args+=(--no-plots)
status=0
python3 "$root/scripts/bench/straggler_summary.py" "${summary_args[@]}" | tee "$run_dir/summary.json" ||
  status=${PIPESTATUS[0]}
exit "$status"
