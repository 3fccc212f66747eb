#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test with CTest.
#   scripts/test.sh              unit + process tests
#   scripts/test.sh -L unit      only tests with that CTest label (any ctest argument works)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
export BUILD_DIR=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
cd "$BUILD_DIR"
# Tests start real processes on loopback; two at a time suits a 2-core machine.
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "$@"
