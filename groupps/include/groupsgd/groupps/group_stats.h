// A group PS's counters as it reports them (its answer to Flush and GroupStatsQuery), the
// one type the server, the coordinator and the run summary share; toProto and fromProto
// are its only translation to and from the wire (schemas/group.capnp).
// Thread rule: a plain value and pure functions; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "group.capnp.h"

namespace groupsgd::groupps {

struct GroupStats {
  std::uint32_t group_id = 0;
  std::uint64_t step = 0;               // group steps completed
  std::uint64_t samples_received = 0;   // accepted into a step
  std::uint64_t samples_dropped = 0;    // late, or in a delta the central refused/lost
  std::uint64_t samples_pending = 0;    // in the replica, not yet sent
  std::uint64_t samples_in_flight = 0;  // in a delta awaiting the central answer
  std::uint64_t late_gradients = 0;
  std::uint64_t bad_messages = 0;
  std::uint64_t exchanges = 0;
  std::uint64_t refused_exchanges = 0;
  float last_loss = 0;
  std::uint32_t members = 0;                            // configured members
  std::map<std::uint64_t, std::uint64_t> acknowledged;  // samples per worker
  std::uint64_t identity_refused = 0;      // another worker's id, or not the coordinator's key
  std::vector<std::uint64_t> quarantined;  // workers quarantined here
  std::uint64_t replayed_pushes = 0;       // a step this worker already pushed for
  std::uint64_t quarantine_refusals = 0;   // messages from quarantined workers
  std::uint64_t bad_parts = 0;             // push parts refused, or arriving for no open push
  std::uint64_t pushes_waited = 0;         // pushes in parts that waited for the memory budget
  std::uint64_t steps_cut = 0;             // steps the cutoff closed without some members
  float learning_rate = 0;                 // the group optimizer's lr at its last step
  std::uint64_t run_samples = 0;           // the schedule's position: the run's samples applied
};

void toProto(const GroupStats& stats, proto::GroupStats::Builder out);
GroupStats fromProto(proto::GroupStats::Reader in);

}  // namespace groupsgd::groupps
