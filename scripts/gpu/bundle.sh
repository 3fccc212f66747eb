#!/usr/bin/env bash
# Packs what the GPU checks need into one folder that runs on a GPU machine without
# groupsgd's build dependencies (ZeroMQ, Cap'n Proto, OpenBLAS, ...): the programs and
# tests from a CUDA build, stripped; the shared libraries they load that a stock CUDA image
# lacks; the static libraries, headers and sources that build the Python module
# there for that machine's own Python (all of these in one xz archive, a third of their size,
# for copying to a machine with a transfer limit); and the Fashion-MNIST files. scripts/gpu/check.sh
# runs it. cuBLAS and cuDNN are not packed (hundreds of MB): check.sh takes the target
# machine's own (CUDA 13, cuDNN 9: the versions this build links); the CUDA runtime
# (libcudart, under 1 MB) is.
#
# usage: scripts/gpu/bundle.sh [--build-dir DIR] [--out DIR]   (default build, .gpu-bundle)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build out=$root/.gpu-bundle
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "bundle: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -f $build/kernels/libgroupsgd-gpu-models.so ]] || {
  echo "bundle: $build has no CUDA models (configure where nvcc, cuBLAS and cuDNN are found)" >&2
  exit 2
}
# Replaced only if it is an earlier bundle (or empty): --out never deletes anything else.
if [[ -e $out && ! -f $out/payload.tar.xz && -n $(ls -A "$out" 2>/dev/null) ]]; then
  echo "bundle: $out exists and is not a bundle; choose another --out" >&2
  exit 2
fi
rm -rf "$out"
final=$out out=$out/pack
mkdir -p "$out"/build/{daemon,worker,bench,kernels,python/groupsgd,tests/{kernels,process,worker}} "$out"/ar \
  "$out"/include "$out"/lib "$final"/fashion-mnist

# Programs, stripped of debug information (the RelWithDebInfo build is ~10x larger).
for f in daemon/groupsgdd daemon/groupsgdctl worker/groupsgd-worker \
         bench/groupsgd-bench-kernels bench/groupsgd-bench-trainer-step \
         tests/kernels/test_kernels tests/kernels/test_kernels_cuda \
         tests/kernels/test_kernels_cuda_models tests/process/test_process \
         tests/worker/test_worker_device_cli kernels/libgroupsgd-gpu-models.so; do
  strip --strip-debug -o "$out/build/$f" "$build/$f"
done
cp "$root"/python/groupsgd/*.py "$out/build/python/groupsgd/"

# The Python module is built on the target (its Python may differ from this one's): the
# archives its link line names, compiled -fPIC here, and the headers module.cc reaches.
for a in python/libgroupsgd_python_session.a worker/libgroupsgd_worker.a \
         client/libgroupsgd_client.a codec/libgroupsgd_codec.a kernels/libgroupsgd_kernels.a \
         dataset/libgroupsgd_dataset.a arbiter/libgroupsgd_arbiter.a \
         common/libgroupsgd_common.a schemas/libgroupsgd_schemas.a; do
  strip --strip-debug -o "$out/ar/$(basename "$a")" "$build/$a"
done
cp -r "$build/schemas/gen" "$out/include/schemas-gen"
cp -r /usr/include/kj /usr/include/capnp /usr/include/zmq.h /usr/include/zmq.hpp "$out/include/"
# Cap'n Proto 0.9's blob.h compares `const char* == kj::StringPtr`, which GCC 13 in C++20
# mode no longer resolves; the reversed comparison is the same test and compiles anywhere.
sed -i 's/{ return a == b.asString(); }/{ return b.asString() == a; }/;
        s/{ return a != b.asString(); }/{ return b.asString() != a; }/' "$out/include/capnp/blob.h"

# Shared libraries the programs load, less the C/C++ runtime and CUDA's own (ldd's view).
ldd "$build/worker/groupsgd-worker" "$build/daemon/groupsgdd" \
    "$build/kernels/libgroupsgd-gpu-models.so" |
  awk '/=> \// {print $1, $3}' | sort -u |
  while read -r name path; do
    case $name in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libstdc++.so*|\
      libgcc_s.so*|libcublas*|libcudnn*) continue ;;
    esac
    cp -L "$path" "$out/lib/$name"
  done
git -C "$root" rev-parse --short HEAD >"$out/commit" 2>/dev/null || true
# The tests find the programs by the paths they were built with: check.sh links this one.
echo "$build" >"$out/build-path"
if ! (cd "$out" && XZ_OPT=-T0 tar -cJf "$final/payload.tar.xz" build ar include lib commit \
      build-path); then
  echo "bundle: packing $final/payload.tar.xz failed" >&2
  exit 1
fi
rm -rf "$out"

cp /usr/share/datasets/fashion-mnist/*.gz "$final/fashion-mnist/"
du -sh "$final" >&2
