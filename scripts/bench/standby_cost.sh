#!/usr/bin/env bash
# What a synchronous standby costs (docs/reliability.md "Standby head", docs/benchmarks.md):
# a role-all head and two trainers (--device-ms 3) to a 60,000-sample budget on loopback,
# without a standby and with one (`--replication-listen` on the head, a `--role standby`
# process beside it), the variants interleaved run by run so that the machine's drift
# falls on all of them alike. With --other-daemon PATH a third variant runs the standby
# pair from another groupsgdd build (e.g. the one before a change).
#
#   standby_cost.sh [--runs N] [--other-daemon PATH]
#
# One JSON line per run (variant, elapsed_s, versions, mean_ack_wait_ms), then a summary
# line with each variant's median elapsed_s and its ratio to the median without a
# standby. Binaries from BUILD_DIR (default build/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
daemon=$build/daemon/groupsgdd worker=$build/worker/groupsgd-worker
runs=5 other=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=${2:-}; shift 2 ;;
    --other-daemon) other=${2:-}; shift 2 ;;
    *) echo "standby_cost.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "standby_cost.sh: --runs takes a positive number, not '$runs'" >&2; exit 2; }
[[ -x $daemon && -x $worker ]] || { echo "standby_cost.sh: build first (no $daemon or $worker)" >&2; exit 1; }
[[ -z $other || -x $other ]] || { echo "standby_cost.sh: --other-daemon '$other' is not an executable" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-standby-cost.XXXXXX")
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

run_once() {  # run_once VARIANT DAEMON: one JSON line
  local variant=$1 bin=$2 ep rep standby="" i
  ep=tcp://127.0.0.1:$(free_port)
  rm -f "$dir/s.json"
  local head=("$bin" --mode grouped --workers 2 --groups 2 --max-samples 60000 --progress-ms 0)
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
    "$worker" --coordinator "$ep" --name "w$i" --device-ms 3 2>"$dir/w$i.log" &
    pids+=($!)
  done
  wait "$head_pid"
  [[ -n $standby ]] && { kill -TERM "$standby" 2>/dev/null; wait "$standby" 2>/dev/null || true; }
  wait
  pids=()
  python3 - "$dir/s.json" "$dir/head.log" "$variant" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))
m = re.search(r"standby link at the end: (\{.*\})", open(sys.argv[2]).read())
link = json.loads(m.group(1)) if m else {}
print(json.dumps({"bench": "standby_cost_run", "variant": sys.argv[3], "elapsed_s": s.get("elapsed_s"),
                  "versions": s.get("central_version"), "samples_trained": s.get("samples_trained"),
                  "mean_ack_wait_ms": link.get("mean_ack_wait_ms")}))
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
runs = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for v in sorted({r["variant"] for r in runs}):
    med[v] = statistics.median(r["elapsed_s"] for r in runs if r["variant"] == v)
print(json.dumps({"bench": "standby_cost", "runs": len(runs), "median_elapsed_s": med,
                  "ratio_to_none": {v: round(t / med["none"], 3) for v, t in med.items()}}))
PY
