#!/usr/bin/env bash
# Runs groupsgd's GPU checks on a GPU machine from a bundle made by scripts/gpu/bundle.sh:
# the CUDA parity and model tests, the process tests with GPU trainers, compute-sanitizer over the parity tests, the kernels and
# trainer-step benchmarks, and training runs with the trainers on the GPU (the C++ worker,
# and the PyTorch example through a Python module built here for this machine's Python).
# Every step has its own time limit and log; a failed step is reported and the rest still
# run. The last lines printed are a table of steps; results land in --out. Exit status 1
# when any step failed or was skipped for want of time.
#
# usage: scripts/gpu/check.sh [--bundle DIR] [--out DIR] [--quick] [--steps LIST] [--budget S]
#                            [--repeats N]
#   --budget: seconds for all steps together (default 1800); a step gets what is left, and
#            one that would get under 15 s is skipped (so a caller's own limit is kept)
#   --steps: comma-separated subset of env,tests,process,sanitizer,kernels,trainer,python,
#            pytest (needs python),demo-cpp,
#            demo-torch,demo-torch-cpu,demo-cpu (default all)
#   --repeats: runs of each training step (default 1; time-to-accuracy wants a median of 3)
# Environment: GROUPSGD_CUDA_LIBS (folders holding libcublas.so.13 and libcudnn.so.9; found
#   under /usr/local, /opt and /usr/lib otherwise), PYTHON (the one with torch; python3).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=$root/.gpu-bundle out=${OUT:-$root/gpu-check-out} quick=0 steps=all budget=1800 repeats=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) bundle=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --steps) steps=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "check: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
# An earlier check's results (its own files only), so none is read for a skipped step.
rm -f "$out"/{env,tests,process,sanitizer,kernels,trainer,python,pytest}.log \
  "$out"/{kernels,trainer_step}.json "$out"/demo-*.{log,json} "$out"/steps.txt
B=$bundle/build
py=${PYTHON:-python3}
want() { [[ $steps == all || ,$steps, == *,${1%-[0-9]*},* ]]; }
results=()
# step NAME LIMIT_S CMD...: runs CMD (a program, or a function of this script) with a time
# limit, its output in $out/NAME.log.
step() {
  local name=$1 limit=$2; shift 2
  # timeout runs programs: a function goes through a shell that is given its definition.
  declare -F "$1" >/dev/null && set -- bash -c "$(declare -f "$1"); $1"
  want "$name" || return 0
  local t0=$SECONDS rc=0 left=$((budget - SECONDS - 5))
  (( left < limit )) && limit=$left
  if (( limit < 15 )); then results+=("$(printf '%-12s skipped: budget spent' "$name")"); return 0; fi
  echo "== $name" >&2
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  results+=("$(printf '%-12s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - t0)))")
  tail -n 3 "$out/$name.log" | cut -c1-240 >&2
  return 0
}

# Libraries: the bundle's, then cuBLAS/cuDNN/cudart of this machine.
[[ -f $bundle/payload.tar.xz && ! -f $bundle/.unpacked ]] &&
  tar -xJf "$bundle/payload.tar.xz" -C "$bundle" && touch "$bundle/.unpacked"
cuda_libs=${GROUPSGD_CUDA_LIBS:+:$GROUPSGD_CUDA_LIBS}
if [[ -z $cuda_libs ]]; then
  for lib in libcublas.so.13 libcudnn.so.9 libcudart.so.13; do
    d=$(find /usr/local /opt /usr/lib -name "$lib" -not -path '*/stubs/*' 2>/dev/null | head -1)
    [[ -n $d ]] && cuda_libs+=:$(dirname "$d")
  done
fi
# The tests start the daemon and the worker by the paths they were built with.
build_path=$(cat "$bundle/build-path" 2>/dev/null)
if [[ -n $build_path && ! -e $build_path ]]; then
  mkdir -p "$(dirname "$build_path")" && ln -s "$B" "$build_path"
