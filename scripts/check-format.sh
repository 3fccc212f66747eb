#!/usr/bin/env bash
# Lists, as file:line, the lines of C/C++/CUDA files (*.cc *.h *.cu) that clang-format (with
# the repository's .clang-format) would change, and exits 1 when there are any.
#   check-format.sh [--base REV]  only the lines changed since REV (committed or not); REV
#                                 defaults to the merge-base with origin/main, or HEAD~1
#                                 where there is no origin/main (a fresh clone in CI)
#   check-format.sh --all         every line of every tracked file
# CLANG_FORMAT names another binary (the settings are tuned for clang-format 14).
# Fix what it lists with `clang-format -i FILE` (or `git clang-format REV` for changed lines).
set -euo pipefail

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
base=""
all=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --base) [[ $# -ge 2 ]] || usage; base=$2; shift 2 ;;
    --all) all=1; shift ;;
    -h|--help) usage ;;
    *) echo "check-format: unknown argument: $1" >&2; usage ;;
  esac
done

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check-format: $clang_format not found; install it with scripts/install-deps.sh" \
    "(Debian package clang-format) or name it with CLANG_FORMAT=..." >&2
  exit 2
fi
root=$(git rev-parse --show-toplevel)
cd "$root"

# FILE [--lines=a:b ...]: prints file:line for each line clang-format would change: the old
# side of a zero-context diff against its output (an insertion counts as the line above it).
unformatted_lines() {
  local file=$1; shift
  "$clang_format" --style=file "$@" "$file" | diff -U0 "$file" - |
    sed -n 's/^@@ -\([0-9]*\)\(,\([0-9]*\)\)\{0,1\} +.*/\1 \3/p' |
    awk -v f="$file" '{ n = ($2 == "") ? 1 : $2; if (n == 0) { print f ":" ($1 > 0 ? $1 : 1) }
                       for (i = 0; i < n; i++) print f ":" $1 + i }'
}

found=0
report() {  # reads file:line lines, prints them and remembers that there were some
  local line
  while IFS= read -r line; do echo "$line"; found=1; done
}

if [[ $all == 1 ]]; then
  while IFS= read -r f; do
    report < <(unformatted_lines "$f")
  done < <(git ls-files -- '*.cc' '*.h' '*.cu')
else
  if [[ -z $base ]]; then
    if git rev-parse -q --verify origin/main >/dev/null; then
      base=$(git merge-base HEAD origin/main)
    elif git rev-parse -q --verify HEAD~1 >/dev/null; then
      base=HEAD~1
    else
      # A single commit (a shallow clone): all of it is new.
      base=$(git hash-object -t tree /dev/null)
    fi
  fi
  git rev-parse -q --verify "$base^{tree}" >/dev/null || {
    echo "check-format: no such revision: $base" >&2; exit 2; }
  # Changed lines per file: the new side's hunk ranges "+start,count" of a zero-context diff
  # of the working tree against base (deleted files and pure deletions have nothing to check).
  while IFS= read -r f; do
    ranges=()
    while IFS= read -r range; do ranges+=("--lines=$range"); done < <(
      git diff -U0 --no-color "$base" -- "$f" |
        sed -n 's/^@@ -[0-9,]* +\([0-9]*\)\(,\([0-9]*\)\)\{0,1\} @@.*/\1 \3/p' |
        awk '{ n = ($2 == "") ? 1 : $2; if (n > 0) print $1 ":" $1 + n - 1 }')
    [[ ${#ranges[@]} -gt 0 ]] || continue
    report < <(unformatted_lines "$f" "${ranges[@]}")
  done < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.h' '*.cu')
fi

if [[ $found == 1 ]]; then
  echo "check-format: the lines above are not formatted (clang-format -i FILE fixes them)" >&2
  exit 1
fi
echo "check-format: ok"
