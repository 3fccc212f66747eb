# Shared by the scripts' tests (sourced): named checks, a JSON line's fields, the verdict.
fails=0
check() {  # check WHAT COMMAND...: runs COMMAND, counts a failure when it fails
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what" >&2; fails=$((fails + 1)); fi
}
# json_has LINE COND...: every COND (a Python expression over the JSON object's keys, e.g.
# "deaths == 1") holds; prints the ones that do not.
json_has() {
  python3 - "$@" <<'PY'
import json, sys
try:
    r = json.loads(sys.argv[1])
except ValueError:
    print(f"not a JSON line: {sys.argv[1]!r}")
    sys.exit(1)
bad = [c for c in sys.argv[2:] if not eval(c, {}, dict(r))]
print("\n".join(f"does not hold: {c}" for c in bad) or "json ok: " + sys.argv[1])
sys.exit(1 if bad else 0)
PY
}
# finish NAME [LOG]: the verdict; on failure the tail of LOG goes to stderr first.
finish() {
  if (( fails > 0 )) && [[ -n ${2:-} && -f $2 ]]; then
    echo "--- $2:" >&2
    tail -30 "$2" >&2
  fi
  [[ -n ${2:-} ]] && rm -f "$2"
  (( fails == 0 )) && echo "$1: all checks passed"
  exit $(( fails > 0 ))
}
