#!/usr/bin/env bash
# Runs clang-tidy (checks in .clang-tidy) over the non-test sources that
# BUILD_DIR/compile_commands.json lists (BUILD_DIR defaults to build/), in parallel, and
# exits 1 when it reports anything.
#   tidy.sh [FILE|FOLDER ...]   only those sources (paths from the repository root or the
#                               current directory), e.g. tidy.sh common kernels/src/ops.cc
# Needs a configured build whose generated headers exist (cmake --build build --target
# groupsgd_schemas). JOBS sets the parallelism (default: nproc); CLANG_TIDY another binary.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
clang_tidy=${CLANG_TIDY:-clang-tidy}
jobs=${JOBS:-$(nproc)}

command -v "$clang_tidy" >/dev/null || {
  echo "tidy: $clang_tidy not found (Debian package clang-tidy)" >&2; exit 2; }
[[ -f $build_dir/compile_commands.json ]] || {
  echo "tidy: no $build_dir/compile_commands.json; configure the build first" >&2; exit 2; }

# The arguments as absolute paths (a folder ends in / so that it matches its files only).
wanted=()
for arg in "$@"; do
  path=$(realpath -m "$arg")
  [[ -e $path ]] || path=$(realpath -m "$root/$arg")
  [[ -e $path ]] || { echo "tidy: no such file or folder: $arg" >&2; exit 2; }
  [[ -d $path ]] && path=${path%/}/
  wanted+=("$path")
done

# Sources of the project (not tests/, not generated files in the build folder; not the CUDA
# files either: clang 14 knows CUDA up to 11.5, not the newer headers nvcc uses here).
mapfile -t files < <(python3 - "$build_dir/compile_commands.json" "$root" "${wanted[@]}" <<'PY'
import json, os, sys
db, root, wanted = sys.argv[1], sys.argv[2].rstrip("/") + "/", sys.argv[3:]
seen = set()
for entry in json.load(open(db)):
    f = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    rel = f[len(root):] if f.startswith(root) else None
    if rel is None or rel.startswith(("tests/", "build")) or f.endswith(".cu") or f in seen:
        continue
    if wanted and not any(f == w or (w.endswith("/") and f.startswith(w)) for w in wanted):
        continue
    seen.add(f)
    print(f)
PY
)
[[ ${#files[@]} -gt 0 ]] || { echo "tidy: no sources to check" >&2; exit 2; }
echo "tidy: ${#files[@]} sources, $jobs at a time" >&2

# Findings in the project's own headers too (include/groupsgd/..., src/*.h, bench/*.h),
# not in the system's or in the generated Cap'n Proto headers under the build folder.
header_filter="^$root/(adaptive|arbiter|bench|centralps|client|codec|common|daemon|dataset|groupps|kernels|ops|python|worker)/"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One output file per source (parallel runs would interleave their lines on one pipe);
# GCC-only warning flags in the compile commands mean nothing to clang: not findings.
export clang_tidy build_dir header_filter out
printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P "$jobs" bash -c '
  "$clang_tidy" -p "$build_dir" --quiet --header-filter="$header_filter" \
    --extra-arg=-Wno-unknown-warning-option "$1" > "$out/$(echo "$1" | tr / _).txt" 2>/dev/null
  true' _
# Each finding once (a header's is reported by every source that includes it), by file.
grep -hE '^/.*:[0-9]+:[0-9]+: (warning|error):' "$out"/*.txt | sed "s|^$root/||" |
  sort -u | sort -t: -k1,1 -k2,2n -k3,3n > "$out/findings" || true
cat "$out/findings"
findings=$(wc -l < "$out/findings")
if [[ $findings -gt 0 ]]; then
  echo "tidy: $findings findings" >&2
  exit 1
fi
echo "tidy: no findings" >&2
