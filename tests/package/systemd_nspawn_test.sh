#!/usr/bin/env bash
# The packaged units under a real systemd. Boots systemd as PID 1 in a container
# (systemd-nspawn over an overlay of this machine's own tree: writes go to a tmpfs, the
# network is private, only basic.target is started), installs the package built by cpack
# with apt-get, and checks through systemctl and journalctl:
#   - `systemctl start groupsgdd` returns once the daemon sent READY=1 (Type=notify);
#   - groupsgd-worker@ instances register with it; groupsgd-evaluator registers, is
#     restarted after SIGKILL and exits 0 on systemctl stop;
#   - add-worker.sh / drain-worker.sh through the unit's control socket: a member of the
#     groupsgd group adds a worker but may not drain, a non-member cannot connect, root drains;
#   - `systemctl reload` applies a changed setting (log_level info -> debug);
#   - a hung daemon (SIGSTOP) is killed by the watchdog and restarted;
#   - `systemctl stop` writes the final checkpoint and the daemon exits 0;
#   - groupsgd-node.service serves the group PS of a head started with --role coordinator
#     and exits 0 when the head stops; with control_admin_gid set, a member drains;
#   - `journalctl -u groupsgdd` holds the daemon's own log lines.
# A drop-in shortens WatchdogSec (30 s -> 4 s) and TimeoutAbortSec so the test stays short.
# Exit 77 (skipped, with the reason) without root, systemd-nspawn, or when the container
# cannot boot here.
#   systemd_nspawn_test.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build_dir=$(cd "$1" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() {
  echo "FAIL: $*" >&2
  if [[ -n ${leader:-} ]]; then  # the units' last lines, to see why
    nsenter -t "$leader" -a journalctl -u 'groupsgd*' --no-pager -n 40 >&2 2>/dev/null || true
  fi
  exit 1
}
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND exited $?" >&2' ERR

[[ $(id -u) -eq 0 ]] || skip "needs root (mounts an overlay, boots a container)"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn is not installed (Debian package systemd-container)"
[[ -x /lib/systemd/systemd ]] || skip "systemd is not installed (/lib/systemd/systemd)"
command -v nsenter >/dev/null && command -v unshare >/dev/null || skip "nsenter/unshare missing (util-linux)"

# A mount namespace of its own: the overlay disappears with the test whatever happens.
if [[ -z ${GROUPSGD_SYSTEMD_TEST_NS:-} ]]; then
  unshare --mount --propagation private true 2>/dev/null || skip "cannot create a mount namespace (unshare -m)"
  GROUPSGD_SYSTEMD_TEST_NS=1 exec unshare --mount --propagation private -- bash "$0" "$@"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-systemd.XXXXXX")
