# Shared by the network-fault tests (tests/netns/*.sh; docs/reliability.md "Network
# faults"). Sourced, not run. Each test builds its own namespaces, named after its PID:
#
#   head (10.77.0.1) --veth-- rt (10.77.0.254 | 10.77.i.254) --veth-- side i (10.77.i.1)
#
# "head" runs groupsgdd (coordinator, central PS, group PSes); each side namespace runs
# one worker; "rt" routes between them and is where faults go (nft drop and redirect
# rules, tc tbf on its ports, the delaying proxy), so every fault sits on a real path.
# Everything (processes, namespaces, their veths and nft tables) is removed on exit.
# Needs root; exits 77 (CTest: skipped) with the reason when namespaces cannot be made.
set -euo pipefail
# shellcheck source=ns_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/ns_common.sh"

: "${GROUPSGDD:?set GROUPSGDD to the groupsgdd binary}"
: "${GROUPSGD_WORKER:?set GROUPSGD_WORKER to the groupsgd-worker binary}"
: "${GROUPSGDCTL:?set GROUPSGDCTL to the groupsgdctl binary}"

NS="gsgd$$"
HEAD_IP=10.77.0.1
PORT=5555
ENDPOINT="tcp://${HEAD_IP}:${PORT}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-netns.XXXXXX")
PIDS=()
T0=$(date +%s.%N)

log() { printf '[%6.1fs] %s\n' "$(echo "$(date +%s.%N) - $T0" | bc)" "$*"; }
now() { date +%s.%N; }
# Log lines start with an ISO 8601 UTC time with milliseconds (common/src/log.cc); these
# convert between it and now()'s seconds. ISO times of one format compare as strings.
iso_at() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S.%3NZ; }
iso_seconds() { date -u -d "$1" +%s.%N; }
fail() {
  echo "FAIL: $*" >&2
  dump_logs
  exit 1
}
skip() {
  echo "SKIP: $*"
  exit 77
}

