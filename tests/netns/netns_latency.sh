#!/usr/bin/env bash
# Added latency: the kernel has no netem, so the router redirects the TCP traffic of
# workers w1 and w2 (nft redirect) into groupsgd-delay-proxy, which relays each
# connection to its original destination 20 ms later in each direction; w3 and w4 go
# direct. Training must complete and converge, and the delayed workers must see about
# 40 ms more round trip per exchange than the direct ones (same run, same groups).
# shellcheck source=tests/netns/lib.sh
source "$(dirname "$0")/lib.sh"
require_netns
: "${GROUPSGD_DELAY_PROXY:?set GROUPSGD_DELAY_PROXY to the groupsgd-delay-proxy binary}"
DELAY_MS=${DELAY_MS:-20}

make_topology 4
ip netns exec "${NS}-rt" "$GROUPSGD_DELAY_PROXY" --listen 0.0.0.0:9000 --transparent \
  --delay-ms "$DELAY_MS" --ready-file "$WORK/proxy.ready" >"$WORK/proxy.log" 2>&1 &
PIDS+=("$!")
wait_for 10 "the delay proxy" test -s "$WORK/proxy.ready"
in_ns rt nft -f - <<'NFT'
table ip gsgd_delay {
  chain redirect_in {
    type nat hook prerouting priority dstnat;
    iifname { "r1", "r2" } meta l4proto tcp counter redirect to :9000
  }
}
NFT
log "w1, w2 through groupsgd-delay-proxy (+${DELAY_MS} ms each way); w3, w4 direct"

start_daemon --mode grouped --workers 4 --groups 2 --max-samples 40000 --max-seconds 50 \
  --heartbeat-ms 500
run_four_workers
check_run 0.70
redirected=$(nft_packets gsgd_delay)
((redirected > 0)) || fail "no connection went through the delay proxy"
slow=$(summary '[.worker_stats[] | select(.name == "w1" or .name == "w2") | .comm_ms] | add / length')
fast=$(summary '[.worker_stats[] | select(.name == "w3" or .name == "w4") | .comm_ms] | add / length')
log "netns_latency: +${DELAY_MS} ms each way for w1,w2: mean comm_ms delayed $slow vs direct $fast;" \
  "stop: $(summary .stop_reason); elapsed $(summary .elapsed_s) s; samples_trained $(summary .samples_trained);" \
  "final_test_acc $(summary .final_test_acc); per worker steps: $(summary '[.worker_stats[] | "\(.name)=\(.steps)"] | join(" ")')"
# One exchange (push + reply) crosses the proxy twice: at least 2 * DELAY_MS more, with
# slack for a loaded machine's noise in the direct workers' figure.
(($(echo "$slow - $fast >= 1.5 * $DELAY_MS" | bc -l))) ||
  fail "delayed workers' comm_ms $slow is not ${DELAY_MS}x2 above the direct ones' $fast"
echo "PASS"
