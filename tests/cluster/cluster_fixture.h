// The in-process cluster (groupsgd/testbed/in_process_cluster.h) for doctest cases: every
// step that must work is REQUIREd, so a case reads as what it checks.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <utility>
#include <vector>

#include "groupsgd/testbed/in_process_cluster.h"

namespace groupsgd::testing {

// The central PS of most cluster cases: the softmax model (7,850 parameters).
inline centralps::CentralConfig smallModel() {
  centralps::CentralConfig c;
  c.model = kernels::ModelKind::kSoftmax;
  return c;
}

struct MiniCluster : testbed::InProcessCluster {
  MiniCluster(centralps::CentralConfig ccfg, groupps::GroupServerConfig gcfg) {
    REQUIRE(start(std::move(ccfg), std::move(gcfg)).isOk());
  }

  // Sends a GroupConfig with these (worker id, batch) members at this epoch.
  void configure(const std::vector<std::pair<std::uint64_t, std::uint32_t>>& members,
                 std::uint64_t epoch, std::uint32_t k = 1, std::uint32_t deadline_ms = 5000) {
    std::vector<testbed::GroupMember> list;
    for (const auto& [id, batch] : members) list.push_back({id, batch, ""});
    REQUIRE(InProcessCluster::configure(list, {epoch, k, deadline_ms}).isOk());
  }

  // Flushes the group and returns its counters message.
  InMessage flush() {
    auto stats = InProcessCluster::flush();
    REQUIRE(stats.isOk());
    return std::move(*stats);
  }
};

// A raw push (member `worker`), so tests can send what a well-behaved client never would.
inline OutMessage rawPush(std::uint64_t worker, std::uint64_t epoch, std::uint64_t step,
                          std::vector<float> grad, std::uint32_t batch = 4) {
  OutMessage out(1, worker);
  out.header().setEpoch(epoch);
  out.header().setStep(step);
  auto p = out.header().getBody().initPush();
  p.setBatchSize(batch);
  out.addTensor(std::make_shared<std::vector<float>>(std::move(grad)));
  return out;
}

}  // namespace groupsgd::testing
