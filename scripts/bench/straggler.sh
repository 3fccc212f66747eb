#!/usr/bin/env bash
# The straggler benchmark: scripts/demo.sh --json over and over, W workers of which N are
# stragglers F times slower, of five kinds:
#   none      no straggler (the baseline of every ratio)
#   compute   --slowdown F
#   link      --link-ms (F-1)*STEP_MS     (a fixed delay on every exchange)
#   erratic   --erratic P:(F-1)*STEP_MS/P (random pauses; the mean step is F times longer)
#   midrun    --schedule: F times slower from ON s to OFF s of the worker's life, then normal
# (STEP_MS = the normal step: device time + ~2 ms). A case is KIND-Fx-NofW (compute-4x-1of8);
# every case runs --repeats times (default 3) per mode, each run to the highest target
# (times to the lower targets from the same run's progress lines) and, with --budget N,
# once more per repeat to a fixed sample budget (final_test_acc). One JSON line per run on
# stdout, then the summary JSON line (medians, min-max, ratios of medians, the time
# breakdown of the 4x compute case); a Markdown table on stderr and in the results
# directory; raw demo output under results/straggler-<UTC time>/; plots (gnuplot).
# Usually started as `scripts/bench.sh straggler [options]`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

quick=0 kinds="" slowdowns="4" modes="sync adaptive"
cases="none-1x-0of8 compute-4x-1of8 link-4x-1of8 erratic-4x-1of8 midrun-4x-1of8 compute-4x-2of8 compute-4x-4of8 none-1x-0of16 compute-4x-2of16"
targets="0.85 0.88" budget=0 max_seconds=300 device_ms=10 step_ms=12 stall_prob=0.1
midrun="2 12" repeats=3 plots=1 img_dir="" plot_prefix=straggler
usage() {
  cat <<USAGE
usage: scripts/bench/straggler.sh [options]
  --quick            cases none-1x-0of8 and compute-4x-1of8, sync and adaptive, one run
                     each, demo --quick (target 0.80, 50 s per run); plots into the results
                     directory. Checks the output, not the speed (~1-2 minutes). Options
                     given with it override these (--quick --modes adaptive).
  --cases "C..."     cases KIND-Fx-NofW, KIND of none compute link erratic midrun (default:
                     $cases)
  --kinds "K..."     instead of --cases: these kinds at every --slowdowns F, one straggler of
                     8, plus none-1x-0of8
  --slowdowns "F..." with --kinds (default "4")
  --modes "M..."     of sync async grouped2 grouped4 adaptive adaptive-nocut (adaptive
                     with the step cutoff off) adaptive-versions (adaptive with staleness
                     counted in versions, not samples) (default "sync adaptive"); any
                     adaptive mode may add +nostages (the fine stage from the start: the
                     coarse stage's K and group limit set to the fine one's: the default
                     since 2026-11-29), +stages (the coarse stage of before: K 4, 4
                     groups), +coarsek1 (only the coarse stage's K set to 1), +fp16 or
                     +topk (compress_gradients and compress_deltas fp16 / topk:0.1), +auto
                     (compress_gradients auto: fp16 per group where the link is slow; the
                     default), +dense (compress_gradients dense), e.g.
                     adaptive+nostages+fp16
  --targets "A..."   target test accuracies; each run goes to the highest (default "0.85 0.88")
  --target A         one target (same as --targets A)
  --repeats R        runs per case and mode (default 3; --quick 1)
  --budget N         also a run per repeat to N samples (final_test_acc); 0 = none (default)
  --max-seconds S    per run (default 300)
  --device-ms D      emulated device time per step (default 10)
  --step-ms T        the normal step time used to size link and erratic delays (default 12)
  --stall-prob P     erratic: chance of a pause per step (default 0.1)
  --midrun "ON OFF"  midrun: slow from ON to OFF seconds of the worker's life (default "2 12")
  --img-dir DIR      where the PNGs go (default docs/img; with --quick the results dir)
  --plot-prefix P    the PNGs' names start with P (default straggler)
  --no-plots         skip gnuplot
USAGE
}
# --quick sets the defaults below; options given beside it (--modes, ...) still win.
for arg in "$@"; do
  if [[ $arg == --quick ]]; then
    quick=1 cases="none-1x-0of8 compute-4x-1of8" modes="sync adaptive" targets=0.80 budget=0
    max_seconds=50 repeats=1
  fi
done
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) shift ;;
    --cases) cases=$2; shift 2 ;;
    --kinds) kinds=$2; shift 2 ;;
    --slowdowns) slowdowns=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --target|--targets) targets=$2; shift 2 ;;
    --device-ms) device_ms=$2; shift 2 ;;
    --midrun) midrun=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --max-seconds) max_seconds=$2; shift 2 ;;
    --step-ms) step_ms=$2; shift 2 ;;
    --stall-prob) stall_prob=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --img-dir) img_dir=$2; shift 2 ;;
    --plot-prefix) plot_prefix=$2; shift 2 ;;
    --no-plots) plots=0; shift ;;
    --help|-h) usage; exit 0 ;;
    *) echo "straggler: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n $kinds ]]; then
  cases="none-1x-0of8"
  for f in $slowdowns; do
    [[ $f == 1 ]] && continue
    for k in $kinds; do cases+=" $k-${f}x-1of8"; done
  done
