#!/usr/bin/env bash
# The primary head partitioned from everyone (docs/reliability.md "Standby head"): the
# primary (role coordinator, synchronous standby link) in the "head" namespace, its
# standby in side 1, a node daemon (both group PSes), two trainers and the evaluator in
# side 2, all given the list PRIMARY,STANDBY. The router drops everything to and from the
# head namespace for PARTITION_S, then the cut heals.
# Expected: the standby, no longer hearing the primary, takes over (incarnation + 1); the
# node and the trainers move to it and the run reaches its sample budget there with its
# accounting intact; no acknowledged version is lost (the promoted head resumed at >= the
# last version the primary applied). No split: the primary applied its last version
# before the standby promoted itself (with synchronous replication it cannot commit
# without the standby's acknowledgement, and a promoted standby acknowledges no one), so
# the two heads never applied updates in overlapping time. After the heal the primary
# hears `Superseded` from the promoted head and exits 75 without having applied anything
# more.
# shellcheck source=tests/netns/lib.sh
source "$(dirname "$0")/lib.sh"
require_netns
PARTITION_S=${PARTITION_S:-5}
TAKEOVER_MS=800
STANDBY_IP=10.77.1.1
SIDE_IP=10.77.2.1
REPLICATION="tcp://${HEAD_IP}:5560"
STANDBY_EP="tcp://${STANDBY_IP}:5556"
LIST="$ENDPOINT,$STANDBY_EP"

make_topology 2
# The standby gets the primary's flags (it becomes this head).
head_flags=(--role coordinator --mode grouped --workers 2 --groups 2 --heartbeat-ms 250
  --heartbeat-misses 12 --step-deadline-ms 1000 --standby-takeover-ms "$TAKEOVER_MS"
  --max-samples 120000 --max-seconds 120 --progress-ms 0)
start_daemon "${head_flags[@]}" --replication-listen "$REPLICATION" --log-level debug
PRIMARY_PID=$DAEMON_PID
mkdir -p "$WORK/standby"
ip netns exec "${NS}-s1" "$GROUPSGDD" "${head_flags[@]}" --role standby --primary "$REPLICATION" \
  --listen "$STANDBY_EP" --bind-host "$STANDBY_IP" --endpoint-file "$WORK/standby/endpoint" \
  --summary-file "$WORK/standby/summary.json" --control-socket "$WORK/standby/ctl.sock" \
  >"$WORK/standby.log" 2>&1 &
STANDBY_PID=$!
PIDS+=("$STANDBY_PID")
# Its endpoint file is written once it follows the primary (has the snapshot).
wait_for 20 "the standby to follow the primary" test -s "$WORK/standby/endpoint"
# The node's calls to a silent head give up after 500 ms (default 5 s), then it tries the
# next endpoint of its list.
ip netns exec "${NS}-s2" "$GROUPSGDD" --role node --coordinator "$LIST" --bind-host "$SIDE_IP" \
  --node-groups 2 --mode grouped --workers 2 --groups 2 --step-deadline-ms 1000 --give-up-s 60 \
  --coordinator-timeout-ms 500 --progress-ms 0 >"$WORK/node.log" 2>&1 &
NODE_PID=$!
PIDS+=("$NODE_PID")
quick=(--timeout-ms 500 --backoff-max-ms 300 --give-up-s 60)
for i in 1 2; do start_worker 2 "w$i" --coordinator "$LIST" --device-ms 2 "${quick[@]}"; done
ip netns exec "${NS}-s2" "$GROUPSGD_WORKER" --coordinator "$LIST" --name eval --evaluate \
  --eval-interval-ms 300 "${quick[@]}" >"$WORK/eval.log" 2>&1 &
PIDS+=("$!")
WORKER_PIDS+=("$!")
version_above() { (($(ctl_status | jq -r '.central_version') > $1)); }
wait_for 60 "30 versions on the primary" version_above 30
primary_incarnation=$(ctl_status | jq -r '.incarnation')
[[ $("$GROUPSGDCTL" --socket "$WORK/standby/ctl.sock" --json status | jq -r '.following') == true ]] ||
  fail "the standby does not follow the primary"

# The partition: the head namespace's only link, cut at the router both ways.
in_ns rt nft -f - <<NFT
table ip gsgd_partition {
  chain cut {
    type filter hook forward priority 0;
    iifname "rh" counter drop
    oifname "rh" counter drop
  }
}
NFT
cut_at=$(now)
log "partition: the primary's namespace cut off"

standby_status() { "$GROUPSGDCTL" --socket "$WORK/standby/ctl.sock" --json status; }
trains_on_standby() {
  standby_status | jq -e '.workers.active == 2 and .samples_trained > 0'
}
wait_for 30 "both trainers on the promoted standby" trains_on_standby
back_s=$(echo "$(now) - $cut_at" | bc -l)
left=$(echo "$PARTITION_S - ($(now) - $cut_at)" | bc -l)
(($(echo "$left > 0" | bc -l))) && sleep "$left"
kill -0 "$PRIMARY_PID" 2>/dev/null || fail "the partitioned primary exited before the heal"
kill -0 "$STANDBY_PID" 2>/dev/null || fail "the run ended before the heal: raise --max-samples"
# Cut off, the primary lost its standby and from then on could commit nothing.
grep -q "the standby is LOST" "$WORK/daemon.log" || fail "the partitioned primary never lost its standby"
cut_packets=$(nft_packets gsgd_partition)
in_ns rt nft delete table ip gsgd_partition
healed_at=$(now)
log "healed after $(echo "$healed_at - $cut_at" | bc -l | cut -c1-5) s ($cut_packets packets dropped)"

