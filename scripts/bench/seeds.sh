#!/usr/bin/env bash
# The four papers' experiments scaled to this machine (docs/seeds.md), each through the
# benchmark that already measures its kind of thing:
#   basu       straggler.sh: one of 8 trainers 1x/2x/4x/8x slower (compute) x modes sync,
#              grouped2, grouped4, async, adaptive: time to 0.85, accuracy at a sample budget
#   ashl       straggler.sh: adaptive (the default: compression auto, no coarse stage) with
#              the coarse stage on/off x compression dense/fp16/top-k (+dense, +stages,
#              +fp16, +topk) under a link straggler; then, as root, the same
#              ablation with one trainer of four behind a rate-limited link between network
#              namespaces, and dense/fp16/top-k with every trainer behind one
#              (ashl_netns.sh; skipped with a message otherwise)
#   chao       chao.py: equal vs static-proportional vs self-adaptive allocation with a 4x and
#              a 2x trainer; a trainer added mid-run; a slow trainer replaced mid-run
#   crossover  crossover.py: two equal jobs, and a heavy job beside a light one
# One JSON line per run ("paper": NAME), one summary line per paper ("summary": true), then
# {"bench": "seeds", ...} with each paper's figures against issue 32's targets
# (seeds_summary.py). Usually started as `scripts/bench.sh seeds [options]`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
quick=0 repeats=3 papers="basu ashl chao crossover" budget=200000 max_seconds=150 plots=1
slowdowns="2 4 8" basu_modes="sync grouped2 grouped4 async adaptive"
ashl_cases="link-4x-1of8"
# adaptive is the default (compression auto, no coarse stage of its own); +dense is
# compression off, +stages the coarse stage of before (K 4, up to 4 groups).
ashl_modes="adaptive adaptive+dense adaptive+stages adaptive+fp16 adaptive+topk adaptive+stages+fp16 adaptive+stages+topk"
netns_rate=20mbit netns_all_rate=200mbit img_dir=""
usage() {
  cat <<USAGE
usage: scripts/bench/seeds.sh [options]     (or scripts/bench.sh seeds [options])
  --quick             a subset per paper, one run each, short targets, plots in the results
                      directory: checks the output, not the speed (a few minutes)
  --papers "P..."     of basu ashl chao crossover (default all four)
  --repeats R         runs per case (default 3; --quick 1)
  --budget N          basu and ashl: a run per repeat to N samples (default $budget; 0: none)
  --max-seconds S     per run (default $max_seconds)
  --slowdowns "F..."  basu: the delays (default "$slowdowns"; 1x is always run)
  --basu-modes "M..." (default "$basu_modes")
  --ashl-cases "C..." straggler.sh cases of the ablation (default "$ashl_cases")
  --ashl-modes "M..." (default "$ashl_modes")
  --netns-rate R      ashl over namespaces: one trainer's shaped link (default $netns_rate)
  --netns-all-rate R  ... then every trainer's link (default $netns_all_rate)
  --img-dir DIR       where the PNGs go (default docs/img; --quick: the results directory)
  --no-plots          skip gnuplot
USAGE
}
args=("$@")
for arg in "$@"; do
  if [[ $arg == --quick ]]; then quick=1 repeats=1 budget=0 max_seconds=50; fi
done
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) shift ;;
    --papers) papers=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --max-seconds) max_seconds=$2; shift 2 ;;
    --slowdowns) slowdowns=$2; shift 2 ;;
    --basu-modes) basu_modes=$2; shift 2 ;;
    --ashl-cases) ashl_cases=$2; shift 2 ;;
    --ashl-modes) ashl_modes=$2; shift 2 ;;
    --netns-rate) netns_rate=$2; shift 2 ;;
    --netns-all-rate) netns_all_rate=$2; shift 2 ;;
    --img-dir) img_dir=$2; shift 2 ;;
    --no-plots) plots=0; shift ;;
    --help|-h) usage; exit 0 ;;
    *) echo "seeds: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for p in $papers; do
  case $p in basu|ashl|chao|crossover) ;; *) echo "seeds: unknown paper '$p'" >&2; exit 2 ;; esac
