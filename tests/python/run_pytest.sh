#!/usr/bin/env bash
# Runs pytest from Debian's python3-pytest on the given test files with the groupsgd
# package of the build tree. Exit 77 (CTest: Skipped) only when torch or pytest is
# genuinely not installed; any other failure fails the test.
set -euo pipefail
python=${GROUPSGD_PYTHON:-/usr/bin/python3}
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "SKIP: python3-torch is not installed for $python (scripts/install-deps.sh installs it)"
  exit 77
fi
if ! "$python" -c "import pytest" 2>/dev/null; then
  echo "SKIP: python3-pytest is not installed for $python"
  exit 77
fi
cd "$(dirname "${BASH_SOURCE[0]}")"
exec "$python" -m pytest -q -p no:cacheprovider -o addopts= "$@"
