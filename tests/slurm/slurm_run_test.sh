#!/usr/bin/env bash
# scripts/slurm/groupsgd.sbatch against a real Slurm (slurm-wlm's slurmctld and two slurmd,
# node names n1 and n2 on this host, started by lib.sh): one run submitted with sbatch
# reaches its target with its accounting kept, a worker added as a new step of the job
# (scripts/add-worker.sh --slurm-run) registers and is drained (drain-worker.sh), and a
# second run loses a node daemon's step (scancel --signal=KILL) mid-run and still reaches
# its target, the lost node in its summary, the job COMPLETED; a third whose trainers all
# fail ends by itself (exit 3); a fourth maps each trainer task to cuda:SLURM_LOCALID when
# GPUs are visible; a fifth runs central shards 1 and 2 on the node daemons. Root; skips (77)
# otherwise.
#   slurm_run_test.sh SOURCE_DIR     (GROUPSGDD, GROUPSGD_WORKER, GROUPSGDCTL from CTest)
set -uo pipefail
root=$1
here=$(dirname "${BASH_SOURCE[0]}")
: "${GROUPSGDD:?set GROUPSGDD}" "${GROUPSGD_WORKER:?set GROUPSGD_WORKER}" "${GROUPSGDCTL:?set GROUPSGDCTL}"
# shellcheck source=lib.sh
source "$here/lib.sh"
# shellcheck source=../scripts/check_lib.sh
source "$here/../scripts/check_lib.sh"
export GROUPSGDD GROUPSGD_WORKER GROUPSGDCTL OPENBLAS_NUM_THREADS=1
sbatch_script=$root/scripts/slurm/groupsgd.sbatch

err=$(env -u SLURM_JOB_ID bash "$sbatch_script" 2>&1); rc=$?
check "outside a job the script refuses with exit 2" test "$rc" = 2
check "... saying to use sbatch" grep -q "run it with sbatch" <<<"$err"

trap slurm_stop EXIT
trap 'exit 130' INT TERM
t0=$(date +%s.%N)
slurm_start
echo "slurm up in $(echo "$(date +%s.%N) - $t0" | bc) s: $(sinfo -h -o '%D nodes %T')"

# The run's settings: 2 groups, one group PS per node daemon, 4 trainers over 2 nodes;
# heartbeats fast enough to notice a lost node within the run.
run=(--mode grouped --groups 2 --heartbeat-ms 250 --heartbeat-misses 12 --step-deadline-ms 1000
     --target-acc 0.85 --max-seconds 90 --progress-ms 0)
submit() {  # submit RUN_DIR: the job id
  sbatch --parsable -N 2 --ntasks-per-node=2 -o "$1.out" "$sbatch_script" --run-dir "$1" \
    --worker-args "--device-ms 10" -- "${run[@]}"
}
wait_log() {  # wait_log FILE PATTERN COUNT SECONDS
  local n
  for _ in $(seq $(($4 * 10))); do
    n=$(grep -c "$2" "$1" 2>/dev/null)
    (( ${n:-0} >= $3 )) && return 0
    sleep 0.1
  done
  return 1
}
summary_line() {  # the fields the checks read, as one JSON line
  python3 - "$1" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(json.dumps({"error": str(e)})); sys.exit(0)
print(json.dumps({"reached": s.get("reached"), "accounting_ok": s.get("accounting_ok"),
                  "node_failures": len(s.get("node_failures") or []),
                  "trainers": sorted(w.get("name") for w in s.get("worker_stats") or []
                                     if w.get("name") not in (None, "evaluator")),
                  "time_to_target_s": s.get("time_to_target_s")}))
PY
}

# 1. A run, with a fifth worker added as a step of the job and drained again.
r1=$SLURM_DIR/jobs/run1
job=$(submit "$r1") || fail "sbatch refused the job"
check "run 1: the job is queued" test -n "$job"
wait_log "$r1/head.log" "registered trainer" 4 60 || fail "run 1: 4 trainers did not register"
out=$(bash "$root/scripts/add-worker.sh" --slurm-run "$r1" --name extra --timeout 30 -- --device-ms 10 2>&1)
check "add-worker.sh --slurm-run: the worker registered ($out)" grep -q "registered and assigned" <<<"$out"
check "... as a step of the job" bash -c "squeue -h -s -j $job -o '%j' | grep -qx worker-extra || grep -q 'as a step of job $job' <<<'$out'"
out=$(bash "$root/scripts/drain-worker.sh" --slurm-run "$r1" --timeout 30 extra 2>&1)
check "drain-worker.sh --slurm-run: the worker left ($out)" grep -q "has left" <<<"$out"
state=$(wait_job "$job" 90)
check "run 1: the job COMPLETED (was $state)" test "$state" = COMPLETED
check "run 1: exit code 0:0" bash -c "scontrol show job $job | grep -q ' ExitCode=0:0'"
check "run 1: Slurm's job completion record" grep -q "JobId=$job .*JobState=COMPLETED" "$SLURM_DIR/log/jobcomp.txt"
line=$(summary_line "$r1/summary.json")
check "run 1: target reached, accounting ok, the trainers on both nodes and the added one" \
  json_has "$line" "reached is True" "accounting_ok is True" "node_failures == 0" \
  "trainers == ['extra', 'w0', 'w1', 'w2', 'w3']"
check "run 1: a node daemon on each node" bash -c "grep -c 'offers 1 group PS' '$r1/head.log' | grep -qx 2"

