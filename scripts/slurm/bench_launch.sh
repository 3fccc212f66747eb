#!/usr/bin/env bash
# Launch overhead of Slurm (docs/benchmarks.md "Slurm launch"): the same run, grouped mode,
# 2 groups, 4 C++ trainers (--device-ms 10) and the evaluator, target accuracy 0.85, started
# RUNS times by scripts/demo.sh and 2 x RUNS times by sbatch scripts/slurm/groupsgd.sbatch
# (demo.sh's daemon settings: --heartbeat-ms 250 --control-ms 500; sbatch-nodes: a node
# daemon per node hosts the group PSes, the script's default; sbatch-all: --node-groups 0,
# the head hosts them, as in demo.sh), alternating, on a
# throwaway Slurm of this host (tests/slurm/lib.sh: slurmctld, slurmd n1 and n2; root).
# For each run: seconds from the start command (demo.sh; sbatch) to the head's "target
# accuracy reached" log line, to the end (demo.sh exits; the job has left squeue), and the
# summary's time_to_target_s (from the first trainer's registration: the training alone).
# Prints one line per run (KIND I TO_TARGET TO_END TRAINING) and the medians.
#   scripts/slurm/bench_launch.sh [RUNS]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${1:-3}
export BUILD_DIR=${BUILD_DIR:-$root/build} BENCH_NO_BUILD=1 OPENBLAS_NUM_THREADS=1
export GROUPSGDD=$BUILD_DIR/daemon/groupsgdd GROUPSGD_WORKER=$BUILD_DIR/worker/groupsgd-worker
# shellcheck source=../../tests/slurm/lib.sh
source "$root/tests/slurm/lib.sh"
trap slurm_stop EXIT
slurm_start
now() { date +%s.%N; }
trained() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["time_to_target_s"])' "$1"; }
target_at() { sed -n 's/^\([0-9.]*\) INFO .*stopping: target accuracy reached.*/\1/p' "$1" | head -1; }
results=$SLURM_DIR/results
for i in $(seq "$runs"); do
  t0=$(now)
  "$root/scripts/demo.sh" --mode grouped --workers 4 --groups 2 --stragglers 0 --device-ms 10 \
    --target-acc 0.85 --max-seconds 120 --daemon-args "--log-level info" 2>"$SLURM_DIR/demo-$i.err" >/dev/null
  t1=$(now)
  dir=$(sed -n 's/.*logs in \(.*\)$/\1/p' "$SLURM_DIR/demo-$i.err")
  echo "demo $i $(echo "$(target_at "$dir/daemon.log") - $t0" | bc) $(echo "$t1 - $t0" | bc) $(trained "$dir/summary.json")" |
    tee -a "$results"
  rm -rf "$dir"

  # The job's default layout (a node daemon per node hosting the group PSes), then the
  # head hosting them itself (--node-groups 0: the demo's --role all layout).
  for layout in nodes all; do
    groups_per_node=1
    [[ $layout == all ]] && groups_per_node=0
    r=$SLURM_DIR/jobs/$layout$i
    t0=$(now)
    job=$(sbatch --parsable -N 2 --ntasks-per-node=2 -o "$r.out" "$root/scripts/slurm/groupsgd.sbatch" \
      --run-dir "$r" --node-groups "$groups_per_node" --worker-args "--device-ms 10" -- \
      --mode grouped --groups 2 --target-acc 0.85 --max-seconds 120 --heartbeat-ms 250 --control-ms 500)
    while squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 0.05; done
    t1=$(now)
    echo "sbatch-$layout $i $(echo "$(target_at "$r/head.log") - $t0" | bc) $(echo "$t1 - $t0" | bc) $(trained "$r/summary.json")" |
      tee -a "$results"
  done
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for kind in ("demo", "sbatch-nodes", "sbatch-all"):
    to_target = [float(r[2]) for r in rows if r[0] == kind]
    to_end = [float(r[3]) for r in rows if r[0] == kind]
    training = [float(r[4]) for r in rows if r[0] == kind]
    med[kind] = statistics.median(to_target)
    launch = [t - r for t, r in zip(to_target, training)]  # start command to first trainer, roughly
    print(f"{kind}: median to target {med[kind]:.2f} s, to the end {statistics.median(to_end):.2f} s, "
          f"training (time_to_target_s) {statistics.median(training):.2f} s, "
          f"launch (to target - training) {statistics.median(launch):.2f} s")
for kind in ("sbatch-nodes", "sbatch-all"):
    print(f"{kind} / demo to target: {med[kind] / med['demo']:.2f}")
PY
