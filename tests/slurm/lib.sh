# shellcheck shell=bash
# A throwaway Slurm cluster on this host for the slurm tests (sourced): munged with a
# generated key, slurmctld and one slurmd per node name (n1, n2: several node names on one
# host, each slurmd on its own port, `slurmd -N NAME`), all in the foreground (-D/-F),
# owned by the test, with a generated slurm.conf and every state, spool, socket and log
# file under $SLURM_DIR. slurm_stop (the EXIT trap) cancels the jobs and stops them all.
# Root only (SlurmUser=root); skips (exit 77) with the reason otherwise.
SLURM_NODES=(n1 n2)
# munged, slurmctld and slurmd live in /usr/sbin, not on every PATH (su, sudo -u).
PATH=$PATH:/usr/sbin:/sbin
SLURM_PIDS=()
skip() { echo "SKIP: $*"; exit 77; }
fail() {
  echo "FAIL: $*" >&2
  for f in "$SLURM_DIR"/log/*; do
    [[ -f $f ]] || continue
    echo "----- $f (last 30 lines)" >&2
    tail -n 30 "$f" >&2
  done
  exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

slurm_start() {
  [[ $(id -u) == 0 ]] || skip "needs root (SlurmUser=root, munged)"
  local p
  for p in munged slurmctld slurmd sbatch squeue scontrol scancel; do
    command -v "$p" >/dev/null || skip "no $p (Debian packages slurm-wlm and munge; scripts/install-deps.sh)"
  done
  SLURM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-slurm.XXXXXX")
  # munged wants its socket directory searchable by all and its key private.
  chmod 755 "$SLURM_DIR"
  mkdir -p "$SLURM_DIR"/{run,log,state,jobs} "$SLURM_DIR/munge"
  chmod 700 "$SLURM_DIR/munge"
  head -c 1024 /dev/urandom >"$SLURM_DIR/munge/munge.key"
  chmod 400 "$SLURM_DIR/munge/munge.key"
  munged -F --socket="$SLURM_DIR/run/munge.sock" --key-file="$SLURM_DIR/munge/munge.key" \
    --pid-file="$SLURM_DIR/run/munged.pid" --seed-file="$SLURM_DIR/munge/seed" \
    --log-file="$SLURM_DIR/log/munged.log" >"$SLURM_DIR/log/munged.out" 2>&1 &
  SLURM_PIDS+=($!)
  for _ in $(seq 100); do [[ -S $SLURM_DIR/run/munge.sock ]] && break; sleep 0.1; done
  [[ -S $SLURM_DIR/run/munge.sock ]] || fail "munged did not start"

  local host ctld_port
  host=$(hostname -s)
  ctld_port=$(free_port)
  export SLURM_CONF=$SLURM_DIR/slurm.conf
  cat >"$SLURM_CONF" <<CONF
ClusterName=groupsgdtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/run/munge.sock
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool/%n
SlurmctldPidFile=$SLURM_DIR/run/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/run/slurmd-%n.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$SLURM_DIR/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=30
KillWait=5
MinJobAge=600
CONF
  local n
  for n in "${SLURM_NODES[@]}"; do
    mkdir -p "$SLURM_DIR/spool/$n"
    echo "NodeName=$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=4 RealMemory=1000" >>"$SLURM_CONF"
  done
  echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$SLURM_CONF"

  slurmctld -D -i -f "$SLURM_CONF" >"$SLURM_DIR/log/slurmctld.out" 2>&1 &
  SLURM_PIDS+=($!)
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
  scontrol ping 2>/dev/null | grep -q UP || fail "slurmctld did not answer"
  for n in "${SLURM_NODES[@]}"; do
    slurmd -D -N "$n" -f "$SLURM_CONF" >"$SLURM_DIR/log/slurmd-$n.out" 2>&1 &
    SLURM_PIDS+=($!)
  done
  for _ in $(seq 300); do
    [[ $(sinfo -h -t idle -o '%D' 2>/dev/null) == "${#SLURM_NODES[@]}" ]] && return 0
    sleep 0.1
  done
  sinfo -N >&2
  fail "the ${#SLURM_NODES[@]} nodes did not come up idle"
}

# job_state JOB: PENDING, RUNNING, COMPLETED, FAILED ... (scontrol: no accounting storage).
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
# wait_job JOB SECONDS: until it has ended; its final state on stdout.
wait_job() {
  local s
  for _ in $(seq $(($2 * 5))); do
    s=$(job_state "$1")
    case $s in PENDING|RUNNING|CONFIGURING|COMPLETING|"") sleep 0.2 ;; *) echo "$s"; return 0 ;; esac
  done
  echo "TIMEOUT"
}

slurm_stop() {
  local rc=$?
  set +e
  if [[ -n ${SLURM_CONF:-} && -f $SLURM_CONF ]]; then
    # The jobs first (their steps end with them), then the daemons, newest first.
    local jobs
    jobs=$(squeue -h -o '%i' 2>/dev/null)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      scancel $jobs
      for _ in $(seq 100); do [[ -z $(squeue -h -o '%i' 2>/dev/null) ]] && break; sleep 0.1; done
    fi
  fi
  local i
  for ((i = ${#SLURM_PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${SLURM_PIDS[i]}" 2>/dev/null; done
  for p in "${SLURM_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  wait 2>/dev/null
  if [[ $rc -ne 0 && $rc -ne 77 && -n ${KEEP_SLURM_LOGS:-} ]]; then
    echo "logs kept in $SLURM_DIR" >&2
  elif [[ -n ${SLURM_DIR:-} ]]; then
    rm -rf "$SLURM_DIR"
  fi
  exit "$rc"
}
