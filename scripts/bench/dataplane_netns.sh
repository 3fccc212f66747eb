#!/usr/bin/env bash
# The dataplane benchmark between two network namespaces joined by a veth pair, the way
# two hosts would talk, against iperf3 between the same namespaces (docs/benchmarks.md,
# "dataplane between two network namespaces"):
#
#   NS-srv (10.79.0.1/24) --veth-- NS-cli (10.79.0.2/24)
#
# NS-srv runs `groupsgd-bench-dataplane --serve-only` (central PS, group PS, TCP echo) and
# an iperf3 server; NS-cli runs `--connect` (pushing client, central exchange, raw TCP
# round trips) and the iperf3 client, once before and once after the groupsgd run. Prints
# the JSON lines of both, then one summary object (groupsgd, raw TCP and iperf3 GB/s and
# their ratios) as its last line. Namespaces and processes are removed on exit.
#
#   dataplane_netns.sh [--quick] [--mtu N] [--iperf-seconds S] [--sizes 1,16,64]
#                      [--no-latency] [--no-tune-malloc] [--part-kib N] [--seconds S]
#                      [--only tcp,push,k1,exchange]
# --mtu sets both ends of the veth (default: the kernel's, 1500). --sizes, --quick,
# --no-latency and --no-tune-malloc go to both sides, --part-kib to the server, the rest
# to the client. Binary: $BUILD_DIR/bench/groupsgd-bench-dataplane (BUILD_DIR defaults
# to build/). Needs root, ip, ss, iperf3 and python3: exits 77 (skipped) with the reason
# otherwise; 2 on bad arguments; 1 when a measurement failed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../../tests/netns/ns_common.sh
source "$root/tests/netns/ns_common.sh"
bin=${BUILD_DIR:-$root/build}/bench/groupsgd-bench-dataplane

NS="gsgdbench$$"
SRV_IP=10.79.0.1
CLI_IP=10.79.0.2
IPERF_PORT=5201

skip() {
  echo "dataplane-netns: skipped: $*" >&2
  exit 77
}
die() {  # die MESSAGE [EXIT_CODE]
  echo "dataplane-netns: $1" >&2
  exit "${2:-1}"
}

quick=false
mtu=""
iperf_seconds=""
both=() server_only=() client_only=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=true; both+=(--quick) ;;
    --mtu) mtu=${2:-}; shift ;;
    --iperf-seconds) iperf_seconds=${2:-}; shift ;;
    --sizes) both+=(--sizes "${2:-}"); shift ;;
    --no-latency | --no-tune-malloc) both+=("$1") ;;
    --part-kib) server_only+=(--part-kib "${2:-}"); shift ;;
    --seconds | --only) client_only+=("$1" "${2:-}"); shift ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" 2 ;;
  esac
  shift
done
if [[ -n $mtu ]] && ! [[ $mtu =~ ^[0-9]+$ && $mtu -ge 1280 && $mtu -le 65535 ]]; then
  die "--mtu '$mtu': give a number from 1280 to 65535" 2
fi
if [[ -z $iperf_seconds ]]; then iperf_seconds=$($quick && echo 2 || echo 10); fi
[[ $iperf_seconds =~ ^[0-9]+$ && $iperf_seconds -ge 1 ]] ||
  die "--iperf-seconds '$iperf_seconds': give a whole number of seconds >= 1" 2

[[ $(id -u) -eq 0 ]] || skip "network namespaces need root (uid $(id -u))"
for tool in ip ss iperf3 python3; do
  command -v "$tool" >/dev/null || skip "'$tool' is not installed (scripts/install-deps.sh --extra)"
