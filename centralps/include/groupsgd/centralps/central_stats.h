// The central PS's counters as it reports them (its answer to CentralStatsQuery), the one
// type the server, the coordinator, the metrics and the run summary share; toProto and
// fromProto are its only translation to and from the wire (schemas/central.capnp).
// Thread rule: a plain value and pure functions; any thread.
#pragma once

#include <cstdint>

#include "central.capnp.h"

namespace groupsgd::centralps {

struct CentralStats {
  std::uint64_t version = 0;              // central model version (deltas applied)
  std::uint64_t updates_applied = 0;      // deltas merged
  std::uint64_t updates_refused = 0;      // deltas refused (staleness bound, bad values)
  std::uint64_t samples_applied = 0;      // samples behind merged deltas
  std::uint64_t samples_refused = 0;      // samples behind refused deltas
  std::uint64_t bad_messages = 0;         // malformed messages
  std::uint64_t max_staleness = 0;        // largest tau of a merged delta
  float mean_staleness = 0;               // mean tau over merged deltas (a Float32 on the wire)
  std::uint64_t checkpoint_version = 0;   // newest durable checkpoint (0 = none)
  std::uint64_t checkpoint_failures = 0;  // checkpoint writes that failed
  // Standby head (all zero without replication_listen).
  bool standby_configured = false;
  bool standby_attached = false;
  std::uint64_t standby_acked_version = 0;
  std::uint64_t standby_losses = 0;
  std::uint64_t standby_max_lag = 0;
  float standby_ack_wait_ms = 0;
  bool standby_alone = false;
  std::uint64_t uncommitted_deltas = 0;
};

void toProto(const CentralStats& stats, proto::CentralStats::Builder out);
CentralStats fromProto(proto::CentralStats::Reader in);

}  // namespace groupsgd::centralps
