// The group PS quarantines a member that keeps sending bad updates, and refuses replayed
// or out-of-order pushes with an error and a counter, parameters untouched.
#include <limits>

#include "cluster_fixture.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

groupps::GroupServerConfig groupConfig(std::uint32_t quarantine_after) {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kSgd, 0.1f, 0.0f, 0.0f};
  g.quarantine_after = quarantine_after;
  g.quarantine_window_ms = 60000;
  return g;
}

// Member 1 (batch 4) of a group of one at epoch 5: its client and replica after its first
// pull, and the step it pulled.
struct SoleMember {
  std::vector<float> p;
  client::GroupClient client;
  std::uint64_t step = 0;
  explicit SoleMember(testing::MiniCluster& cluster)
      : p(configured(cluster)), client(cluster.ctx, cluster.assignment(1, 5), 1, 5000ms) {
    auto r = testbed::pullWhenReady(client, p);
    REQUIRE(r.isOk());
    step = r->step;
  }
  // The group configured with member 1 alone; a replica of its size.
  static std::vector<float> configured(testing::MiniCluster& cluster) {
    cluster.configure({{1, 4}}, 5);
    return std::vector<float>(cluster.params);
  }
};

}  // namespace

TEST_CASE(
    "group PS: a member refused as bad N times is quarantined; the group trains on without it") {
  testing::MiniCluster cluster(testing::smallModel(), groupConfig(3));
  cluster.configure({{1, 4}, {2, 4}}, 5);
  std::vector<float> pa(cluster.params), pb(cluster.params);
  client::GroupClient good(cluster.ctx, cluster.assignment(1, 5), 1, 5000ms);
  client::GroupClient bad(cluster.ctx, cluster.assignment(2, 5), 1, 5000ms);
  auto ra = testbed::pullWhenReady(good, pa);
  REQUIRE(ra.isOk());
  REQUIRE(bad.pull(pb).isOk());  // active: the step would wait for it
  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  std::vector<float> nan_grad(cluster.params, 0.01f);
  nan_grad[1] = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < 3; ++i) {
    auto r = raw.call(testing::rawPush(2, 5, ra->step, nan_grad), 3000ms);
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  // From now on: refused as quarantined, pushes and pulls alike.
  auto again =
      raw.call(testing::rawPush(2, 5, ra->step, std::vector<float>(cluster.params, 0.01f)), 3000ms);
  CHECK(again.status().code() == Code::kQuarantined);
  CHECK(bad.pull(pb).status().code() == Code::kQuarantined);
  // A reconfiguration listing it does not bring it back.
  cluster.configure({{1, 4}, {2, 4}}, 5);
  CHECK(bad.pull(pb).status().code() == Code::kQuarantined);
  // The good member's step closes at once: the group no longer waits for the other.
  const auto t0 = std::chrono::steady_clock::now();
  auto ans = good.push(ra->step, std::vector<float>(cluster.params, 0.01f), 4, 1.0f, 1.0f, pa);
  REQUIRE(ans.isOk());
  CHECK(ans->accepted);
  CHECK(std::chrono::steady_clock::now() - t0 < 2000ms);  // not the 5 s step deadline
  auto stats = cluster.flush();
  auto s = stats.header().getBody().getGroupStats();
  REQUIRE(s.getQuarantined().size() == 1);
  CHECK(s.getQuarantined()[0] == 2);
  CHECK(s.getQuarantineRefusals() == 3);
  CHECK(s.getSamplesReceived() == 4);
}

TEST_CASE("group PS: with quarantine_after 0 no number of bad updates quarantines a member") {
  testing::MiniCluster cluster(testing::smallModel(), groupConfig(0));
  SoleMember good(cluster);
  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  std::vector<float> nan_grad(cluster.params, std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < 20; ++i) {
    CHECK(raw.call(testing::rawPush(1, 5, good.step, nan_grad), 3000ms).status().code() ==
          Code::kInvalidArgument);
  }
  auto ans =
      good.client.push(good.step, std::vector<float>(cluster.params, 0.01f), 4, 1.0f, 1.0f, good.p);
  REQUIRE(ans.isOk());
  CHECK(ans->accepted);
}

TEST_CASE(
    "group PS: a replayed push and a push for an older step are refused and counted; the replica "
    "is unchanged") {
  testing::MiniCluster cluster(testing::smallModel(), groupConfig(3));
  SoleMember m(cluster);
  client::GroupClient& w = m.client;
  std::vector<float>& p = m.p;
  const std::uint64_t s0 = m.step;
  const std::vector<float> grad(cluster.params, 0.01f);
  auto first = w.push(s0, grad, 4, 1.0f, 1.0f, p);
  REQUIRE(first.isOk());
  REQUIRE(first->step == s0 + 1);
  const std::vector<float> after_first = p;
  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  // The same push again.
  auto replay = raw.call(testing::rawPush(1, 5, s0, grad), 3000ms);
  CHECK(replay.status().code() == Code::kFailedPrecondition);
  CHECK(replay.status().message().find("replayed") != std::string::npos);
  std::vector<float> now(cluster.params);
  auto pulled = w.pull(now);
  REQUIRE(pulled.isOk());
  CHECK(pulled->step == s0 + 1);
  CHECK(now == after_first);
  // One more step, then a push for the step before it (out of order).
  auto second = w.push(s0 + 1, grad, 4, 1.0f, 1.0f, p);
  REQUIRE(second.isOk());
  auto old = raw.call(testing::rawPush(1, 5, s0, grad), 3000ms);
  CHECK(old.status().code() == Code::kFailedPrecondition);
  auto stats = cluster.flush();
  auto s = stats.header().getBody().getGroupStats();
  CHECK(s.getReplayedPushes() == 2);
  CHECK(s.getSamplesReceived() == 8);
  CHECK(s.getLateGradients() == 0);
  CHECK(s.getSamplesDropped() == 0);
  // Replays are not bad updates: the sender is not quarantined.
  CHECK(s.getQuarantined().size() == 0);
}
