#!/usr/bin/env bash
# Partition: the workers of group 1 (one side namespace each) are cut from the head at the
# router for PARTITION_S, longer than the heartbeat limit (1.5 s here) and the workers'
# request timeout (3 s), then healed. The cut is one-way for its first second (answers
# lost, requests delivered), then total.
# Expected: the coordinator declares them dead while group 0 trains on; after the heal
# their old registrations are refused by the group PS, they register again with new
# epochs and train; no split brain: no epoch is handed out twice, each cut worker has its
# old (dead) and its new registration, and every sample is counted once: the old
# registrations are credited with what their group acknowledged, including pushes whose
# answers the cut swallowed (accounting_ok). The run converges.
# shellcheck source=tests/netns/lib.sh
source "$(dirname "$0")/lib.sh"
require_netns
PARTITION_S=${PARTITION_S:-6}
# Dead after max(heartbeat_ms * misses, step_deadline_ms + 2 * heartbeat_ms) = 1.5 s.
DEAD_AFTER_S=1.5
HEARTBEAT_S=0.5

make_topology 4
start_daemon --mode grouped --workers 4 --groups 2 --heartbeat-ms 500 --heartbeat-misses 3 \
  --step-deadline-ms 500
start_evaluator
for i in 1 2 3 4; do start_worker "$i" "w$i" --device-ms 2 --timeout-ms 3000; done
wait_for 30 "four trainers to register" grep -q "registered trainer 4" "$WORK/daemon.log"
wait_for 60 "2000 samples" samples_above 2000

# The workers the coordinator put in group 1 (their latest assignment).
cut=()
for i in 1 2 3 4; do
  grep "assigned: group" "$WORK/w$i.log" | tail -n1 | grep -q "assigned: group 1 " && cut+=("$i")
