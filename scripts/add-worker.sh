#!/usr/bin/env bash
# Starts one groupsgd worker and waits until the coordinator has registered and assigned
# it. Locally by default; with --host, on that host through its systemd template unit
# groupsgd-worker@NAME (over ssh); with --slurm-run, as a new step of the Slurm job that
# runs scripts/slurm/groupsgd.sbatch. Idempotent: a worker NAME that is already active is
# left alone (exit 0).
#   scripts/add-worker.sh --socket PATH --coordinator ENDPOINT --name NAME [-- WORKER ARGS]
#   scripts/add-worker.sh --socket PATH --host HOST --name NAME
#   scripts/add-worker.sh --slurm-run RUN_DIR --name NAME [-- WORKER ARGS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
# From a build tree when there is one, else the installed programs (the .deb).
ctl=${GROUPSGDCTL:-$build_dir/daemon/groupsgdctl}
[[ -x $ctl ]] || ctl=$(command -v groupsgdctl || echo groupsgdctl)
worker_bin=${GROUPSGD_WORKER:-$build_dir/worker/groupsgd-worker}
[[ -x $worker_bin ]] || worker_bin=$(command -v groupsgd-worker || echo groupsgd-worker)
socket=${GROUPSGD_CONTROL_SOCKET:-/run/groupsgd/control.sock}
coordinator="" name="" host="" slurm_job="" timeout=60 log_dir=${TMPDIR:-/tmp}
worker_args=()

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  echo "options: --socket PATH --coordinator EP --name NAME [--host HOST | --slurm-run DIR] [--timeout S] [--log-dir DIR] [-- ARGS]"
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --socket) socket=$2; shift 2 ;;
    --coordinator) coordinator=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --slurm-run)
      # The run directory of a groupsgd.sbatch job: its env file names the head's endpoint,
      # the control socket and the job.
      [[ -r $2/env ]] || { echo "add-worker: no $2/env (not a groupsgd.sbatch run directory?)" >&2; exit 2; }
      coordinator=$(sed -n 's/^GROUPSGD_COORDINATOR=//p' "$2/env")
      socket=$(sed -n 's/^GROUPSGD_CONTROL_SOCKET=//p' "$2/env")
      slurm_job=$(sed -n 's/^SLURM_JOB_ID=//p' "$2/env")
      log_dir=$2
      shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --log-dir) log_dir=$2; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    --) shift; worker_args=("$@"); break ;;
    *) echo "add-worker: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ -n $name ]] || { echo "add-worker: --name is required" >&2; exit 2; }

# The state of worker NAME as the coordinator sees it ("" when unknown).
state_of() {
  "$ctl" --socket "$socket" --json workers 2>/dev/null |
    python3 -c 'import json,sys
name=sys.argv[1]
rows=json.load(sys.stdin).get("workers",[])
states=[r["state"] for r in rows if r.get("name")==name and r.get("role")=="trainer"]
print("active" if "active" in states else ("draining" if "draining" in states else ""))' "$name"
}

if ! "$ctl" --socket "$socket" status >/dev/null 2>&1; then
  echo "add-worker: the daemon does not answer on $socket" >&2
  exit 2
fi
if [[ $(state_of) == active ]]; then
  echo "add-worker: worker '$name' is already active; nothing to do"
  exit 0
fi

if [[ -n $host ]]; then
  # The template unit reads /etc/groupsgd/worker-NAME.env on that host.
  ssh -o BatchMode=yes "$host" systemctl start "groupsgd-worker@$name.service"
elif [[ -n $slurm_job ]]; then
  # A step of the run's job on a node Slurm picks; like the job's other steps, its end
  # (drained, or failed) leaves the job alone.
  log="$log_dir/worker-$name.log"
  nohup srun --jobid "$slurm_job" --overlap --kill-on-bad-exit=0 --job-name "worker-$name" -N1 -n1 \
    "$worker_bin" --coordinator "$coordinator" --name "$name" "${worker_args[@]}" >"$log" 2>&1 &
  echo "add-worker: started '$name' as a step of job $slurm_job (srun pid $!, log $log)"
else
  [[ -n $coordinator ]] || { echo "add-worker: --coordinator is required to start locally" >&2; exit 2; }
  log="$log_dir/groupsgd-worker-$name.log"
  nohup "$worker_bin" --coordinator "$coordinator" --name "$name" "${worker_args[@]}" >"$log" 2>&1 &
  echo "add-worker: started '$name' (pid $!, log $log)"
fi

for _ in $(seq $((timeout * 10))); do
  if [[ $(state_of) == active ]]; then
    echo "add-worker: worker '$name' is registered and assigned"
    exit 0
  fi
  sleep 0.1
done
echo "add-worker: worker '$name' did not register within ${timeout}s" >&2
exit 1