nspawn_pid=""
cleanup() {
  if [[ -n $nspawn_pid ]] && kill -0 "$nspawn_pid" 2>/dev/null; then
    kill -TERM "$nspawn_pid" 2>/dev/null || true  # nspawn asks the container's init to power off
    for _ in $(seq 100); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nspawn_pid" 2>/dev/null || true
    wait "$nspawn_pid" 2>/dev/null || true
  fi
  umount -l "$work/ov/root" 2>/dev/null || true
  umount -l "$work/ov" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
t0=$SECONDS
step() { echo "[$((SECONDS - t0))s] $*"; }

step "building the package"
rc=0
deb=$("$here/build_deb.sh" "$build_dir" "$work/deb") || rc=$?
[[ $rc -eq 0 ]] || exit $rc

# The container's tree: this machine's / under an overlay whose upper layer is a tmpfs.
mkdir -p "$work/ov"
mount -t tmpfs -o mode=0755 groupsgd-ct "$work/ov" || skip "cannot mount a tmpfs"
mkdir -p "$work/ov/upper" "$work/ov/work" "$work/ov/root"
root=$work/ov/root
if ! err=$(mount -t overlay groupsgd-ct -o "lowerdir=/,upperdir=$work/ov/upper,workdir=$work/ov/work" "$root" 2>&1); then
  skip "cannot mount an overlay of / for the container: $err"
fi
cp "$deb" "$root/root/"
deb_in=/root/$(basename "$deb")

step "booting systemd in the container"
# --register=no/--keep-unit: no machined or system bus needed on the host; --link-journal=no:
# the container shares the host's machine id. --unit=basic.target: none of the host's own
# services (databases, schedulers) start in it.
systemd-nspawn -D "$root" -b -M "groupsgd-test-$$" --register=no --keep-unit --link-journal=no \
  --private-network --console=pipe -- --unit=basic.target </dev/null >"$work/console.log" 2>&1 &
nspawn_pid=$!
leader="" state=""
for _ in $(seq 600); do
  kill -0 "$nspawn_pid" 2>/dev/null ||
    skip "systemd-nspawn could not boot systemd here: $(tr '\n' ' ' <"$work/console.log" | tail -c 600)"
  # The container's PID 1 as the host sees it: nspawn's child that runs systemd (read
  # from /proc: a minimal Debian has no ps).
  leader=""
  for d in /proc/[0-9]*; do
    [[ $(cut -d' ' -f4 "$d/stat" 2>/dev/null) == "$nspawn_pid" &&
       $(cat "$d/comm" 2>/dev/null) == systemd ]] && leader=${d#/proc/} && break
  done
  if [[ -n $leader ]]; then
    state=$(nsenter -t "$leader" -a systemctl is-system-running 2>/dev/null || true)
    [[ $state == running || $state == degraded ]] && break
  fi
  sleep 0.1
done
[[ $state == running || $state == degraded ]] ||
  skip "systemd in the container did not finish booting in 60 s (state '$state'): $(tail -c 600 "$work/console.log")"
[[ $(nsenter -t "$leader" -a cat /proc/1/comm) == systemd ]] || fail "PID 1 in the container is not systemd"

# Runs a command in the container with a clean environment (installed programs, not the build tree).
ct() {
  nsenter -t "$leader" -a -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"
}
show() { ct systemctl show -P "$2" "$1"; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s
  local limit=$1 what=$2
  shift 2
  for _ in $(seq $((limit * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  fail "timed out after ${limit}s waiting for: $what"
}
# (Read whole, then searched: grep -q closing the pipe early would fail it under pipefail.)
journal() { ct journalctl -u groupsgdd -o cat --no-pager; }
journal_has() { local text; text=$(journal); grep -q -- "$1" <<<"$text"; }
journal_count() { local text; text=$(journal); grep -c -- "$1" <<<"$text" || true; }
step "systemd is up in the container ($state)"

step "installing the package with apt-get"
if ! ct apt-get install -y -q "$deb_in" >"$work/apt.log" 2>&1; then
  cat "$work/apt.log" >&2
  fail "apt-get install $deb_in failed in the container"
fi
ct id groupsgd >/dev/null || fail "the package did not create the user groupsgd"
[[ $(ct stat -c '%a %G' /etc/groupsgd) == "750 groupsgd" ]] || fail "/etc/groupsgd is not 0750 root:groupsgd"
[[ $(show groupsgdd LoadState) == loaded ]] || fail "groupsgdd.service is not loaded after the install"
# systemd's own check of the installed units (syntax, directives, programs).
if ! ct systemd-analyze verify groupsgdd.service groupsgd-worker@w1.service \
    groupsgd-evaluator.service groupsgd-node.service >"$work/verify.log" 2>&1; then
  cat "$work/verify.log" >&2
  fail "systemd-analyze verify rejects the installed units"
fi

step "configuring: one run, two worker instances, a test drop-in"
ct sh -c 'cat >/etc/groupsgd/groupsgd.json' <<'EOF'
{
  "mode": "adaptive", "workers": 2, "listen": "tcp://127.0.0.1:5555", "bind_host": "127.0.0.1",
  "checkpoint_dir": "/var/lib/groupsgd/checkpoints", "checkpoint_interval_s": 600,
  "heartbeat_ms": 500, "step_deadline_ms": 5000, "log_level": "info"
}
EOF
ct chgrp groupsgd /etc/groupsgd/groupsgd.json
ct chmod 0640 /etc/groupsgd/groupsgd.json
for w in w1 w2; do
  printf 'COORDINATOR=tcp://127.0.0.1:5555\nWORKER_ARGS=--device-ms 5\n' | ct sh -c "cat >/etc/groupsgd/worker-$w.env"
done
ct mkdir -p /etc/systemd/system/groupsgdd.service.d
ct sh -c 'cat >/etc/systemd/system/groupsgdd.service.d/test.conf' <<'EOF'
[Service]
WatchdogSec=4
TimeoutAbortSec=5
LimitCORE=0
EOF
ct systemctl daemon-reload

step "systemctl start groupsgdd (Type=notify: returns after READY=1)"
ct systemctl start groupsgdd || {
  ct journalctl -u groupsgdd --no-pager | tail -30 >&2
  fail "systemctl start groupsgdd failed"
}
[[ $(show groupsgdd ActiveState) == active ]] || fail "groupsgdd is not active after start"
status_text=$(show groupsgdd StatusText)
[[ $status_text == training:* ]] || fail "STATUS= from sd_notify is '$status_text', not 'training: ...'"
[[ $(show groupsgdd MainPID) -gt 0 ]] || fail "no main pid"
step "active, STATUS=$status_text"
[[ $(ct stat -c '%a %U %G' /run/groupsgd) == "750 groupsgd groupsgd" ]] || fail "/run/groupsgd is not 0750 groupsgd:groupsgd"
[[ $(ct stat -c '%a' /run/groupsgd/control.sock) == 660 ]] || fail "control socket is not 0660"

trainers_active() {  # trainers_active N: at least N active trainers
  local n
  n=$(ct groupsgdctl --json workers | ct python3 -c \
    'import json,sys; print(sum(1 for r in json.load(sys.stdin)["workers"] if r["role"]=="trainer" and r["state"]=="active"))')
  [[ $n -ge $1 ]]
}
worker_state() {  # worker_state NAME: the state of trainer NAME ("" when unknown)
  ct groupsgdctl --json workers | ct python3 -c \
    'import json,sys; print(" ".join(r["state"] for r in json.load(sys.stdin)["workers"] if r.get("name")==sys.argv[1]))' "$1"
}

step "groupsgd-worker@w1 and @w2 join the head unit"
ct systemctl start groupsgd-worker@w1 groupsgd-worker@w2
wait_for 60 "two active trainers from groupsgd-worker@" trainers_active 2
[[ $(worker_state w1) == active && $(worker_state w2) == active ]] || fail "w1/w2 are not the active trainers"

step "groupsgd-evaluator registers, and is restarted when killed"
printf 'COORDINATOR=tcp://127.0.0.1:5555\nEVALUATOR_ARGS=\n' | ct sh -c 'cat >/etc/groupsgd/evaluator.env'
ct systemctl start groupsgd-evaluator
evaluator_active() {
  local n
  n=$(ct groupsgdctl --json workers | ct python3 -c \
    'import json,sys; print(sum(1 for r in json.load(sys.stdin)["workers"] if r["role"]=="evaluator" and r["state"]=="active"))')
  [[ $n -ge 1 ]]
}
wait_for 60 "an active evaluator from groupsgd-evaluator" evaluator_active
eval_pid=$(show groupsgd-evaluator MainPID)
ct kill -KILL "$eval_pid"
evaluator_restarted() {
  [[ $(show groupsgd-evaluator NRestarts) -ge 1 && $(show groupsgd-evaluator ActiveState) == active &&
     $(show groupsgd-evaluator MainPID) != "$eval_pid" ]]
}
wait_for 30 "groupsgd-evaluator restarted after SIGKILL" evaluator_restarted
wait_for 60 "the restarted evaluator registered" evaluator_active

step "socket permissions: a non-member cannot connect, a member adds a worker but may not drain"
ct useradd --system --no-create-home -G groupsgd alice
ct useradd --system --no-create-home bob
if ct runuser -u bob -- groupsgdctl status >/dev/null 2>&1; then
  fail "bob (not in group groupsgd) reached the control socket"
fi
ct runuser -u alice -- /usr/share/groupsgd/scripts/add-worker.sh --coordinator tcp://127.0.0.1:5555 \
  --name w3 --log-dir /tmp --timeout 60 -- --device-ms 5 || fail "add-worker.sh as a member of groupsgd failed"
[[ $(worker_state w3) == active ]] || fail "w3 is not active after add-worker.sh"
rc=0
ct runuser -u alice -- /usr/share/groupsgd/scripts/drain-worker.sh --timeout 10 w3 >"$work/drain.log" 2>&1 || rc=$?
[[ $rc -eq 1 ]] && grep -q permission_denied "$work/drain.log" ||
  fail "drain by a non-admin member: exit $rc, expected 1 with permission_denied: $(cat "$work/drain.log")"
ct /usr/share/groupsgd/scripts/drain-worker.sh --timeout 60 w3 || fail "drain-worker.sh as root failed"
[[ $(worker_state w3) != *active* ]] || fail "w3 is still active after drain-worker.sh"

step "drain a unit's worker: groupsgd-worker@w2 exits 0 and is not restarted"
ct /usr/share/groupsgd/scripts/drain-worker.sh --timeout 60 w2 || fail "drain-worker.sh w2 failed"
w2_stopped() { [[ $(show groupsgd-worker@w2 ActiveState) == inactive ]]; }
wait_for 30 "groupsgd-worker@w2 to stop" w2_stopped
[[ $(show groupsgd-worker@w2 ExecMainStatus) == 0 && $(show groupsgd-worker@w2 Result) == success ]] ||
  fail "groupsgd-worker@w2 did not exit 0 after the drain"

step "systemctl reload: log_level info -> debug"
ct groupsgdctl status >/dev/null
[[ $(journal_count 'control: status from') -eq 0 ]] || fail "debug lines before the reload"
ct sed -i 's/"log_level": "info"/"log_level": "debug"/' /etc/groupsgd/groupsgd.json
ct systemctl reload groupsgdd
# (STATUS=reloaded is not checked: the next progress line replaces it within a second.)
# (The journal is read with waits: journald takes the daemon's stderr a moment later.)
wait_for 10 "'configuration reloaded' in the journal" journal_has 'configuration reloaded from /etc/groupsgd/groupsgd.json'
ct groupsgdctl status >/dev/null
wait_for 10 "a debug line after the reload" journal_has 'control: status from'

step "watchdog: SIGSTOP the daemon, systemd kills and restarts it"
old_pid=$(show groupsgdd MainPID)
restarts=$(show groupsgdd NRestarts)
ct kill -STOP "$old_pid"
restarted() {
  local pid
  pid=$(show groupsgdd MainPID)
  [[ $(show groupsgdd NRestarts) -gt $restarts && $pid -gt 0 && $pid != "$old_pid" &&
     $(show groupsgdd ActiveState) == active ]]
}
wait_for 40 "the watchdog restart" restarted
wait_for 10 "'Watchdog timeout' from systemd in the journal" journal_has 'Watchdog timeout'
step "restarted: pid $old_pid -> $(show groupsgdd MainPID), NRestarts $(show groupsgdd NRestarts)"
wait_for 60 "w1 back with the restarted daemon" trainers_active 1
# The evaluator keeps fetching from the old central PS (15 s per try) until a heartbeat
# tells it to register again; stopped before that it exits 1 (seen here).
wait_for 60 "the evaluator registered with the restarted daemon" evaluator_active

step "systemctl stop groupsgd-evaluator (SIGTERM: leaves, exits 0), then groupsgdd"
# The evaluator goes first: stopped after the head, one still fetching from the
# pre-restart central PS missed the head's stop and kept retrying (seen once).
ct systemctl stop groupsgd-evaluator
[[ $(show groupsgd-evaluator Result) == success && $(show groupsgd-evaluator ExecMainStatus) == 0 ]] ||
  fail "groupsgd-evaluator stop: result $(show groupsgd-evaluator Result), exit $(show groupsgd-evaluator ExecMainStatus)"

step "systemctl stop: final checkpoint, exit 0"
written_before=$(journal_count 'written in')
ct systemctl stop groupsgdd
[[ $(show groupsgdd ActiveState) == inactive ]] || fail "groupsgdd is $(show groupsgdd ActiveState) after stop"
[[ $(show groupsgdd ExecMainStatus) == 0 && $(show groupsgdd Result) == success ]] ||
  fail "stop: exit status $(show groupsgdd ExecMainStatus), result $(show groupsgdd Result)"
checkpoint_logged() { [[ $(journal_count 'written in') -gt $written_before ]]; }
wait_for 10 "a checkpoint written at the stop (journal)" checkpoint_logged
ckpts=$(ct sh -c 'ls /var/lib/groupsgd/checkpoints/ | grep -c gsgd' || true)
[[ $ckpts -ge 1 ]] || fail "no checkpoint file in /var/lib/groupsgd/checkpoints"
step "stopped with exit 0; $ckpts checkpoint file(s)"

step "groupsgd-node joins a head in role coordinator (a drop-in), and stops with it"
ct sh -c 'cat >/etc/systemd/system/groupsgdd.service.d/role.conf' <<'EOF'
[Service]
ExecStart=
ExecStart=/usr/bin/groupsgdd --config /etc/groupsgd/groupsgd.json --control-socket /run/groupsgd/control.sock --role coordinator
EOF
# control_admin_gid: members of the groupsgd group may now use admin methods (drain).
admin_gid=$(ct getent group groupsgd | cut -d: -f3)
ct sh -c 'cat >/etc/groupsgd/groupsgd.json' <<EOF
{
  "mode": "grouped", "workers": 1, "groups": 1, "listen": "tcp://127.0.0.1:5555",
  "bind_host": "127.0.0.1", "checkpoint_dir": "/var/lib/groupsgd/checkpoints-nodes",
  "heartbeat_ms": 500, "step_deadline_ms": 5000, "log_level": "info",
  "control_admin_gid": $admin_gid
}
EOF
printf 'COORDINATOR=tcp://127.0.0.1:5555\nNODE_ARGS=--node-groups 1\n' | ct sh -c 'cat >/etc/groupsgd/node.env'
ct systemctl daemon-reload
ct systemctl start groupsgdd
[[ $(show groupsgdd ActiveState) == active ]] || fail "the coordinator-only head is not active"
ct systemctl start groupsgd-node groupsgd-worker@w1
node_offered() { journal_has 'offers 1 group PS(es), 1 used'; }
wait_for 60 "the node's group PS offer in the head's journal" node_offered
wait_for 60 "w1 training in the node's group" trainers_active 1
ct runuser -u alice -- /usr/share/groupsgd/scripts/drain-worker.sh --timeout 60 w1 ||
  fail "drain-worker.sh by a member of control_admin_gid failed"
w1_stopped() { [[ $(show groupsgd-worker@w1 ActiveState) == inactive ]]; }
wait_for 30 "groupsgd-worker@w1 to stop after its drain" w1_stopped
ct systemctl stop groupsgdd
[[ $(show groupsgdd ExecMainStatus) == 0 ]] || fail "the coordinator head did not exit 0"
node_done() { [[ $(show groupsgd-node ActiveState) == inactive ]]; }
wait_for 60 "groupsgd-node to stop after the head" node_done
[[ $(show groupsgd-node Result) == success && $(show groupsgd-node ExecMainStatus) == 0 ]] ||
  fail "groupsgd-node: result $(show groupsgd-node Result), exit $(show groupsgd-node ExecMainStatus)"

step "journalctl -u groupsgdd holds the daemon's log"
own=$(ct journalctl -u groupsgdd -t groupsgdd -o cat --no-pager)
own_lines=$(wc -l <<<"$own")
[[ $own_lines -ge 5 ]] || fail "only $own_lines lines from groupsgdd in its journal"
grep -q 'head incarnation 1' <<<"$own" && grep -q 'head incarnation 2' <<<"$own" ||
  fail "the journal lacks the first or the restarted daemon's start"
echo "journal: $own_lines lines from groupsgdd, e.g.:"
sed -n 1,3p <<<"$own"
step "OK"
