#!/usr/bin/env bash
# Packet loss: the router drops 5% of forwarded packets (nft numgen random) in both
# directions between the head and all four workers for the whole run. TCP retransmits;
# training must reach its sample budget, converge, and keep the accounting invariant.
# shellcheck source=tests/netns/lib.sh
source "$(dirname "$0")/lib.sh"
require_netns
LOSS_PCT=${LOSS_PCT:-5}

make_topology 4
in_ns rt nft -f - <<NFT
table ip gsgd_loss {
  chain lossy {
    type filter hook forward priority 0;
    numgen random mod 100 < $LOSS_PCT counter drop
  }
}
NFT
log "router drops ${LOSS_PCT}% of forwarded packets"
start_daemon --mode grouped --workers 4 --groups 2 --max-samples 25000 --max-seconds 50
run_four_workers
check_run 0.70
dropped=$(nft_packets gsgd_loss)
((dropped > 0)) || fail "the loss rule dropped nothing"
log "netns_loss: ${LOSS_PCT}% drop, $dropped packets dropped; stop: $(summary .stop_reason);" \
  "elapsed $(summary .elapsed_s) s; samples_trained $(summary .samples_trained)" \
  "(applied $(summary .samples_applied), dropped $(summary .samples_dropped)); final_test_acc $(summary .final_test_acc);" \
  "late_gradients $(summary .late_gradients); deaths $(summary '[.events[] | select(.kind == "death")] | length')"
echo "PASS"
