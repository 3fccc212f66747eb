#!/usr/bin/env bash
# Builds the Debian package of a configured and built tree with cpack into OUT_DIR and
# prints the .deb's path. Exit 77 (skipped) when cpack or dpkg-deb is missing.
#   build_deb.sh BUILD_DIR OUT_DIR
set -euo pipefail
build_dir=$1 out_dir=$2
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed" >&2; exit 77; }
done
mkdir -p "$out_dir"
# -B: the package and cpack's staging tree go to OUT_DIR, not into the build tree.
if ! (cd "$build_dir" && cpack -G DEB -B "$out_dir") >"$out_dir/cpack.log" 2>&1; then
  echo "cpack -G DEB failed:" >&2
  tail -30 "$out_dir/cpack.log" >&2
  exit 1
fi
debs=("$out_dir"/groupsgd_*.deb)
[[ -f ${debs[0]} ]] || { echo "cpack wrote no groupsgd_*.deb into $out_dir" >&2; exit 1; }
echo "${debs[0]}"