# Fencing: the promoted head tells its old primary it is superseded (twice a second).
primary_rc=0
wait_pid "$PRIMARY_PID" 20 || primary_rc=$?
[[ $primary_rc -eq 75 ]] || fail "the old primary exited $primary_rc after the heal, not 75"
stepped_s=$(echo "$(now) - $healed_at" | bc -l)
grep -q "stepping down" "$WORK/daemon.log" || fail "the old primary did not log 'stepping down'"

# The run ends on the promoted head.
wait_for 90 "the run to end on the promoted head" test -s "$WORK/standby/summary.json"
for pid in "${WORKER_PIDS[@]}"; do
  rc=0
  wait_pid "$pid" 30 || rc=$?
  [[ $rc -eq 0 ]] || fail "worker process $pid exited $rc"
done
rc=0
wait_pid "$NODE_PID" 30 || rc=$?
[[ $rc -eq 0 ]] || fail "the node daemon exited $rc"
rc=0
wait_pid "$STANDBY_PID" 30 || rc=$?
[[ $rc -eq 0 ]] || fail "the promoted head exited $rc"
SUMMARY="$WORK/standby/summary.json"
check_accounting
check_one_owner
[[ $(summary .stop_reason) == "sample budget spent" ]] || fail "stop reason: $(summary .stop_reason)"
check_converged 0.60
[[ $(summary .head_restart.took_over_from_incarnation) == "$primary_incarnation" ]] ||
  fail "took over from incarnation $(summary .head_restart.took_over_from_incarnation), not $primary_incarnation"
[[ $(summary .head_restart.versions_lost_bound) == 0 ]] || fail "versions_lost_bound $(summary .head_restart.versions_lost_bound)"

# 0 acknowledged versions lost, and no moment with two heads applying updates: the last
# update the primary applied (its debug lines "applied delta ... v=N", each stamped)
# came before the standby's promotion ("TAKING OVER"), and that version is in the replica.
last_applied_line=$(grep "applied delta" "$WORK/daemon.log" | tail -n1)
[[ -n $last_applied_line ]] || fail "the primary applied nothing"
primary_last_v=$(sed -nE 's/.* v=([0-9]+).*/\1/p' <<<"$last_applied_line")
primary_last_at=$(awk '{print $1}' <<<"$last_applied_line")
takeover_at=$(grep -m1 "TAKING OVER" "$WORK/standby.log" | awk '{print $1}')
[[ -n $takeover_at ]] || fail "the standby never logged TAKING OVER"
first_update_unix=$(sed -nE 's/.*takeover: first update applied on the promoted head at unix time ([0-9.]+).*/\1/p' "$WORK/standby.log" | head -n1)
[[ -n $first_update_unix ]] || fail "no first update on the promoted head"
[[ $primary_last_at < $takeover_at ]] ||
  fail "split: the primary applied version $primary_last_v at $primary_last_at, after the standby's takeover at $takeover_at"
resumed=$(summary .head_restart.resumed_version)
((resumed >= primary_last_v)) || fail "lost versions: the primary applied $primary_last_v, the standby resumed at $resumed"
((resumed <= primary_last_v + 1)) || fail "the standby resumed at $resumed, more than one above the primary's $primary_last_v"
# Nothing applied by the primary after the cut but what was already acknowledged then:
# at most the one exchange in flight.
applied_after_cut=$(awk -v t="$(iso_at "$cut_at")" '$1 >= t && /applied delta/' "$WORK/daemon.log" | wc -l)
((applied_after_cut <= 1)) || fail "the partitioned primary applied $applied_after_cut updates after the cut"
takeover_s=$(echo "$(iso_seconds "$takeover_at") - $cut_at" | bc -l)
first_update_s=$(echo "$first_update_unix - $cut_at" | bc -l)
log "netns_standby_partition: primary (incarnation $primary_incarnation) cut for ${PARTITION_S} s at version" \
  "$primary_last_v (last applied there at $primary_last_at); standby promoted $(printf '%.2f' "$takeover_s") s" \
  "after the cut (takeover bound $TAKEOVER_MS ms), first update on it $(printf '%.2f' "$first_update_s") s," \
  "both trainers on it $(printf '%.2f' "$back_s") s; resumed at $resumed (0 versions lost);" \
  "applied by the primary after the cut $applied_after_cut; old primary exited 75 $(printf '%.2f' "$stepped_s") s" \
  "after the heal; samples_trained $(summary .samples_trained), accounting ok; final_test_acc $(summary .final_test_acc)"
echo "PASS"
