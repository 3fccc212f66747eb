#!/usr/bin/env bash
# The main job: trains the Fashion-MNIST MLP with groupsgd on this machine — the daemon,
# N worker processes (some of them emulated stragglers) and the evaluator — until the
# target test accuracy, printing one progress line per second and a closing summary.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

mode=adaptive workers=8 stragglers=1 slowdown=4 device_ms=10 target=0.85 groups=2 period=1
max_seconds=300 json=0 quick=0 batch=32 link_ms=0 schedule="" erratic="" max_samples=0 daemon_extra=""
device=cpu trainer=cpp torch_model=mlp slowdowns="" add_at=() drain_at=()
usage() {
  cat <<USAGE
usage: scripts/demo.sh [options]
  --mode M          adaptive | sync | async | grouped (default adaptive)
  --workers N       worker processes (default 8)
  --groups G        grouped mode: groups (default 2)
  --exchange-period K  grouped mode: steps between central exchanges (default 1)
  --stragglers K    how many workers are slowed down (default 1)
  --slowdown F      their slowdown factor (default 4)
  --slowdowns "F.." one factor per straggler, w1 first (sets --stragglers; e.g. "4 2")
  --add-at T[:F]    start one more trainer T seconds after the trainers (F times slower;
                    default 1); repeatable; it joins the running job (cpp trainers only)
  --drain-at T:NAME drain trainer NAME (w1 ..) T seconds after the trainers start
                    (groupsgdctl drain); repeatable (cpp trainers only)
  --device-ms D     emulated device time per step at the base batch, every worker (default 10)
  --link-ms L       stragglers: extra delay on every exchange instead of a slowdown
  --erratic P:S     stragglers: random pauses instead (probability P per step, mean S ms)
  --schedule S      stragglers: a speed schedule (groupsgd-worker --schedule syntax)
  --batch-size B    samples per worker step (default 32)
  --device D        where the trainers compute: cpu | cuda | cuda:N (default cpu)
  --trainer T       cpp (groupsgd-worker, the built-in MLP) | pytorch (the PyTorch example,
                    examples/pytorch/train_fashion_mnist.py, started with its daemon and
                    evaluator by the launcher, python3 -m groupsgd.run)
  --torch-model M   with --trainer pytorch: mlp | cnn | resnet18 (default mlp)
  --target-acc A    stop at this test accuracy (default 0.85)
  --max-seconds S   give up after S seconds (default 300)
  --max-samples N   stop after N samples trained (a fixed sample budget; default none)
  --daemon-args S   extra groupsgdd flags, word-split (e.g. "--step-deadline-ms 500")
  --quick           a short run (target 0.80, at most 50 s)
  --json            the last line is one JSON summary object
  --help            this text
Environment: DEMO_WORKER_LOG_LEVEL (the C++ trainers' --log-level, default warn; their
logs are worker-N.log in the run's directory); GROUPSGD_PYTHON (the Python that runs the
PyTorch trainers, default /usr/bin/python3: set it to a virtual environment's).
USAGE
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --groups) groups=$2; shift 2 ;;
    --exchange-period) period=$2; shift 2 ;;
    --stragglers) stragglers=$2; shift 2 ;;
    --slowdown) slowdown=$2; shift 2 ;;
    --slowdowns) slowdowns=$2; shift 2 ;;
    --add-at) add_at+=("$2"); shift 2 ;;
    --drain-at) drain_at+=("$2"); shift 2 ;;
    --device-ms) device_ms=$2; shift 2 ;;
    --link-ms) link_ms=$2; shift 2 ;;
    --erratic) erratic=$2; shift 2 ;;
    --schedule) schedule=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --trainer) trainer=$2; shift 2 ;;
    --torch-model) torch_model=$2; shift 2 ;;
    --target-acc) target=$2; shift 2 ;;
    --max-seconds) max_seconds=$2; shift 2 ;;
    --max-samples) max_samples=$2; shift 2 ;;
    --daemon-args) daemon_extra=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --json) json=1; shift ;;
    --help|-h) usage; exit 0 ;;
    *) echo "demo: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ $quick == 1 ]]; then
  target=0.80
  max_seconds=50
