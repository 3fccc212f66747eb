#!/usr/bin/env bash
# Bandwidth limit: tc tbf shapes worker w1's link in both directions (the router's port
# towards it and its own uplink) to RATE. Training must complete and converge with the
# accounting intact, and w1 must be the slow one: each of its exchanges takes several
# times longer than the unshaped workers' (comm_ms, same run).
# shellcheck source=tests/netns/lib.sh
source "$(dirname "$0")/lib.sh"
require_netns
RATE=${RATE:-20mbit}

make_topology 4
in_ns rt tc qdisc add dev r1 root tbf rate "$RATE" burst 64kb latency 400ms
in_ns s1 tc qdisc add dev s0 root tbf rate "$RATE" burst 64kb latency 400ms
log "w1's link shaped to $RATE each way (tc tbf)"

start_daemon --mode grouped --workers 4 --groups 2 --max-samples 30000 --max-seconds 50
run_four_workers
check_run 0.70
shaped_bytes=$(in_ns rt tc -s qdisc show dev r1 | awk '/Sent/ {print $2; exit}')
((shaped_bytes > 1000000)) || fail "the shaped link carried only $shaped_bytes bytes"
slow=$(summary '[.worker_stats[] | select(.name == "w1") | .comm_ms] | max')
fast=$(summary '[.worker_stats[] | select(.name != "w1") | .comm_ms] | add / length')
log "netns_bandwidth: w1 at $RATE: comm_ms w1 $slow vs others' mean $fast;" \
  "stop: $(summary .stop_reason); elapsed $(summary .elapsed_s) s; samples_trained $(summary .samples_trained);" \
  "final_test_acc $(summary .final_test_acc); shaped port sent $shaped_bytes bytes;" \
  "steps: $(summary '[.worker_stats[] | "\(.name)(g\(.group))=\(.steps)"] | join(" ")');" \
  "late_gradients $(summary .late_gradients)"
(($(echo "$slow >= 3 * $fast" | bc -l))) || fail "w1 (comm_ms $slow) is not clearly slower than the others ($fast)"
echo "PASS"
