#!/usr/bin/env bash
# scripts/soak.sh against stand-in test binaries: a passing run leaves nothing behind, a
# failing run keeps its log and its test directory (with the crash report the daemon
# would write), the summary line counts both, the exit status says whether any failed,
# and bad arguments are refused.
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fails=$((fails + 1)); fi; }

mkdir -p "$work/build"
cat > "$work/build/pass" <<'BIN'
#!/bin/sh
mktemp -d "$TMPDIR/groupsgd-test.XXXXXX" >/dev/null && echo "passing ($1)"
BIN
cat > "$work/build/crash" <<'BIN'
#!/bin/sh
d=$(mktemp -d "$TMPDIR/groupsgd-test.XXXXXX")
echo "groupsgdd: fatal signal 11 (SIGSEGV)" > "$d/daemon.log"
echo "failing ($1)"; exit 1
BIN
chmod +x "$work/build/pass" "$work/build/crash"

BUILD_DIR=$work/build bash "$root/scripts/soak.sh" --runs 3 --no-hog --out "$work/ok" 'pass:a case' \
  > "$work/ok.txt" 2>&1
rc=$?
check "all runs passed: exit 0" "[[ $rc == 0 ]]"
check "summary counts 3 runs, 0 failed" "tail -1 '$work/ok.txt' | grep -q '\"runs\": 3, \"failed\": 0, \"crash_reports\": 0'"
check "passed runs leave no log or directory" "[[ -z \$(ls '$work/ok') ]]"

BUILD_DIR=$work/build bash "$root/scripts/soak.sh" --runs 2 --no-hog --out "$work/bad" pass:x crash:y \
  > "$work/bad.txt" 2>&1
rc=$?
check "a failed run: exit 1" "[[ $rc == 1 ]]"
check "summary counts 4 runs, 2 failed, 2 crash reports" "tail -1 '$work/bad.txt' | grep -q '\"runs\": 4, \"failed\": 2, \"crash_reports\": 2'"
check "the failed runs' logs are kept" "[[ -f '$work/bad/c2r1.log' && -f '$work/bad/c2r2.log' ]]"
check "the failed run's log names its case and status" "grep -q \"crash -tc='y'\" '$work/bad/c2r1.log' && grep -q '^rc=1$' '$work/bad/c2r1.log'"
check "the failed runs' test directories keep the crash report" "grep -rq 'fatal signal' '$work/bad/c2r1.d'"
check "the passed case left nothing" "[[ ! -e '$work/bad/c1r1.log' && ! -e '$work/bad/c1r1.d' ]]"

bash "$root/scripts/soak.sh" --runs 0 > "$work/e1.txt" 2>&1
check "--runs 0 is refused with exit 2" "[[ $? == 2 ]] && grep -q 'positive integer' '$work/e1.txt'"
bash "$root/scripts/soak.sh" --bogus > "$work/e2.txt" 2>&1
check "an unknown option is refused with exit 2" "[[ $? == 2 ]] && grep -q 'unknown option' '$work/e2.txt'"
BUILD_DIR=$work/build bash "$root/scripts/soak.sh" --no-hog --out "$work/nb" missing:z > "$work/e3.txt" 2>&1
check "a test binary that is not built is named, exit 2" "[[ $? == 2 ]] && grep -q 'missing is not built' '$work/e3.txt'"

[[ $fails == 0 ]] && echo "soak_script: all checks passed" || { echo "soak_script: $fails failed"; exit 1; }