# 2. A run that loses node n2's daemon step mid-run.
r2=$SLURM_DIR/jobs/run2
job=$(submit "$r2") || fail "sbatch refused the job"
wait_log "$r2/head.log" "registered trainer" 4 60 || fail "run 2: 4 trainers did not register"
sleep 2
step=$(squeue -h -s -j "$job" -o '%i %j' | awk '$2 == "node-n2" { print $1 }')
check "run 2: the node daemon of n2 is a step of the job ($step)" test -n "$step"
scancel --signal=KILL "$step"
echo "killed step $step (node-n2) at $(echo "$(date +%s.%N) - $t0" | bc) s"
state=$(wait_job "$job" 90)
check "run 2: the job COMPLETED despite the lost step (was $state)" test "$state" = COMPLETED
check "run 2: the node daemon step is gone" bash -c "! squeue -h -s -j $job -o '%j' | grep -qx node-n2"
line=$(summary_line "$r2/summary.json")
check "run 2: one node failure, target reached, accounting ok" \
  json_has "$line" "reached is True" "accounting_ok is True" "node_failures == 1"
# 3. Trainers that all fail (a flag they refuse) do not leave the head holding the job: it
#    is stopped --trainers-gone-s after their step ended and the job reports exit 3. With
#    --node-groups 0 the head hosts the group PSes (--role all): no node daemon steps.
r3=$SLURM_DIR/jobs/run3
job=$(sbatch --parsable -N 2 --ntasks-per-node=1 -o "$r3.out" "$sbatch_script" --run-dir "$r3" \
  --node-groups 0 --trainers-gone-s 2 --worker-args "--no-such-flag" -- "${run[@]}") ||
  fail "sbatch refused the job"
state=$(wait_job "$job" 60)
check "run 3: the job ended FAILED (was $state)" test "$state" = FAILED
code=$(scontrol show job "$job" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
check "run 3: exit code 3:0, target not reached (was $code)" test "$code" = 3:0
check "run 3: no node daemon (--node-groups 0)" bash -c "! ls '$r3'/node-*.log 2>/dev/null && ! grep -q 'offers' '$r3/head.log'"
check "run 3: the head hosts both group PSes" grep -q "group PS 1 serving" "$r3/head.log"
check "run 3: the script says why" grep -q "every trainer has gone and the head still runs after 2s" "$r3.out"
# 4. The device of each trainer task: with GPUs visible (CUDA_VISIBLE_DEVICES=0,1 passed in
#    the job's environment; this Slurm has no GRES), task SLURM_LOCALID takes cuda:LOCALID.
#    The trainers are a stand-in that records its flags and exits 0.
r4=$SLURM_DIR/jobs/run4
mkdir -p "$r4"
cat >"$SLURM_DIR/record-worker.sh" <<'SH'
#!/usr/bin/env bash
echo "$SLURMD_NODENAME $SLURM_PROCID $*" >>"$RECORD"
SH
chmod +x "$SLURM_DIR/record-worker.sh"
job=$(CUDA_VISIBLE_DEVICES=0,1 RECORD=$r4/record GROUPSGD_WORKER=$SLURM_DIR/record-worker.sh \
  sbatch --parsable -N 2 --ntasks-per-node=2 -o "$r4.out" "$sbatch_script" --run-dir "$r4" \
  --no-evaluator --trainers-gone-s 1 -- "${run[@]}") || fail "sbatch refused the job"
state=$(wait_job "$job" 60)
devices=$(awk '{ for (i = 3; i < NF; i++) if ($i == "--device") print $1, $2, $(i + 1) }' "$r4/record" | sort -k2n | tr '\n' ';')
check "run 4: cuda:SLURM_LOCALID per task on each node ($devices)" \
  test "$devices" = "n1 0 cuda:0;n1 1 cuda:1;n2 2 cuda:0;n2 3 cuda:1;"
check "run 4: trainer names w\$SLURM_PROCID" bash -c "grep -c -- '--name w[0-3] ' '$r4/record' | grep -qx 4"
# 5. Central shards on node daemons (--central-shards 3): shard 1 on n2, shard 2 on n1, each
#    a node daemon step of its own; the head gathers them and the run reaches its target.
r5=$SLURM_DIR/jobs/run5
job=$(sbatch --parsable -N 2 --ntasks-per-node=2 -o "$r5.out" "$sbatch_script" --run-dir "$r5" \
  --central-shards 3 --worker-args "--device-ms 10" -- "${run[@]}") || fail "sbatch refused the job"
state=$(wait_job "$job" 90)
check "run 5: the job COMPLETED (was $state)" test "$state" = COMPLETED
line=$(summary_line "$r5/summary.json")
check "run 5: target reached, accounting ok" json_has "$line" "reached is True" "accounting_ok is True"
check "run 5: shard 1 on n2, shard 2 on n1" bash -c "grep -q 'central shard 1 of 3: a node daemon on n2' '$r5.out' && grep -q 'central shard 2 of 3: a node daemon on n1' '$r5.out'"
check "run 5: the head took both shards from node daemons" bash -c "grep -c 'offered by node' '$r5/head.log' | grep -qx 2"
check "run 5: each shard node served its shard" bash -c "grep -q 'central-shard 1 of 3, parameters' '$r5/shard-1.log' && grep -q 'central-shard 2 of 3, parameters' '$r5/shard-2.log'"
echo "total $(echo "$(date +%s.%N) - $t0" | bc) s"
(( fails > 0 )) && for f in "$r1.out" "$r2.out" "$r3.out" "$r5.out" "$r1/head.log" "$r2/head.log" "$r3/head.log" "$r5/head.log"; do
  echo "----- $f" >&2; tail -20 "$f" >&2
done
finish slurm_run
