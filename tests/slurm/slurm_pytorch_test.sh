#!/usr/bin/env bash
# scripts/slurm/groupsgd.sbatch --python against a real Slurm (lib.sh: slurmctld, slurmd
# n1 and n2 on this host): the PyTorch example as 4 trainers (python3 -m groupsgd.run in
# each task of one step, named by SLURM_PROCID) and the evaluator, the head with an
# external model; the run reaches its target with its accounting kept. Root and torch;
# skips (77) otherwise.
#   slurm_pytorch_test.sh SOURCE_DIR   (GROUPSGDD, GROUPSGD_PYTHON, PYTHONPATH from CTest)
set -uo pipefail
root=$1
here=$(dirname "${BASH_SOURCE[0]}")
: "${GROUPSGDD:?set GROUPSGDD}" "${PYTHONPATH:?set PYTHONPATH to build/python}"
# shellcheck source=lib.sh
source "$here/lib.sh"
# shellcheck source=../scripts/check_lib.sh
source "$here/../scripts/check_lib.sh"
export GROUPSGD_PYTHON=${GROUPSGD_PYTHON:-/usr/bin/python3}
"$GROUPSGD_PYTHON" -c "import torch, groupsgd.torch" 2>/dev/null ||
  skip "no torch or groupsgd package for $GROUPSGD_PYTHON (PYTHONPATH=$PYTHONPATH)"
export GROUPSGDD PYTHONPATH OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

summary_line() {  # the fields the checks read, as one JSON line
  python3 - "$1" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(json.dumps({"error": str(e)})); sys.exit(0)
print(json.dumps({"reached": s.get("reached"), "accounting_ok": s.get("accounting_ok"),
                  "model": (s.get("config") or {}).get("model"),
                  "trainers": sorted(w.get("name") for w in s.get("worker_stats") or [])}))
PY
}

trap slurm_stop EXIT
trap 'exit 130' INT TERM
slurm_start
r=$SLURM_DIR/jobs/torch
# The four trainers register together once each has imported torch and loaded its data
# (the example's --start-barrier): on a loaded machine one trainer's start-up once outlasted
# the others' run to 0.80 (CI: it came too late and trained 0 steps), which is start-up
# time, not what this test is about.
barrier=$SLURM_DIR/barrier
mkdir -p "$barrier"
job=$(sbatch --parsable -N 2 --ntasks-per-node=2 -o "$r.out" "$root/scripts/slurm/groupsgd.sbatch" \
  --run-dir "$r" --python "$root/examples/pytorch/train_fashion_mnist.py" \
  --worker-args "--model mlp --start-barrier $barrier" \
  -- --mode grouped --groups 2 --heartbeat-ms 250 --target-acc 0.80 --max-seconds 120 --progress-ms 0) ||
  fail "sbatch refused the job"
for _ in $(seq 1200); do
  (( $(find "$barrier" -name 'ready.*' | wc -l) >= 4 )) && break
  sleep 0.1
done
check "the four trainers started" test "$(find "$barrier" -name 'ready.*' | wc -l)" -ge 4
touch "$barrier/go"
state=$(wait_job "$job" 150)
check "the job COMPLETED (was $state)" test "$state" = COMPLETED
line=$(summary_line "$r/summary.json")
check "target reached, accounting ok, trainers w0..w3 of an external model" json_has "$line" \
  "reached is True" "accounting_ok is True" "model == 'external'" "trainers == ['w0', 'w1', 'w2', 'w3']"
for t in 0 1 2 3; do
  node=n$((t / 2 + 1))
  check "task $t on $node ran one trainer" grep -q "^$t: groupsgd.run: Slurm task $t of 4 (job $job, step [0-9]*, node $node): 1 trainer(s)" "$r/trainers.log"
done
check "the evaluator as a task of its own step" grep -q "Slurm task 0 of 1 .*0 trainer(s), the evaluator" "$r/evaluator.log"
(( fails > 0 )) && for f in "$r.out" "$r/head.log" "$r/trainers.log" "$r/evaluator.log"; do
  echo "----- $f" >&2; tail -20 "$f" >&2
done
finish slurm_pytorch
