# Network-namespace housekeeping shared by the network-fault tests (tests/netns/lib.sh)
# and the two-namespace benchmark (scripts/bench/dataplane_netns.sh). Sourced, not run.
# Namespaces are named BASE<pid of the shell that made them>-<role>, so a run can tell
# its own from those of a run that was killed before it could clean up.

# ns_stop_pids PID...: SIGTERM each, up to 5 s for it to exit, then SIGKILL.
ns_stop_pids() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "$@"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  done
  return 0
}

# ns_delete PREFIX: deletes the namespaces named PREFIX-*, killing what still runs in them.
ns_delete() {
  local prefix=$1 ns p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${prefix}-" || true); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

# ns_reap_stale BASE: a run killed outright (SIGKILL on a timeout) cannot clean up, so
# the namespaces BASE<pid>-* whose shell <pid> is gone are deleted, with what runs in them.
ns_reap_stale() {
  local base=$1 ns pid p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${base}[0-9]+-" || true); do
    pid=${ns#"$base"}
    pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null && continue
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null && echo "removed $ns, left by a killed run" >&2
  done
  return 0
}
