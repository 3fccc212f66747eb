#!/usr/bin/env bash
# Drains one groupsgd worker: its current step finishes and its gradient is included,
# then it leaves and exits; waits until it has left. Idempotent: a worker that already
# left is a success (exit 0).
#   scripts/drain-worker.sh --socket PATH WORKER   (WORKER = id or --name)
#   scripts/drain-worker.sh --slurm-run RUN_DIR WORKER   (a scripts/slurm/groupsgd.sbatch run)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ctl=${GROUPSGDCTL:-${BUILD_DIR:-$root/build}/daemon/groupsgdctl}
[[ -x $ctl ]] || ctl=$(command -v groupsgdctl || echo groupsgdctl)
socket=${GROUPSGD_CONTROL_SOCKET:-/run/groupsgd/control.sock}
timeout=120 worker=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --socket) socket=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --slurm-run) socket=$2/control.sock; shift 2 ;;
    --help|-h) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "drain-worker: unknown option '$1'" >&2; exit 2 ;;
    *) worker=$1; shift ;;
  esac
done
[[ -n $worker ]] || { echo "drain-worker: which worker? (id or name)" >&2; exit 2; }
set +e
out=$("$ctl" --socket "$socket" --timeout-ms $((timeout * 1000)) drain "$worker" --wait 2>&1)
rc=$?
set -e
echo "$out"
case $rc in
  0) echo "drain-worker: '$worker' has left" ;;
  1) echo "drain-worker: the daemon refused to drain '$worker'" >&2 ;;
  *) echo "drain-worker: could not reach the daemon on $socket" >&2 ;;
esac
exit "$rc"