fi
target=$(tr ' ' '\n' <<<"$targets" | sort -g | tail -1)
run_dir=${GROUPSGD_RESULTS_DIR:-$root/results}/straggler-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
if [[ -z $img_dir ]]; then
  img_dir=$root/docs/img
  [[ $quick == 1 ]] && img_dir=$run_dir
fi
runs=$run_dir/runs.jsonl
# +nostages: no stage change, the coarse stage made the fine one (adaptive.fine_period and
# fine_max_groups at their defaults, 1 and 2).
nostages_config=$run_dir/nostages.json
echo '{"adaptive": {"coarse_period": 1, "coarse_max_groups": 2}}' >"$nostages_config"
# +coarsek1: the coarse stage exchanges every step (K = 1, the fine stage's); its group
# limit stays.
coarsek1_config=$run_dir/coarsek1.json
echo '{"adaptive": {"coarse_period": 1}}' >"$coarsek1_config"
# +stages: the coarse stage as it was the default before 2026-11-29 (K = 4, up to 4
# groups); the default now is what +nostages sets.
stages_config=$run_dir/stages.json
echo '{"adaptive": {"coarse_period": 4, "coarse_max_groups": 4}}' >"$stages_config"
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
    midrun) set -- $midrun; echo "--slowdown 1 --schedule ${1}s:slowdown=$f,${2}s:slowdown=1" ;;
    *) log "unknown kind '$kind'"; return 1 ;;
  esac
}

mode_args() {
  case "$1" in
    sync|async|adaptive) echo "--mode $1" ;;
    adaptive-nocut|adaptive-versions) echo "--mode adaptive" ;;  # one change off: its effect alone
    adaptive+*) echo "--mode adaptive" ;;  # the ablations: mode_extra_args adds the rest
    grouped*) echo "--mode grouped --groups ${1#grouped}" ;;
    *) log "unknown mode '$1'"; return 1 ;;
  esac
}

# The daemon flags of an ablation mode's +suffixes (adaptive+nostages+fp16).
mode_extra_args() {
  local suffix
  [[ $1 == adaptive+* ]] || return 0
  for suffix in $(tr '+' ' ' <<<"${1#adaptive+}"); do
    case "$suffix" in
      nostages) echo "--config $nostages_config" ;;
      coarsek1) echo "--config $coarsek1_config" ;;
      stages) echo "--config $stages_config" ;;
      fp16) echo "--compress-gradients fp16 --compress-deltas fp16" ;;
      topk) echo "--compress-gradients topk:0.1 --compress-deltas topk:0.1" ;;
      auto) echo "--compress-gradients auto" ;;  # the default since 2026-11-29
      dense) echo "--compress-gradients dense" ;;  # adaptive as it ran before that
      *) log "unknown ablation '+$suffix' in mode '$1' (nostages, coarsek1, stages, fp16, topk, auto, dense)"; return 1 ;;
    esac
  done
}

# One demo run; appends its JSON line to $runs and prints it.
run_one() {
  local case=$1 mode=$2 what=$3 rep=$4
  local kind=${case%%-*} rest=${case#*-}
  local f=${rest%%x-*} counts=${rest#*x-}
  local n=${counts%%of*} w=${counts#*of}
  local tag="$case-$mode-$what-r$rep" rc=0 started
  # Progress lines every 250 ms (the evaluator reports every 500 ms) for accuracy vs time.
  local daemon_args="--progress-ms 250"
  [[ $mode == adaptive-nocut ]] && daemon_args+=" --step-cutoff 0"
  [[ $mode == adaptive-versions ]] && daemon_args+=" --staleness-measure versions"
  daemon_args+=" $(mode_extra_args "$mode" | tr "\n" " ")"
  local args=(--workers "$w" --stragglers "$n" --device-ms "$device_ms" --json
    --daemon-args "$daemon_args")
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
    --case "$case" --mode "$mode" --run "$what" --repeat "$rep" --targets "$targets" \
    --wall "$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" | tee -a "$runs"
}

for m in $modes; do
  mode_args "$m" >/dev/null && mode_extra_args "$m" >/dev/null || exit 2
done
for c in $cases; do
  [[ $c =~ ^(none|compute|link|erratic|midrun)-[0-9.]+x-[0-9]+of[0-9]+$ ]] ||
    { log "bad case '$c' (KIND-Fx-NofW, e.g. compute-4x-1of8)"; exit 2; }
done
log "results in $run_dir"
# Repeats outermost, so a load spike on the shared machine hits one repeat of every case
# rather than every repeat of one case.
for rep in $(seq 1 "$repeats"); do
  for what in target budget; do
    [[ $what == budget && $budget == 0 ]] && continue
    for c in $cases; do
      for mode in $modes; do run_one "$c" "$mode" "$what" "$rep"; done
    done
  done
done

summary_args=(summary --runs "$runs" --dir "$run_dir" --targets "$targets" --budget "$budget"
  --img-dir "$img_dir" --plot-prefix "$plot_prefix")
[[ $quick == 1 ]] && summary_args+=(--quick)
[[ $plots == 0 ]] && summary_args+=(--no-plots)
status=0
python3 "$root/scripts/bench/straggler_summary.py" "${summary_args[@]}" | tee "$run_dir/summary.json" ||
  status=${PIPESTATUS[0]}
exit "$status"