fi
if [[ $trainer != cpp && $trainer != pytorch ]]; then echo "demo: --trainer is cpp or pytorch" >&2; exit 2; fi
if [[ $trainer == pytorch && ( $link_ms != 0 || -n $schedule || -n $erratic ) ]]; then
  echo "demo: --trainer pytorch emulates stragglers by --slowdown only" >&2; exit 2
fi
if [[ -n $slowdowns ]]; then
  read -r -a per_straggler <<<"$slowdowns"
  stragglers=${#per_straggler[@]}
fi
if [[ $trainer == pytorch && ( -n $slowdowns || ${#add_at[@]} -gt 0 || ${#drain_at[@]} -gt 0 ) ]]; then
  echo "demo: --slowdowns, --add-at and --drain-at need the cpp trainers" >&2; exit 2
fi
for e in "${add_at[@]}"; do
  [[ $e =~ ^[0-9.]+(:[0-9.]+)?$ ]] || { echo "demo: --add-at T[:F], not '$e'" >&2; exit 2; }
done
for e in "${drain_at[@]}"; do
  [[ $e =~ ^[0-9.]+:[A-Za-z0-9_-]+$ ]] || { echo "demo: --drain-at T:NAME, not '$e'" >&2; exit 2; }
done
if (( stragglers > workers )); then echo "demo: more stragglers than workers" >&2; exit 2; fi
if [[ $mode == grouped ]] && (( groups > workers )); then groups=$workers; fi

log() { echo "demo: $*" >&2; }
export BUILD_DIR=${BUILD_DIR:-$root/build}
python=${GROUPSGD_PYTHON:-/usr/bin/python3}
# BENCH_NO_BUILD=1 (scripts/bench.sh, the bench smoke tests): use the binaries as built.
if [[ ${BENCH_NO_BUILD:-0} != 1 ]]; then
  "$root/scripts/install-deps.sh" >&2
  "$root/scripts/build.sh" >&2
fi
if [[ $trainer == pytorch && ! -d $BUILD_DIR/python/groupsgd ]]; then
  echo "demo: the Python package was not built (pybind11 and python3-dev missing?)" >&2; exit 2
fi
if [[ $device != cpu && $trainer == cpp ]]; then
  # A worker refuses an unusable device with exit 2 before it registers; find out now
  # rather than after the daemon waited for workers that all quit.
  probe_status=0
  probe_err=$("$BUILD_DIR/worker/groupsgd-worker" --device "$device" --coordinator tcp://127.0.0.1:1 \
    --connect-timeout-ms 1 --log-level error 2>&1 >/dev/null) || probe_status=$?
  if (( probe_status == 2 )); then echo "demo: $probe_err" >&2; exit 2; fi
fi

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-demo.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

export OPENBLAS_NUM_THREADS=1
daemon_args=(--mode "$mode" --workers "$workers" --groups "$groups" --exchange-period "$period"
  --batch-size "$batch" --listen tcp://127.0.0.1:0 --endpoint-file "$run_dir/endpoint"
  --target-acc "$target" --max-seconds "$max_seconds" --summary-file "$run_dir/summary.json"
  --heartbeat-ms 250 --control-ms 500 --log-level warn)
# The dashboard (docs/operations.md "Watching a run") on a free loopback port, unless
# --daemon-args names its own --metrics-listen.
if [[ $daemon_extra != *--metrics-listen* ]]; then
  dashboard_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  daemon_args+=(--metrics-listen "127.0.0.1:$dashboard_port")
fi
[[ $json == 1 ]] && daemon_args+=(--json)
[[ $trainer == pytorch ]] && daemon_args+=(--model external)
[[ $max_samples != 0 ]] && daemon_args+=(--max-samples "$max_samples")
# A drain goes through the control socket (groupsgdctl).
(( ${#drain_at[@]} > 0 )) && daemon_args+=(--control-socket "$run_dir/control.sock")
# shellcheck disable=SC2206  # word splitting is the point of --daemon-args
[[ -n $daemon_extra ]] && daemon_args+=($daemon_extra)
kind="${slowdown}x slower"
[[ -n $slowdowns ]] && kind="${slowdowns// /x, }x slower"
[[ $link_ms != 0 ]] && kind="+${link_ms} ms per exchange"
[[ -n $schedule ]] && kind="schedule $schedule"
[[ -n $erratic ]] && kind="erratic pauses $erratic"
log "mode $mode, $workers $trainer workers ($stragglers $kind), target accuracy $target; logs in $run_dir"
[[ -n ${dashboard_port:-} ]] && log "dashboard: http://127.0.0.1:$dashboard_port/ (metrics at /metrics)"
if [[ $trainer == pytorch ]]; then
  # The launcher starts the daemon (adding --model external, --workers, --listen and the
  # endpoint and summary files), the trainers w0.. and the evaluator, each logging to
  # $run_dir/NAME.log, and stops them together; the example slows down the trainers of
  # rank < --stragglers. Its exit status is the daemon's (3: target not reached).
  launcher_daemon_args=()
  skip=0
  for a in "${daemon_args[@]}"; do
    if (( skip )); then skip=0; continue; fi
    case $a in --workers|--listen|--endpoint-file|--summary-file) skip=1; continue ;; --model) skip=1; continue ;; esac
    launcher_daemon_args+=("$a")
  done
  status=0
  PYTHONPATH=$BUILD_DIR/python OMP_NUM_THREADS=1 GROUPSGDD=$BUILD_DIR/daemon/groupsgdd "$python" \
    -m groupsgd.run --workers "$workers" --evaluate --log-dir "$run_dir" --no-summary \
    --daemon-args "${launcher_daemon_args[*]}" \
    "$root/examples/pytorch/train_fashion_mnist.py" --model "$torch_model" --device "$device" \
    --device-ms "$device_ms" --slowdown "$slowdown" --stragglers "$stragglers" || status=$?
  if (( status == 3 )); then
    log "the target accuracy $target was not reached (summary: $run_dir/summary.json)"
    exit 3
  elif (( status != 0 )); then
    log "the run failed (exit $status):"
    tail -20 "$run_dir/daemon.log" >&2
    exit "$status"
  fi
  exit 0
fi
"$BUILD_DIR/daemon/groupsgdd" "${daemon_args[@]}" 2>"$run_dir/daemon.log" &
daemon_pid=$!
pids+=("$daemon_pid")
for _ in $(seq 100); do [[ -s $run_dir/endpoint ]] && break; sleep 0.05; done
[[ -s $run_dir/endpoint ]] || { log "the daemon did not start:"; cat "$run_dir/daemon.log" >&2; exit 1; }
endpoint=$(cat "$run_dir/endpoint")

for i in $(seq 1 "$workers"); do
  speed=(--slowdown 1)
  if (( i <= stragglers )); then
    if [[ -n $schedule ]]; then speed=(--schedule "$schedule")
    elif [[ -n $erratic ]]; then speed=(--stall-prob "${erratic%%:*}" --stall-ms "${erratic##*:}")
    elif [[ $link_ms != 0 ]]; then speed=(--link-ms "$link_ms")
    elif [[ -n $slowdowns ]]; then speed=(--slowdown "${per_straggler[$((i - 1))]}")
    else speed=(--slowdown "$slowdown"); fi
  fi
  if [[ $trainer == pytorch ]]; then
    PYTHONPATH=$BUILD_DIR/python OMP_NUM_THREADS=1 "$python" \
      "$root/examples/pytorch/train_fashion_mnist.py" --coordinator "$endpoint" \
      --model "$torch_model" --device "$device" --device-ms "$device_ms" "${speed[@]}" \
      --name "w$i" >"$run_dir/worker-$i.log" 2>&1 &
  else
    "$BUILD_DIR/worker/groupsgd-worker" --coordinator "$endpoint" --device-ms "$device_ms" \
      --device "$device" "${speed[@]}" --name "w$i" --log-level ${DEMO_WORKER_LOG_LEVEL:-warn} 2>"$run_dir/worker-$i.log" &
  fi
  pids+=("$!")
done
# Mid-run changes (--add-at, --drain-at): each a subshell that sleeps, then execs the
# trainer or groupsgdctl, so that its pid is the process that cleanup stops.
n_added=0
for e in "${add_at[@]}"; do
  n_added=$((n_added + 1))
  name="w$((workers + n_added))" factor=1
  [[ $e == *:* ]] && factor=${e#*:}
  (sleep "${e%%:*}"; exec "$BUILD_DIR/worker/groupsgd-worker" --coordinator "$endpoint" \
    --device-ms "$device_ms" --device "$device" --slowdown "$factor" --name "$name" \
    --log-level ${DEMO_WORKER_LOG_LEVEL:-warn} 2>"$run_dir/worker-added-$n_added.log") &
  pids+=("$!")
  log "trainer $name (${factor}x slower) joins at ${e%%:*} s"
done
for e in "${drain_at[@]}"; do
  (sleep "${e%%:*}"; exec "$BUILD_DIR/daemon/groupsgdctl" --socket "$run_dir/control.sock" \
    drain "${e#*:}" --wait >>"$run_dir/drain.log" 2>&1) &
  pids+=("$!")
  log "trainer ${e#*:} is drained at ${e%%:*} s"
done
# The evaluator (C++ or PyTorch, like the trainers), in place of the subshell it runs in.
run_evaluator() {
  if [[ $trainer == pytorch ]]; then
    exec env PYTHONPATH="$BUILD_DIR/python" OMP_NUM_THREADS=1 "$python" \
      "$root/examples/pytorch/train_fashion_mnist.py" --coordinator "$endpoint" --evaluate \
      --model "$torch_model" --device "$device" --name evaluator >>"$run_dir/evaluator.log" 2>&1
  else
    exec "$BUILD_DIR/worker/groupsgd-worker" --coordinator "$endpoint" --evaluate \
      --name evaluator --log-level warn 2>>"$run_dir/evaluator.log"
  fi
}
# The evaluator is supervised: restarted whenever it dies while the daemon runs (a
# replacement registers and measures the newest central model, so the run can still reach
# its target). Exit 0 is a clean stop (training over) and exit 2 bad options: not restarted.
# Its current pid is in $run_dir/evaluator.pid.
supervise_evaluator() {
  local child=0 status restarts=0
  trap 'kill "$child" 2>/dev/null; exit 0' TERM
  while kill -0 "$daemon_pid" 2>/dev/null; do
    run_evaluator &
    child=$!
    echo "$child" >"$run_dir/evaluator.pid"
    status=0
    wait "$child" || status=$?
    if (( status == 0 || status == 2 )); then return; fi
    restarts=$((restarts + 1))
    log "the evaluator exited (status $status); restarting it (restart $restarts)"
    sleep 1
  done
}
supervise_evaluator &
pids+=("$!")

status=0
wait "$daemon_pid" || status=$?
if [[ $status != 0 ]]; then
  log "the daemon failed (exit $status):"
  tail -20 "$run_dir/daemon.log" >&2
  exit "$status"
fi
if [[ $target != 0 ]] && ! grep -q '"reached": true' "$run_dir/summary.json"; then
  log "the target accuracy $target was not reached (summary: $run_dir/summary.json)"
  exit 3
fi
