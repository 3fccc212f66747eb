#!/usr/bin/env bash
# Runs one benchmark: builds (scripts/build.sh), runs it, and tees the JSON lines it prints
# into results/NAME-<UTC timestamp>.jsonl. Exits with the benchmark's status.
#   scripts/bench.sh NAME [--quick] [extra args]
# NAME is straggler (scripts/bench/straggler.sh), pytorch (scripts/bench/pytorch_bench.py),
# lm (scripts/bench/lm_bench.py), crossover (scripts/bench/crossover.py),
# dataplane-netns (scripts/bench/dataplane_netns.sh; root), placement-netns
# (scripts/bench/placement_netns.sh; root), data-allocation
# (scripts/bench/data_allocation.sh), startup (scripts/bench/startup.py), seeds
# (scripts/bench/seeds.sh: the four papers' experiments, docs/seeds.md) or any program
# build/bench/groupsgd-bench-NAME
# (bench/NAME_bench.cc). Set BENCH_NO_BUILD=1 to skip the build, GROUPSGD_RESULTS_DIR to
# write the results elsewhere than results/ (the CTest smoke tests use the build tree).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export BUILD_DIR=${BUILD_DIR:-$root/build}
export GROUPSGD_RESULTS_DIR=${GROUPSGD_RESULTS_DIR:-$root/results}

# Benchmarks: the known ones, then any other bench/*_bench.cc or built program.
names() {
  local f n
  {
    printf '%s\n' straggler pytorch lm crossover dataplane dataplane-netns placement-netns data-allocation startup seeds memory scale kernels trainer-step \
      model-timing
    for f in "$root"/bench/*_bench.cc; do
      [[ -e $f ]] || continue
      n=$(basename "$f" _bench.cc)
      echo "${n//_/-}"
    done
    for f in "$BUILD_DIR"/bench/groupsgd-bench-*; do
      [[ -x $f ]] && basename "$f" | sed 's/^groupsgd-bench-//'
    done
  } | awk '!seen[$0]++'
}

describe() {
  case "$1" in
    straggler) echo "time to target accuracy with one straggler (compute, link, erratic) per mode; plots in docs/img/" ;;
    pytorch) echo "PyTorch example: groupsgd adaptive vs DDP (gloo) with a straggler; binding overhead" ;;
    lm) echo "char-level transformer: groupsgd vs DDP, same sample budget, with/without a straggler" ;;
    crossover) echo "jobs sharing emulated devices: one after the other, at once (policy none), at once (crossover)" ;;
    dataplane) echo "push round trips through a group PS vs plain TCP on loopback; 8-worker step latency" ;;
    dataplane-netns) echo "dataplane between two network namespaces over veth, against iperf3 (root)" ;;
    placement-netns) echo "group PS beside its members or not, two emulated hosts on shaped links (root)" ;;
    data-allocation) echo "data_allocation shards vs ranges with a 4x straggler: time to target, accuracy at a budget" ;;
    startup) echo "a short run's fixed costs: launch to first step, target to exit; dataset cache on/off" ;;
    seeds) echo "the four papers' experiments (Basu, ASHL, Chao, CrossoverScheduler); docs/seeds.md" ;;
    memory) echo "peak resident memory of a central PS and a group PS serving a 25M-parameter model" ;;
    scale) echo "regroup decision time and plan quality for 100 to 10,000 workers" ;;
    kernels) echo "numeric kernels against memory bandwidth" ;;
    trainer-step) echo "training-step samples/s of mlp and cnn, CPU and (with a GPU) CUDA" ;;
    model-timing) echo "milliseconds of one mlp and cnn lossAndGrad at batch 64 on one CPU core" ;;
    *) echo "build/bench/groupsgd-bench-$1" ;;
  esac
}

usage() {
  echo "usage: scripts/bench.sh NAME [--quick] [extra args]"
  echo "Builds, runs the benchmark NAME and writes its JSON lines to results/NAME-<UTC time>.jsonl."
  echo "--quick: a short run that checks the output, not the speed. Benchmarks:"
  local n
  while read -r n; do
    local note=""
    if [[ $n != straggler && $n != pytorch && $n != lm && $n != crossover && $n != dataplane-netns && $n != placement-netns && $n != data-allocation && $n != startup && $n != seeds && ! -e $root/bench/${n//-/_}_bench.cc ]]; then note=" (not in this tree yet)"; fi
    printf '  %-10s %s%s\n' "$n" "$(describe "$n")" "$note"
  done < <(names)
}

if [[ $# -lt 1 ]]; then
  usage >&2
  exit 2
fi
if [[ $1 == --help || $1 == -h ]]; then
  usage
  exit 0
fi
name=$1
shift

if [[ ${BENCH_NO_BUILD:-0} != 1 ]]; then
  "$root/scripts/build.sh" >&2
fi

if [[ $name == straggler ]]; then
  cmd=("$root/scripts/bench/straggler.sh")
elif [[ $name == dataplane-netns ]]; then
  cmd=("$root/scripts/bench/dataplane_netns.sh")
elif [[ $name == placement-netns ]]; then
  cmd=("$root/scripts/bench/placement_netns.sh")
elif [[ $name == data-allocation ]]; then
  cmd=("$root/scripts/bench/data_allocation.sh")
elif [[ $name == startup ]]; then
  cmd=(python3 "$root/scripts/bench/startup.py")
elif [[ $name == seeds ]]; then
  cmd=("$root/scripts/bench/seeds.sh")
elif [[ $name == crossover ]]; then
  cmd=(python3 "$root/scripts/bench/crossover.py")
elif [[ $name == pytorch ]]; then
  cmd=(/usr/bin/python3 "$root/scripts/bench/pytorch_bench.py")
elif [[ $name == lm ]]; then
  cmd=(/usr/bin/python3 "$root/scripts/bench/lm_bench.py")
else
  binary=$BUILD_DIR/bench/groupsgd-bench-$name
  if [[ ! -x $binary ]]; then
    echo "bench: no benchmark '$name' ($binary is missing); see scripts/bench.sh --help" >&2
    exit 2
  fi
  cmd=("$binary")
fi

mkdir -p "$GROUPSGD_RESULTS_DIR"
out="$GROUPSGD_RESULTS_DIR/$name-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
echo "bench: $name $*; JSON lines to $out" >&2
# What it ran on (scripts/bench/machine_info.py): measured before, added to the summary
# (the last line) with the load after.
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
machine=$(mktemp)
trap 'rm -f "$machine"' EXIT
BUILD_DIR=$BUILD_DIR "$py" "$root/scripts/bench/machine_info.py" measure >"$machine" || echo '{}' >"$machine"
status=0
"${cmd[@]}" "$@" | "$py" "$root/scripts/bench/machine_info.py" annotate "$machine" | tee "$out" ||
  status=${PIPESTATUS[0]}
echo "bench: $name exited $status" >&2
exit "$status"
