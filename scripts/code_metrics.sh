#!/usr/bin/env bash
# Size figures of the non-test sources (git ls-files '*.cc' '*.h' '*.cu', not tests/), to
# compare a tree before and after a clean-up: the number of functions, their median length,
# the share over 50 lines, the ten longest, those over 80 lines, the .cc files over 700
# lines and, when the `duplicates` tool is on PATH, its count of duplicate pairs.
#   code_metrics.sh [--json] [--repo DIR]   (DIR: a checkout, default this one)
# Functions are universal-ctags' C++ function definitions (kind f), a length being
# end - start + 1 lines; lambdas (ctags' __anon... entries) are inside them and not counted.
set -euo pipefail

json=0
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
while [[ $# -gt 0 ]]; do
  case $1 in
    --json) json=1; shift ;;
    --repo) [[ $# -ge 2 ]] || { echo "code_metrics: --repo needs a folder" >&2; exit 2; }
            repo=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "code_metrics: unknown argument: $1" >&2; exit 2 ;;
  esac
done
ctags --version 2>/dev/null | grep -q "Universal Ctags" || {
  echo "code_metrics: needs universal-ctags (Debian package universal-ctags)" >&2; exit 2; }

cd "$repo"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git ls-files '*.cc' '*.h' '*.cu' | grep -v '^tests/' > "$work/files"
# .cu files are C++ to ctags too.
ctags --kinds-c++=f --fields=+ne --langmap=C++:+.cu -f - -L "$work/files" > "$work/tags"
xargs -d '\n' wc -l < "$work/files" | grep -v ' total$' > "$work/lines" || true

duplicate_pairs=""
duplicates_incomplete=0
if command -v duplicates >/dev/null; then
  # The first line counts the pairs ("no duplicates" when there are none); an
  # "incomplete: ..." line says the time ran out before the whole tree was paired.
  duplicates --repo "$repo" --seconds 120 --most 200 > "$work/duplicates"
  grep -q '^incomplete:' "$work/duplicates" && duplicates_incomplete=1
  first=$(head -1 "$work/duplicates")
  if [[ $first == "no duplicates"* ]]; then
    duplicate_pairs=0
  else
    duplicate_pairs=$(grep -oE '^[^0-9]*[0-9]+' <<< "$first" | grep -oE '[0-9]+$' || true)
  fi
fi

python3 - "$work/tags" "$work/lines" "$json" "$(git rev-parse --short HEAD)" \
  "$duplicate_pairs" "$duplicates_incomplete" <<'PY'
import json, statistics, sys

tags_path, lines_path, as_json, commit, dups, dups_incomplete = sys.argv[1:7]
functions = []
for row in open(tags_path, encoding="utf-8", errors="replace"):
    cols = row.rstrip("\n").split("\t")
    name, path = cols[0], cols[1]
    if name.startswith("__anon"):
        continue  # a lambda: part of the function around it
    fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
    if "line" not in fields or "end" not in fields:
        continue  # a declaration's tag has no end
    scope = next((fields[k] for k in ("class", "struct", "union") if k in fields), "")
    qualified = scope.split("::")[-1] + "::" + name if scope else name
    functions.append({"length": int(fields["end"]) - int(fields["line"]) + 1, "file": path,
                      "line": int(fields["line"]), "name": qualified})
functions.sort(key=lambda f: (-f["length"], f["file"], f["line"]))
lengths = [f["length"] for f in functions]
long_files = []
for row in open(lines_path):
    count, path = row.split(None, 1)
    path = path.strip()
    if path.endswith(".cc") and int(count) > 700:
        long_files.append({"lines": int(count), "file": path})
long_files.sort(key=lambda f: -f["lines"])

m = {
    "commit": commit,
    "functions": len(functions),
    "median_length": round(statistics.median(lengths), 1) if lengths else 0,
    "share_over_50_lines": round(sum(n > 50 for n in lengths) / len(lengths), 4) if lengths else 0,
    "longest": functions[:10],
    "over_80_lines": [f for f in functions if f["length"] > 80],
    "cc_files_over_700_lines": long_files,
    "duplicate_pairs": int(dups) if dups else None,
    "duplicates_incomplete": dups_incomplete == "1",
}
if as_json == "1":
    print(json.dumps(m, indent=2))
    sys.exit(0)
print(f"code metrics at {m['commit']} (non-test *.cc *.h *.cu)")
print(f"functions: {m['functions']}")
print(f"median length: {m['median_length']:g} lines")
print(f"over 50 lines: {100 * m['share_over_50_lines']:.1f}%")
print("ten longest:")
for f in m["longest"]:
    print(f"  {f['length']:5d}  {f['file']}:{f['line']}  {f['name']}")
print(f"over 80 lines: {len(m['over_80_lines'])}")
for f in m["over_80_lines"]:
    print(f"  {f['length']:5d}  {f['file']}:{f['line']}  {f['name']}")
print(f".cc files over 700 lines: {len(long_files)}")
for f in long_files:
    print(f"  {f['lines']:5d}  {f['file']}")
if m["duplicate_pairs"] is None:
    print("duplicate pairs: (no `duplicates` on PATH)")
else:
    print(f"duplicate pairs: {m['duplicate_pairs']}" +
          (" (incomplete: the time ran out)" if m["duplicates_incomplete"] else ""))
PY