dump_logs() {
  for f in "$WORK"/*.log; do
    [[ -f $f ]] || continue
    echo "----- $(basename "$f") (last 40 lines)" >&2
    tail -n 40 "$f" >&2
  done
}

cleanup() {
  local rc=$?
  set +e
  ns_stop_pids ${PIDS[@]+"${PIDS[@]}"}
  ns_delete "$NS"
  if [[ $rc -ne 0 && $rc -ne 77 && -n "${KEEP_NETNS_LOGS:-}" ]]; then
    echo "logs kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

reap_stale_namespaces() { ns_reap_stale gsgd; }

# Skips (77) unless this machine lets us make namespaces, veths, nft tables and tbf.
require_netns() {
  [[ $(id -u) -eq 0 ]] || skip "network-namespace tests need root (uid $(id -u))"
  local tool
  for tool in ip nft tc jq bc; do
    command -v "$tool" >/dev/null || skip "'$tool' is not installed (scripts/install-deps.sh)"
  done
  reap_stale_namespaces
  local err
  err=$(ip netns add "${NS}-probe" 2>&1) || skip "'ip netns add' refused: $err"
  err=$(ip link add name p0 netns "${NS}-probe" type veth peer name p1 netns "${NS}-probe" 2>&1) ||
    skip "cannot create a veth pair: $err"
  err=$(printf 'table ip probe {\n chain c {\n  type filter hook forward priority 0;\n }\n}\n' |
        ip netns exec "${NS}-probe" nft -f - 2>&1) || skip "nft refused a table: $err"
  err=$(ip netns exec "${NS}-probe" tc qdisc add dev p0 root tbf rate 1mbit burst 32kbit latency 50ms 2>&1) ||
    skip "tc tbf refused: $err"
  ip netns del "${NS}-probe"
}

in_ns() {  # in_ns NAME CMD...: run CMD in namespace NAME
  local ns=$1
  shift
  ip netns exec "${NS}-${ns}" "$@"
}

# Builds head, rt and `n` side namespaces (side i = 10.77.i.1, its rt port r<i>).
make_topology() {
  local n=$1 i
  ip netns add "${NS}-head"
  ip netns add "${NS}-rt"
  in_ns rt sysctl -qw net.ipv4.ip_forward=1
  ip link add name h0 netns "${NS}-head" type veth peer name rh netns "${NS}-rt"
  in_ns head ip addr add "${HEAD_IP}/24" dev h0
  in_ns rt ip addr add 10.77.0.254/24 dev rh
  for ((i = 1; i <= n; i++)); do
    ip netns add "${NS}-s$i"
    ip link add name s0 netns "${NS}-s$i" type veth peer name "r$i" netns "${NS}-rt"
    in_ns "s$i" ip addr add "10.77.$i.1/24" dev s0
    in_ns rt ip addr add "10.77.$i.254/24" dev "r$i"
  done
  local ns
  for ns in head rt $(seq -f 's%g' 1 "$n"); do
    in_ns "$ns" ip link set lo up
    for dev in $(in_ns "$ns" ls /sys/class/net); do in_ns "$ns" ip link set "$dev" up; done
  done
  in_ns head ip route add default via 10.77.0.254
  for ((i = 1; i <= n; i++)); do in_ns "s$i" ip route add default via "10.77.$i.254"; done
  log "topology: head $HEAD_IP, router, $n side namespaces (${NS}-*)"
}

# start_daemon ARGS...: groupsgdd in the head namespace; waits until it listens.
start_daemon() {
  # ip netns exec (not the in_ns function) so that $! is the daemon itself.
  ip netns exec "${NS}-head" "$GROUPSGDD" --listen "$ENDPOINT" --bind-host "$HEAD_IP" --endpoint-file "$WORK/endpoint" \
    --summary-file "$WORK/summary.json" --control-socket "$WORK/ctl.sock" --progress-ms 0 "$@" \
    >"$WORK/daemon.log" 2>&1 &
  DAEMON_PID=$!
  PIDS+=("$DAEMON_PID")
  wait_for 20 "the daemon's endpoint file" test -s "$WORK/endpoint"
}

# start_worker SIDE NAME ARGS...: a trainer (or, with --evaluate, the evaluator) in side SIDE.
start_worker() {
  local side=$1 name=$2
  shift 2
  ip netns exec "${NS}-s$side" "$GROUPSGD_WORKER" --coordinator "$ENDPOINT" --name "$name" "$@" \
    >"$WORK/$name.log" 2>&1 &
  PIDS+=("$!")
  WORKER_PIDS+=("$!")
}
WORKER_PIDS=()

# The evaluator runs in the head namespace: it measures the model, it is not under test.
start_evaluator() {
  ip netns exec "${NS}-head" "$GROUPSGD_WORKER" --coordinator "$ENDPOINT" --name eval --evaluate \
    --eval-interval-ms 300 >"$WORK/eval.log" 2>&1 &
  PIDS+=("$!")
  WORKER_PIDS+=("$!")
}

# wait_for SECONDS WHAT CMD...: polls CMD every 0.1 s until it succeeds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline
  deadline=$(echo "$(now) + $limit" | bc)
  until "$@" >/dev/null 2>&1; do
    (($(echo "$(now) > $deadline" | bc))) && fail "timed out after ${limit}s waiting for $what"
    sleep 0.1
  done
}

ctl_status() { "$GROUPSGDCTL" --socket "$WORK/ctl.sock" --json status; }
samples_trained() { ctl_status | jq -r '.samples_trained'; }
samples_above() { (($(samples_trained) > $1)); }

# Waits for the daemon to end the run by itself; every worker must then exit 0.
wait_finish() {
  local limit=$1
  wait_for "$limit" "the run to end" test -s "$WORK/summary.json"
  local i=0 pid rc
  for pid in "${WORKER_PIDS[@]}"; do
    rc=0
    wait_pid "$pid" 30 || rc=$?
    [[ $rc -eq 0 ]] || fail "worker process $i (pid $pid) exited $rc"
    i=$((i + 1))
  done
  wait_pid "$DAEMON_PID" 60 || fail "the daemon exited $?"
  SUMMARY="$WORK/summary.json"
}

# wait_pid PID SECONDS: its exit status (a child of this shell); 124 when still running.
wait_pid() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null; do
    ((t >= limit * 10)) && return 124
    sleep 0.1
    t=$((t + 1))
  done
  wait "$pid"
}

summary() { jq -r "$1" "$SUMMARY"; }

# The invariants every network-fault test asserts on the closing summary.
check_accounting() {
  local trained applied dropped
  trained=$(summary .samples_trained)
  applied=$(summary .samples_applied)
  dropped=$(summary .samples_dropped)
  ((trained > 0)) || fail "nothing trained"
  [[ $(summary .accounting_ok) == true ]] || fail "accounting broken: trained $trained applied $applied dropped $dropped"
  ((trained == applied + dropped)) || fail "trained $trained != applied $applied + dropped $dropped"
  [[ $(summary .samples_unaccounted) == 0 ]] || fail "samples unaccounted: $(summary .samples_unaccounted)"
}

# Converged: the evaluator's last accuracy on the final model is at least $1.
check_converged() {
  local acc
  acc=$(summary '.final_test_acc // 0')
  (($(echo "$acc >= $1" | bc -l))) || fail "final test accuracy $acc < $1"
}

# No split brain: every registration (worker id) has one group and one state, and no
# worker name holds more than one active registration at the end.
check_one_owner() {
  local dup
  dup=$(summary '[.worker_stats[] | select(.state == "active") | .name] | group_by(.) | map(select(length > 1)) | length')
  [[ $dup == 0 ]] || fail "a worker name holds two active registrations: $(summary '.worker_stats')"
  dup=$(summary '[.worker_stats[].id] | group_by(.) | map(select(length > 1)) | length')
  [[ $dup == 0 ]] || fail "a worker id appears twice: $(summary '.worker_stats')"
}

# The common run of the loss, bandwidth and latency tests: the evaluator and workers w1..w4
# (2 ms device time each), until the daemon stops.
run_four_workers() {
  start_evaluator
  local i
  for i in 1 2 3 4; do start_worker "$i" "w$i" --device-ms 2; done
  wait_finish 80
}

# What every such run must show: exact accounting, accuracy >= $1, one owner per name.
check_run() {
  check_accounting
  check_converged "$1"
  check_one_owner
}

# Packets counted by the rules of the router's nft table $1.
nft_packets() {
  in_ns rt nft -j list table ip "$1" | jq '[.nftables[] | .rule? // empty | .expr[] | .counter? // empty | .packets] | add'
}