done
export BENCH_NO_BUILD=1  # scripts/bench.sh built already
run_dir=${GROUPSGD_RESULTS_DIR:-$root/results}/seeds-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
[[ -z $img_dir ]] && { if [[ $quick == 1 ]]; then img_dir=$run_dir; else img_dir=$root/docs/img; fi; }
log() { echo "seeds: $*" >&2; }
log "results in $run_dir; papers: $papers"

# Common straggler.sh flags; --quick keeps straggler.sh's own quick settings (target 0.80,
# 50 s per run) and overrides the cases and modes.
straggler_common=(--img-dir "$img_dir")
[[ $plots == 0 ]] && straggler_common+=(--no-plots)
if [[ $quick == 1 ]]; then
  straggler_common+=(--quick)
else
  straggler_common+=(--repeats "$repeats" --targets 0.85 --budget "$budget" --max-seconds "$max_seconds")
fi

status=0
for p in $papers; do
  out=$run_dir/$p.jsonl
  rc=0
  case $p in
    basu)
      if [[ $quick == 1 ]]; then
        "$root/scripts/bench/straggler.sh" "${straggler_common[@]}" --cases "none-1x-0of8 compute-4x-1of8" \
          --modes adaptive --plot-prefix seeds-basu >"$out" || rc=$?
      else
        "$root/scripts/bench/straggler.sh" "${straggler_common[@]}" --kinds compute --slowdowns "$slowdowns" \
          --modes "$basu_modes" --plot-prefix seeds-basu >"$out" || rc=$?
      fi ;;
    ashl)
      if [[ $quick == 1 ]]; then
        "$root/scripts/bench/straggler.sh" "${straggler_common[@]}" --cases link-4x-1of8 \
          --modes "adaptive adaptive+stages+topk" --plot-prefix seeds-ashl >"$out" || rc=$?
      else
        "$root/scripts/bench/straggler.sh" "${straggler_common[@]}" --cases "$ashl_cases" \
          --modes "$ashl_modes" --plot-prefix seeds-ashl >"$out" || rc=$?
        if [[ $(id -u) == 0 ]]; then
          # One trainer of four on a slow link (a bandwidth straggler), then every trainer
          # on a faster but still slow link (where compression can pay for everyone).
          "$root/scripts/bench/ashl_netns.sh" --repeats "$repeats" --rate "$netns_rate" \
            --modes "$ashl_modes" >"$run_dir/ashl-netns.jsonl" || log "ashl over namespaces exited $?"
          "$root/scripts/bench/ashl_netns.sh" --repeats "$repeats" --rate "$netns_all_rate" \
            --shaped 4 --modes "adaptive adaptive+dense adaptive+fp16 adaptive+topk" >"$run_dir/ashl-netns-all.jsonl" ||
            log "ashl over namespaces, every link slow, exited $?"
        else
          log "ashl over network namespaces skipped: it needs root (tc, ip netns); run as root for it"
        fi
      fi ;;
    chao)
      q=(); [[ $quick == 1 ]] && q=(--quick)
      python3 "$root/scripts/bench/chao.py" "${q[@]}" --repeats "$repeats" \
        --max-seconds "$max_seconds" >"$out" || rc=$? ;;
    crossover)
      if [[ $quick == 1 ]]; then
        python3 "$root/scripts/bench/crossover.py" --quick >"$out" || rc=$?
      else
        python3 "$root/scripts/bench/crossover.py" --repeats "$repeats" --extra-repeats "$repeats" \
          --cases two,heavy >"$out" || rc=$?
      fi ;;
  esac
  log "$p exited $rc"
  (( rc != 0 )) && status=1
done

summary_args=(--dir "$run_dir" --papers "$papers" --command "scripts/bench.sh seeds ${args[*]}")
[[ $quick == 1 ]] && summary_args+=(--quick)
[[ $plots == 1 ]] && summary_args+=(--img-dir "$img_dir")
python3 "$root/scripts/bench/seeds_summary.py" "${summary_args[@]}" || status=1
exit "$status"
