#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test with CTest.
#   scripts/test.sh              the format check, then unit + process tests
#   scripts/test.sh -L unit      only tests with that CTest label (any ctest argument works)
#   scripts/test.sh --sanitize   instead: the unit tests (label unit: test_cluster's threads
#                                and sockets and the fuzz corpora included) under ASan+UBSan
#                                in build-asan/, then under TSan in build-tsan/ (CUDA off;
#                                only the test targets are built); docs/reliability.md
#   scripts/test.sh --sanitize=address|thread   one of the two
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"

if [[ "${1:-}" == --sanitize || "${1:-}" == --sanitize=* ]]; then
  kinds=(address thread)
  [[ "$1" == --sanitize=* ]] && kinds=("${1#--sanitize=}")
  shift
  # Sanitizer reports fail the test: ASan and UBSan abort, TSan exits 66 at the end.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$root/tests/tsan.supp:second_deadlock_stack=1:history_size=4}
  for kind in "${kinds[@]}"; do
    case "$kind" in
      address) dir=$root/build-asan ;;
      thread) dir=$root/build-tsan ;;
      *) echo "test.sh: --sanitize takes address or thread, not '$kind'" >&2; exit 2 ;;
    esac
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGROUPSGD_SANITIZE="$kind" \
      -DGROUPSGD_WITH_CUDA=OFF >/dev/null
    # Build only what the unit tests run: their executables are named like the tests.
    mapfile -t targets < <(cd "$dir" && ctest -N -L unit 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
    targets=("${targets[@]/%_corpus/_replay}")
    cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" -- --no-print-directory >/dev/null || {
      cmake --build "$dir" -j 1 --target "${targets[@]}" 2>&1 | grep -E -B2 -A12 "error|Error" | head -120
      exit 1
    }
    echo "build: ok ($dir, $kind sanitizer, ${#targets[@]} test targets)"
    (cd "$dir" && ctest --output-on-failure -L unit -j "${TEST_JOBS:-2}" "$@")
  done
  exit 0
fi

export BUILD_DIR=${BUILD_DIR:-$root/build}
# Formatting first (a second): every C/C++/CUDA line as the root .clang-format has it.
# (In a git checkout only; a source tarball has nothing to compare with.)
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  "$root/scripts/check-format.sh" --all
fi
"$root/scripts/build.sh"
cd "$BUILD_DIR"
# Tests start real processes on loopback; two at a time suits a 2-core machine.
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "$@"