done
[[ -x $bin ]] || die "$bin is missing: build first (scripts/build.sh)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/groupsgd-dataplane-netns.XXXXXX")
PIDS=()
cleanup() {
  local rc=$?
  set +e
  ns_stop_pids ${PIDS[@]+"${PIDS[@]}"}
  ns_delete "$NS"
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for f in "$WORK"/*.log; do
      [[ -s $f ]] && { echo "----- $(basename "$f") (last 20 lines)"; tail -n 20 "$f"; } >&2
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ns_reap_stale gsgdbench

# ---- two "hosts" -----------------------------------------------------------------------
err=$(ip netns add "$NS-srv" 2>&1) || skip "'ip netns add' refused: $err"
err=$(ip netns add "$NS-cli" 2>&1) || skip "'ip netns add' refused: $err"
err=$(ip link add name veth0 netns "$NS-srv" type veth peer name veth0 netns "$NS-cli" 2>&1) ||
  skip "cannot create a veth pair: $err"
ip -n "$NS-srv" addr add "$SRV_IP/24" dev veth0
ip -n "$NS-cli" addr add "$CLI_IP/24" dev veth0
for ns in "$NS-srv" "$NS-cli"; do
  if [[ -n $mtu ]]; then
    err=$(ip -n "$ns" link set dev veth0 mtu "$mtu" 2>&1) || die "the veth refused mtu $mtu: $err" 2
  fi
  ip -n "$ns" link set lo up
  ip -n "$ns" link set veth0 up
done
link_mtu=$(ip -n "$NS-srv" -o link show dev veth0 | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
echo "dataplane-netns: $NS-srv ($SRV_IP) --veth mtu $link_mtu-- $NS-cli ($CLI_IP)" >&2

# wait_until SECONDS WHAT CMD...: polls CMD every 0.1 s.
wait_until() {
  local limit=$1 what=$2 i
  shift 2
  for ((i = 0; i < limit * 10; i++)); do
    "$@" >/dev/null && return 0
    sleep 0.1
  done
  die "timed out after ${limit}s waiting for $what"
}
listening() { [[ -n $(ip netns exec "$NS-srv" ss -Hltn "sport = :$1") ]]; }

# iperf3 NAME: one TCP stream, client in NS-cli to a one-off server in NS-srv, for
# $iperf_seconds after 1 s omitted (slow start); its JSON in $WORK/iperf3-NAME.json.
run_iperf3() {
  local name=$1
  ip netns exec "$NS-srv" iperf3 --server --one-off --bind "$SRV_IP" --port "$IPERF_PORT" \
    >"$WORK/iperf3-server-$name.log" 2>&1 &
  local server=$!
  PIDS+=("$server")
  wait_until 10 "the iperf3 server" listening "$IPERF_PORT"
  ip netns exec "$NS-cli" iperf3 --client "$SRV_IP" --port "$IPERF_PORT" --time "$iperf_seconds" \
    --omit 1 --json >"$WORK/iperf3-$name.json" 2>"$WORK/iperf3-client-$name.log" ||
    die "iperf3 ($name) failed: $(head -c 300 "$WORK/iperf3-$name.json")"
  wait "$server" || true
}

loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)
run_iperf3 before

# ---- groupsgd: servers in NS-srv, clients in NS-cli -------------------------------------
endpoints=$WORK/endpoints.json
# ip netns exec execs the program: $! is the benchmark itself (SIGTERM stops it).
ip netns exec "$NS-srv" "$bin" --serve-only --bind "$SRV_IP" --endpoint-file "$endpoints" \
  ${both[@]+"${both[@]}"} ${server_only[@]+"${server_only[@]}"} >"$WORK/server.log" 2>&1 &
server=$!
PIDS+=("$server")
server_up() {
  kill -0 "$server" 2>/dev/null || die "the --serve-only side exited: $(tail -n 5 "$WORK/server.log")"
  [[ -s $endpoints ]]
}
wait_until 120 "the --serve-only side's endpoints" server_up
status=0
ip netns exec "$NS-cli" "$bin" --connect "$endpoints" ${both[@]+"${both[@]}"} \
  ${client_only[@]+"${client_only[@]}"} >"$WORK/client.jsonl" 2>"$WORK/client.log" || status=$?
cat "$WORK/client.jsonl"
kill -TERM "$server"
server_rc=0
wait "$server" || server_rc=$?
[[ $status == 0 ]] || die "the --connect side exited $status"
[[ $server_rc == 0 ]] || die "the --serve-only side exited $server_rc on SIGTERM"

run_iperf3 after
loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the summary ---------------------------------------------------------------------------
python3 - "$WORK" "$quick" "$link_mtu" "$SRV_IP" "$CLI_IP" "$loadavg_start" "$loadavg_end" <<'EOF'
import json
import sys

work, quick, mtu, srv, cli, load_start, load_end = sys.argv[1:]


def iperf3(name):
    with open("%s/iperf3-%s.json" % (work, name)) as f:
        run = json.load(f)
    if "error" in run:
        raise SystemExit("dataplane-netns: iperf3 (%s): %s" % (name, run["error"]))
    received = run["end"]["sum_received"]
    line = {"bench": "dataplane-netns", "what": "iperf3", "when": name,
            "seconds": received["seconds"], "gbps": received["bits_per_second"] / 8e9,
            "retransmits": run["end"]["sum_sent"].get("retransmits", 0)}
    print(json.dumps(line, sort_keys=True))
    return line["gbps"]


with open("%s/client.jsonl" % work) as f:
    lines = [json.loads(l) for l in f if l.strip()]
client = lines[-1] if lines else {}
runs = [iperf3("before"), iperf3("after")]
iperf = sum(runs) / len(runs)


def ratio(a, b):
    return a / b if b > 0 else 0.0


sizes = []
for row in client.get("sizes", []):
    out = {k: row.get(k, 0.0) for k in ("size_mib", "groupsgd_gbps", "tcp_gbps", "k1_gbps",
                                         "exchange_gbps", "ratio", "exchange_ratio")}
    out["iperf3_gbps"] = iperf
    for key in ("groupsgd", "tcp", "exchange", "k1"):
        out["%s_vs_iperf3" % key] = ratio(out["%s_gbps" % key], iperf)
    sizes.append(out)
summary = {
    "bench": "dataplane-netns",
    "quick": quick == "true",
    "link": {"server": srv, "client": cli, "mtu": int(mtu) if mtu.isdigit() else None,
             "kind": "veth between two network namespaces"},
    "iperf3_gbps": iperf,
    "iperf3_gbps_runs": runs,
    "part_kib": client.get("part_kib"),
    "sizes": sizes,
    "loadavg_start": load_start,
    "loadavg_end": load_end,
    "ok": client.get("ok") is True and iperf > 0 and bool(sizes),
}
if "step_latency_1mib_8w" in client:
    summary["step_latency_1mib_8w"] = client["step_latency_1mib_8w"]
print(json.dumps(summary, sort_keys=True))
sys.exit(0 if summary["ok"] else 1)
EOF
