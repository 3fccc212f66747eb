#!/usr/bin/env bash
# Configures and builds groupsgd into BUILD_DIR (default: build/). Extra arguments go to
# cmake's configure step (e.g. -DGROUPSGD_SANITIZE=address).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs" -- --no-print-directory >/dev/null || {
  # Show the failing part of the build, not thousands of progress lines.
  cmake --build "$build_dir" -j 1 2>&1 | grep -E -B2 -A12 "error|Error" | head -120
  exit 1
}
echo "build: ok ($build_dir)"
