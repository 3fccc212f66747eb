#!/usr/bin/env bash
# The Debian package (cpack -G DEB): it builds, holds what the units and docs say it
# holds, declares its shared-library dependencies, and lintian reports no error on it.
# Exit 77 (skipped, with the reason) when cpack, dpkg-deb or lintian is missing.
#   deb_lintian_test.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build_dir=$1
command -v lintian >/dev/null || { echo "SKIP: lintian is not installed (Debian package lintian)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT

rc=0
deb=$("$here/build_deb.sh" "$build_dir" "$work") || rc=$?
[[ $rc -eq 0 ]] || exit $rc
echo "package: $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Contents: programs, units, sysusers, operator scripts, docs.
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/groupsgdd ./usr/bin/groupsgdctl ./usr/bin/groupsgd-worker \
         ./usr/lib/systemd/system/groupsgdd.service \
         ./usr/lib/systemd/system/groupsgd-worker@.service \
         ./usr/lib/systemd/system/groupsgd-evaluator.service \
         ./usr/lib/systemd/system/groupsgd-node.service \
         ./usr/lib/sysusers.d/groupsgd.conf \
         ./usr/share/groupsgd/scripts/add-worker.sh ./usr/share/groupsgd/scripts/drain-worker.sh \
         ./usr/share/doc/groupsgd/operations.md ./usr/share/doc/groupsgd/copyright \
         ./usr/share/doc/groupsgd/changelog.gz; do
  grep -qxF "$f" <<<"$contents" || fail "$f is not in the package"
done
# Maintainer scripts: the user is created on configure.
dpkg-deb -I "$deb" postinst | grep -q 'systemd-sysusers groupsgd.conf' || fail "postinst does not create the user"
# Dependencies from dpkg-shlibdeps: at least ZeroMQ and the C++ runtime.
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
grep -q 'libzmq5' <<<"$depends" || fail "Depends lacks libzmq5"
grep -q 'libstdc++6' <<<"$depends" || fail "Depends lacks libstdc++6"

# lintian: no error. Warnings are printed (docs/operations.md lists the accepted ones).
report=$work/lintian.txt
lintian_rc=0
lintian --tag-display-limit 0 "$deb" >"$report" 2>&1 || lintian_rc=$?
cat "$report"
if grep -q '^E: ' "$report"; then
  fail "lintian reports errors: $(grep -c '^E: ' "$report")"
fi
# Exit 1 is "error tags" (caught above); anything else non-zero is lintian failing to run.
[[ $lintian_rc -eq 0 ]] || fail "lintian exited $lintian_rc"
echo "OK: lintian reports no error ($(grep -c '^W: ' "$report" || true) warnings)"