fi
export LD_LIBRARY_PATH=$bundle/lib${cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GROUPSGD_GPU_MODELS_LIB=$B/kernels/libgroupsgd-gpu-models.so
export OPENBLAS_NUM_THREADS=1
# The workers read Fashion-MNIST from its Debian path.
data=/usr/share/datasets/fashion-mnist
if [[ ! -f $data/train-images-idx3-ubyte.gz && -d $bundle/fashion-mnist ]]; then
  mkdir -p "$data" && cp "$bundle"/fashion-mnist/*.gz "$data/"
fi

env_report() {
  echo "bundle commit: $(cat "$bundle/commit" 2>/dev/null)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  nproc; uname -r
  "$py" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())'
  ldd "$B/kernels/libgroupsgd-gpu-models.so" | grep -E "not found|cublas|cudnn|cudart"
}
export B bundle root py out  # read by the step functions
step env 60 env_report

# On a GPU nothing may be skipped: --no-skip runs the cases that skip themselves without a
# GPU, so a machine whose GPU the tests cannot use fails here.
cuda_tests() {
  "$B/tests/kernels/test_kernels_cuda" --no-skip &&
    "$B/tests/kernels/test_kernels_cuda_models" --no-skip
}
step tests 300 cuda_tests

q=(); (( quick )) && q=(--quick)
step kernels 300 bash -c "'$B/bench/groupsgd-bench-kernels' ${q[*]} > '$out/kernels.json'"
step trainer 300 bash -c "'$B/bench/groupsgd-bench-trainer-step' ${q[*]} > '$out/trainer_step.json'"

# The Python module for this machine's Python: module.cc against the bundled archives.
build_python() {
  local inc ext
  inc=$("$py" -m pybind11 --includes) || return 1
  ext=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') || return 1
  # shellcheck disable=SC2086  # $inc is a list of -I flags
  g++ -O2 -fPIC -shared -fvisibility=hidden -std=c++20 -DNDEBUG \
    -DGROUPSGD_HAVE_CUDA -DGROUPSGD_HAVE_OPENBLAS \
    -I"$root/python/src" -I"$root/worker/include" -I"$root/client/include" \
    -I"$root/common/include" -I"$root/codec/include" -I"$root/kernels/include" \
    -I"$root/dataset/include" -I"$bundle/include/schemas-gen" -isystem "$bundle/include" $inc \
    "$root/python/src/module.cc" -o "$B/python/groupsgd/_core$ext" \
    -Wl,--start-group "$bundle"/ar/*.a -Wl,--end-group \
    -L"$bundle/lib" -l:libopenblas.so.0 -l:libz.so.1 -l:libcapnp-0.9.2.so -l:libkj-0.9.2.so \
    -l:libzmq.so.5 -l:libcudart.so.13 -ldl -lpthread &&
    PYTHONPATH=$B/python "$py" -c 'import groupsgd; print("groupsgd module ok", groupsgd.__file__)'
}
step python 300 build_python

# The PyTorch worker with its model on CUDA against the same worker on the CPU (pytest).
torch_cuda_tests() {
  cd "$root/tests/python" && PYTHONPATH=$B/python GROUPSGDD=$B/daemon/groupsgdd \
    GROUPSGDCTL=$B/daemon/groupsgdctl GROUPSGD_WORKER=$B/worker/groupsgd-worker \
    GROUPSGD_SOURCE_DIR=$root "$py" -m pytest -q -p no:cacheprovider -o addopts= \
    -rs test_torch_cuda.py 2>&1 | tee /dev/stderr | grep -Eq '^[0-9]+ passed(, [0-9]+ warnings?)? in'
}
step pytest 200 torch_cuda_tests

demo() {  # demo NAME ARGS...: scripts/demo.sh on the bundle, --repeats times, JSON kept
  local name=$1 r run_dir; shift
  want "$name" || return 0
  for r in $(seq 1 "$repeats"); do
    step "$name-$r" 110 env BENCH_NO_BUILD=1 BUILD_DIR="$B" GROUPSGD_PYTHON="$(command -v "$py")" \
      "$root/scripts/demo.sh" --json --max-seconds 90 "$@"
    [[ -f $out/$name-$r.log ]] || continue
    tail -n 1 "$out/$name-$r.log" >"$out/$name-$r.json"
    # The trainers' and the evaluator's own logs, for a run that went wrong.
    run_dir=$(grep -o 'logs in [^ ]*' "$out/$name-$r.log" | head -1 | cut -d' ' -f3)
    [[ -n $run_dir ]] && tail -n 15 "$run_dir"/worker-1.log "$run_dir"/evaluator.log \
      >"$out/$name-$r.workers.log" 2>&1
  done
}
# The PyTorch example first: it is the one only a GPU machine can check.
demo demo-torch --trainer pytorch --torch-model cnn --mode adaptive --workers 4 --stragglers 1 \
  --slowdown 4 --device-ms 0 --device cuda --target-acc 0.85
demo demo-torch-cpu --trainer pytorch --torch-model cnn --mode adaptive --workers 4 \
  --stragglers 1 --slowdown 4 --device-ms 0 --device cpu --target-acc 0.85
demo demo-cpp --mode sync --workers 4 --stragglers 0 --device-ms 0 --device cuda \
  --target-acc 0.85 --daemon-args "--model cnn"
demo demo-cpu --mode sync --workers 4 --stragglers 0 --device-ms 0 --device cpu \
  --target-acc 0.85 --daemon-args "--model cnn"
# The daemon with --device cuda trainers (test_process's GPU cases) and the worker's
# --device handling with a GPU present (test_worker_device_cli).
gpu_process_tests() {
  "$B/tests/process/test_process" -tc='*GPU*' --no-skip &&
    "$B/tests/worker/test_worker_device_cli" --no-skip
}
step process 300 gpu_process_tests
sanitize() {  # memcheck over the parity tests and the CUDA models' tests
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/kernels/test_kernels_cuda" &&
    compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/kernels/test_kernels_cuda_models"
}
step sanitizer 300 sanitize

# The figures worth reading first.
for f in "$out"/kernels.json "$out"/trainer_step.json; do
  [[ -s $f ]] && echo "$(basename "$f"): $(tail -n 1 "$f")" | cut -c1-900 >&2
done
for f in "$out"/demo-*.json; do
  [[ -s $f ]] || continue
  echo "$(basename "$f"): $(grep -o '"\(reached\|time_to_target_s\|final_test_acc\|accounting_ok\|samples_trained\|stop_reason\)":[^,]*' "$f" | tr '\n' ' ')" >&2
done

echo "== results ($out)" >&2
printf '%s\n' "${results[@]}" | tee "$out/steps.txt"
# Exit 1 when a step failed or was skipped for want of time (the table says which).
! grep -qv ' rc=0 ' "$out/steps.txt"
