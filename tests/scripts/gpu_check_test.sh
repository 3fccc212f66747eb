#!/usr/bin/env bash
# scripts/gpu/bundle.sh and scripts/gpu/check.sh, as far as a machine without a GPU can take
# them: the bundle holds what it promises (programs, libraries, archives, the patched
# Cap'n Proto header), the Python module builds from it and imports, a CPU training run
# from the bundle reaches its target with its accounting right, and the GPU tests step
# fails here (a GPU check that passes without a GPU would prove nothing). Exit 77 (skipped)
# in a build without the CUDA models.
set -uo pipefail
root=$1
# shellcheck source=tests/scripts/check_lib.sh
source "$root/tests/scripts/check_lib.sh"
build=${GROUPSGD_BUILD_DIR:-$root/build}
if [[ ! -f $build/kernels/libgroupsgd-gpu-models.so ]]; then
  echo "skipped: this build has no CUDA models (libgroupsgd-gpu-models.so)"; exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$work/log

check "bundle.sh builds the bundle" "$root/scripts/gpu/bundle.sh" --build-dir "$build" \
  --out "$work/b" 2>>"$log"
listing=$(tar -tJf "$work/b/payload.tar.xz" 2>>"$log")
for f in build/daemon/groupsgdd build/worker/groupsgd-worker build/tests/kernels/test_kernels_cuda \
         build/kernels/libgroupsgd-gpu-models.so lib/libzmq.so.5 lib/libopenblas.so.0 \
         ar/libgroupsgd_worker.a include/capnp/blob.h build-path; do
  check "the bundle holds $f" grep -qx "$f" <<<"$listing"
done
check "the bundle has no cuBLAS or cuDNN" bash -c "! grep -q 'libcublas\|libcudnn' <<<'$listing'"
check "the dataset is in the bundle" test -s "$work/b/fashion-mnist/train-images-idx3-ubyte.gz"

PYTHON=/usr/bin/python3 "$root/scripts/gpu/check.sh" --bundle "$work/b" --out "$work/o" \
  --steps tests,python,demo-cpu --budget 170 >>"$log" 2>&1
steps=$(cat "$work/o/steps.txt" 2>/dev/null)
echo "$steps"
check "blob.h's comparison is the reversed one" \
  grep -q 'return b.asString() == a;' "$work/b/include/capnp/blob.h"
check "the Python module built from the bundle imports" grep -q '^python *rc=0 ' <<<"$steps"
check "the CPU run from the bundle ended normally" grep -q '^demo-cpu-1 *rc=0 ' <<<"$steps"
summary=$(tail -n 1 "$work/o/demo-cpu-1.json" 2>/dev/null)
check "it reached its target with its accounting right" \
  json_has "${summary:-x}" "reached" "accounting_ok" "samples_unaccounted == 0"
if nvidia-smi -L >/dev/null 2>&1; then
  check "with a GPU the CUDA tests pass" grep -q '^tests *rc=0 ' <<<"$steps"
else
  check "without a GPU the CUDA tests step fails" grep -Eq '^tests *rc=[1-9]' <<<"$steps"
fi
finish gpu_check_script "$log"
