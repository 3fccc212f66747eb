// A central PS and one group PS running on threads of the test process, plus helpers
// to configure the group as the coordinator would. Real sockets on 127.0.0.1.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <thread>
#include <vector>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/groupps/group_server.h"
#include "support/server_thread.h"

namespace groupsgd::testing {

// Pulls until the group PS has fetched its first model from the central PS (it answers
// "unavailable" until then), for at most ~2 s.
inline Result<worker::StepAnswer> pullWhenReady(worker::GroupClient& client, std::span<float> params) {
  Result<worker::StepAnswer> r = unavailable("not tried");
  for (int i = 0; i < 100; ++i) {
    r = client.pull(params);
    if (r.isOk() || r.status().code() != Code::kUnavailable) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return r;
}

struct MiniCluster {
  zmq::context_t ctx{1};
  std::unique_ptr<ServerThread<centralps::CentralServer>> central;
  std::unique_ptr<ServerThread<groupps::GroupServer>> group;
  std::size_t params = 0;

  MiniCluster(centralps::CentralConfig ccfg, groupps::GroupServerConfig gcfg) {
    auto c = centralps::CentralServer::create(ctx, ccfg, "tcp://127.0.0.1:*");
    REQUIRE(c.isOk());
    params = (*c)->paramCount();
    gcfg.central_endpoint = (*c)->endpoint();
    central = std::make_unique<ServerThread<centralps::CentralServer>>(std::move(*c));
    auto g = groupps::GroupServer::create(ctx, gcfg, params, "tcp://127.0.0.1:*");
    REQUIRE(g.isOk());
    group = std::make_unique<ServerThread<groupps::GroupServer>>(std::move(*g));
  }
  ~MiniCluster() {
    group.reset();
    central.reset();
  }

  // Sends a GroupConfig with these (worker id, batch) members at this epoch.
  void configure(const std::vector<std::pair<std::uint64_t, std::uint32_t>>& members,
                 std::uint64_t epoch, std::uint32_t k = 1, std::uint32_t deadline_ms = 5000) {
    RpcClient rpc(ctx, (*group)->endpoint(), MessageLimits{});
    OutMessage out(1, 0);
    out.header().setEpoch(epoch);
    auto gc = out.header().getBody().initGroupConfig();
    gc.setGroupId(0);
    gc.setExchangePeriod(k);
    gc.setStepDeadlineMs(deadline_ms);
    auto list = gc.initMembers(static_cast<unsigned>(members.size()));
    for (unsigned i = 0; i < members.size(); ++i) {
      list[i].setWorkerId(members[i].first);
      list[i].setBatchSize(members[i].second);
      list[i].setEpoch(epoch);
    }
    auto reply = rpc.call(std::move(out), std::chrono::milliseconds(3000));
    REQUIRE(reply.isOk());
  }

  worker::Assignment assignment(std::uint64_t worker_id, std::uint64_t epoch) const {
    worker::Assignment a;
    a.worker_id = worker_id;
    a.epoch = epoch;
    a.group_endpoint = (*group)->endpoint();
    a.central_endpoint = (*central)->endpoint();
    a.param_count = params;
    return a;
  }

  // Flushes the group and returns its counters message.
  InMessage flush() {
    RpcClient rpc(ctx, (*group)->endpoint(), MessageLimits{});
    OutMessage out(1, 0);
    out.header().getBody().initFlush();
    auto reply = rpc.call(std::move(out), std::chrono::milliseconds(5000));
    REQUIRE(reply.isOk());
    REQUIRE(reply->kind() == BodyKind::GROUP_STATS);
    return std::move(*reply);
  }
};

}  // namespace groupsgd::testing
