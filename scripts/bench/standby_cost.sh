#!/usr/bin/env bash
# What a synchronous standby costs (docs/reliability.md "Standby head", docs/benchmarks.md):
# a role-all head and two trainers (--device-ms 3) to a 150,000-sample budget on loopback,
# without a standby and with one (`--replication-listen` on the head, a `--role standby`
# process beside it), the variants interleaved run by run so that the machine's drift
# falls on all of them alike. With --other-daemon PATH a third variant runs the standby
# pair from another groupsgdd build (e.g. the one before a change).
#
#   standby_cost.sh [--runs N] [--other-daemon PATH]
#
# One JSON line per run (variant, elapsed_s, versions, mean_ack_wait_ms, the CPU seconds
# the head and the standby used and their sum per version: the work replication adds,
# less disturbed by other load than the elapsed time), then a summary line with each
# variant's medians and the elapsed time's ratio to the median without a standby.
# Binaries from BUILD_DIR (default build/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
daemon=$build/daemon/groupsgdd worker=$build/worker/groupsgd-worker
runs=5 other=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=${2:-}; shift $(($# > 1 ? 2 : 1)) ;;
    --other-daemon) other=${2:-}; shift $(($# > 1 ? 2 : 1)) ;;
    *) echo "standby_cost.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "standby_cost.sh: --runs takes a positive number, not '$runs'" >&2; exit 2; }
[[ -x $daemon && -x $worker ]] || { echo "standby_cost.sh: build first (no $daemon or $worker)" >&2; exit 1; }
[[ -z $other || -x $other ]] || { echo "standby_cost.sh: --other-daemon '$other' is not an executable" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-standby-cost.XXXXXX")
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
# CPU seconds (user + system) a live process has used so far, from /proc.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

run_once() {  # run_once VARIANT DAEMON: one JSON line
  local variant=$1 bin=$2 ep rep standby="" i
  ep=tcp://127.0.0.1:$(free_port)
  rm -f "$dir/s.json"
  # standby_takeover_ms 5000: on a loaded machine a standby starved of the CPU for the
  # default 1 s takes over from a live primary (safe: the primary is fenced and exits 75,
  # but the run is lost to the benchmark).
  # heartbeat_ms 100: the coordinator sees the budget crossed through heartbeats, so with
  # the default period (1 s) every run's elapsed time is rounded to it and a 5% cost hides.
  local head=("$bin" --mode grouped --workers 2 --groups 2 --max-samples 150000 --progress-ms 0
    --standby-takeover-ms 5000 --heartbeat-ms 100)
  if [[ $variant == none ]]; then
    "${head[@]}" --listen "$ep" --summary-file "$dir/s.json" >/dev/null 2>"$dir/head.log" &
  else
    rep=tcp://127.0.0.1:$(free_port)
    "${head[@]}" --listen "$ep" --replication-listen "$rep" --summary-file "$dir/s.json" >/dev/null \
      2>"$dir/head.log" &
  fi
  local head_pid=$!
  pids+=("$head_pid")
  if [[ $variant != none ]]; then
    "${head[@]}" --role standby --primary "$rep" --listen "tcp://127.0.0.1:$(free_port)" \
      >/dev/null 2>"$dir/standby.log" &
    standby=$!
    pids+=("$standby")
    for _ in $(seq 300); do grep -q "standby attached" "$dir/head.log" && break; sleep 0.1; done
  fi
  for i in 1 2; do
    "$worker" --coordinator "$ep" --name "w$i" --device-ms 3 >/dev/null 2>"$dir/w$i.log" &
    pids+=($!)
  done
  # The CPU both heads used: sampled while they run (the head's last 0.1 s is missed).
  local head_cpu=0 standby_cpu=0 rc=0 c
  while kill -0 "$head_pid" 2>/dev/null; do
    c=$(cpu_of "$head_pid") && [[ -n $c ]] && head_cpu=$c
    sleep 0.1
  done
  wait "$head_pid" || rc=$?
  if [[ -n $standby ]]; then
    standby_cpu=$(cpu_of "$standby")
    kill -TERM "$standby" 2>/dev/null
    wait "$standby" 2>/dev/null || true
  fi
  if ((rc != 0)); then  # e.g. superseded (75): its trainers would wait for it in vain
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    pids=()
    echo "{\"bench\": \"standby_cost_run\", \"variant\": \"$variant\", \"failed\": \"the head exited $rc\"}"
    return 0
  fi
  wait
  pids=()
  python3 - "$dir/s.json" "$dir/head.log" "$variant" "$head_cpu" "${standby_cpu:-0}" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))
versions = s.get("central_version") or 0
cpu = float(sys.argv[4]) + float(sys.argv[5])
m = re.search(r"standby link at the end: (\{.*\})", open(sys.argv[2]).read())
link = json.loads(m.group(1)) if m else {}
print(json.dumps({"bench": "standby_cost_run", "variant": sys.argv[3], "elapsed_s": s.get("elapsed_s"),
                  "versions": s.get("central_version"), "samples_trained": s.get("samples_trained"),
                  "mean_ack_wait_ms": link.get("mean_ack_wait_ms"),
                  "head_cpu_s": float(sys.argv[4]), "standby_cpu_s": float(sys.argv[5]),
                  "heads_cpu_ms_per_version": round(1000 * cpu / versions, 3) if versions else None}))
PY
}

: >"$dir/runs.jsonl"
for ((r = 1; r <= runs; r++)); do
  run_once none "$daemon" | tee -a "$dir/runs.jsonl"
  run_once standby "$daemon" | tee -a "$dir/runs.jsonl"
  [[ -n $other ]] && run_once standby_other "$other" | tee -a "$dir/runs.jsonl"
done
python3 - "$dir/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [r for r in map(json.loads, open(sys.argv[1])) if "failed" not in r]
med, cpu = {}, {}
for v in sorted({r["variant"] for r in runs}):
    med[v] = statistics.median(r["elapsed_s"] for r in runs if r["variant"] == v)
    cpu[v] = statistics.median(r["heads_cpu_ms_per_version"] for r in runs if r["variant"] == v)
print(json.dumps({"bench": "standby_cost", "runs": len(runs), "median_elapsed_s": med,
                  "ratio_to_none": {v: round(t / med["none"], 3) for v, t in med.items()},
                  "median_heads_cpu_ms_per_version": cpu}))
PY
