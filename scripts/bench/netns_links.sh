# shellcheck shell=bash
# Shared by the benchmarks on emulated hosts (placement_netns.sh, ashl_netns.sh). Sourced,
# not run: takes the binaries from BUILD_DIR (default build/), sources tests/netns/lib.sh
# (namespaces named after the PID, removed on exit; exits 77 = skipped without root) and
# checks that namespaces can be made.
#
#   source "$root/scripts/bench/netns_links.sh"
#   make_topology N >&2
#   shape_links RATE I...   # side I's link to the router limited to RATE each way (tc tbf)
: "${root:?set root to the repository before sourcing netns_links.sh}"
build=${BUILD_DIR:-$root/build}
export GROUPSGDD=${GROUPSGDD:-$build/daemon/groupsgdd}
export GROUPSGD_WORKER=${GROUPSGD_WORKER:-$build/worker/groupsgd-worker}
export GROUPSGDCTL=${GROUPSGDCTL:-$build/daemon/groupsgdctl}
# shellcheck source=../../tests/netns/lib.sh
source "$root/tests/netns/lib.sh"
require_netns

# shape_links RATE I...: both directions of each side I's link: the router's port rI
# (towards I) and side I's own s0 (towards the router). The burst and queue are large
# enough that TCP keeps the link full: the delay grows with the bytes sent.
shape_links() {
  local rate=$1 i
  shift
  for i in "$@"; do
    in_ns rt tc qdisc add dev "r$i" root tbf rate "$rate" burst 64kb latency 400ms
    in_ns "s$i" tc qdisc add dev s0 root tbf rate "$rate" burst 64kb latency 400ms
  done
}