done
((${#cut[@]} > 0)) || fail "no worker in group 1"
ports=$(printf '"r%s", ' "${cut[@]}")
ports=${ports%, }
# The cut starts one-way (answers towards the group lost, as when a link fails in the
# middle of an exchange: a push arrives and is counted, its reply never does) and is
# total one second later.
in_ns rt nft -f - <<NFT
table ip gsgd_partition {
  chain cut {
    type filter hook forward priority 0;
    oifname { $ports } counter drop
  }
}
NFT
cut_at=$(now)
log "partition: answers to group 1 (workers ${cut[*]}) dropped"
sleep 1
in_ns rt nft add rule ip gsgd_partition cut iifname "{ $ports }" counter drop
log "partition: group 1 cut from the head both ways"

# Deaths declared since the cut (a loaded machine may have declared one earlier).
deaths_since_cut() {
  awk -v t="$(iso_at "$cut_at")" '$1 >= t && $2 == "WARN" && /missed its heartbeats: declared dead/' "$WORK/daemon.log"
}
all_cut_dead() { (($(deaths_since_cut | wc -l) >= ${#cut[@]})); }
wait_for 20 "the cut workers to be declared dead" all_cut_dead
first_dead=$(iso_seconds "$(deaths_since_cut | head -n1 | awk '{print $1}')")
detect_s=$(echo "$first_dead - $cut_at" | bc -l)
during=$(ctl_status)
dead=$(jq -r '.workers.dead' <<<"$during")
[[ $dead -ge ${#cut[@]} ]] || fail "status shows $dead dead workers during the partition: $during"
# The other group trains on while group 1 is cut off.
before=$(jq -r '.samples_trained' <<<"$during")
wait_for 20 "group 0 to train on during the partition" samples_above $((before + 500))
left=$(echo "$PARTITION_S - ($(now) - $cut_at)" | bc -l)
(($(echo "$left > 0" | bc -l))) && sleep "$left"

declare -A assigned_before
for i in "${cut[@]}"; do assigned_before[$i]=$(grep -c "assigned: group" "$WORK/w$i.log"); done
in_ns rt nft delete table ip gsgd_partition
healed_at=$(now)
log "healed after $(echo "$healed_at - $cut_at" | bc -l | cut -c1-5) s"
back() {
  local i
  for i in "${cut[@]}"; do
    (($(grep -c "assigned: group" "$WORK/w$i.log") > assigned_before[$i])) || return 1
  done
}
wait_for 30 "the cut workers to register again" back
rejoin_s=$(echo "$(now) - $healed_at" | bc -l)
wait_for 30 "four active trainers" bash -c "'$GROUPSGDCTL' --socket '$WORK/ctl.sock' --json status | jq -e '.workers.active == 4'"
after=$(samples_trained)
wait_for 30 "training to go on after the heal" samples_above $((after + 2000))

kill -TERM "$DAEMON_PID"
wait_finish 60
check_accounting
check_converged 0.60
check_one_owner
# Each cut worker ends with two registrations (the one cut off, closed, and the new one),
# and the coordinator logged a death for each; one owner per epoch: no epoch was handed
# to two registrations; the group PS refused the old registrations after the heal.
for i in "${cut[@]}"; do
  n=$(summary "[.worker_stats[] | select(.name == \"w$i\")] | length")
  ((n >= 2)) || fail "w$i has $n registration(s); expected the old and a new one: $(summary .worker_stats)"
done
n_deaths=$(summary '[.events[] | select(.kind == "death")] | length')
((n_deaths >= ${#cut[@]})) || fail "only $n_deaths death events"
dup_epochs=$(grep -ho "assigned: group .* epoch [0-9]*" "$WORK"/w*.log | awk '{print $NF}' | sort | uniq -d)
[[ -z $dup_epochs ]] || fail "epoch(s) $dup_epochs handed to two registrations"
# A cut-off registration that speaks after the heal is refused by the group PS. Whether it
# speaks at all is a race: a worker whose group PS and coordinator both stay silent past its
# request timeout gives the old registration up and registers anew without another request
# (worker recovery, docs/reliability.md), so the count is reported, not required; what is
# required is above: the old registrations dead, new epochs, one active registration a name.
stale_refused=$(grep -c "refused: permission_denied: worker [0-9]* is not a member" "$WORK/daemon.log" || true)
# Pushes the group counted but whose answers were lost: what the coordinator credited
# each old registration beyond the worker's own count.
swallowed=0
while read -r id own; do
  credited=$(summary "[.worker_stats[] | select(.id == $id) | .samples] | first")
  swallowed=$((swallowed + credited - own))
done < <(sed -nE 's/.*worker ([0-9]+) \(declared dead\) closed its registration at ([0-9]+) samples.*/\1 \2/p' "$WORK/daemon.log")
log "netns_partition: cut workers ${cut[*]} (group 1) for ${PARTITION_S} s; first declared dead" \
  "$(printf '%.2f' "$detect_s") s after the cut (limit $DEAD_AFTER_S s + one heartbeat);" \
  "re-registered $(printf '%.2f' "$rejoin_s") s after the heal; stale requests refused by the group PS $stale_refused;" \
  "stale_heartbeats $(summary .stale_heartbeats); registrations: $(summary '[.worker_stats[] | "\(.name)#\(.id)(g\(.group),\(.state))=\(.samples)"] | join(" ")');" \
  "late_gradients $(summary .late_gradients); samples_trained $(summary .samples_trained)" \
  "(by dead registrations $(summary .samples_trained_by_dead_workers), of which answers lost" \
  "$swallowed); final_test_acc $(summary .final_test_acc)"
(($(echo "$detect_s < $DEAD_AFTER_S + 2.0" | bc -l))) || fail "declared dead only after $detect_s s"
# Silence counts from the last heartbeat seen, up to one heartbeat (plus a step) before the cut.
(($(echo "$detect_s >= $DEAD_AFTER_S - $HEARTBEAT_S - 0.3" | bc -l))) || fail "declared dead too early: $detect_s s"
echo "PASS"
