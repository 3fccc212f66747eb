// A group PS steps with the lr schedule of its GroupConfig at the run's samples applied:
// seen in the replica each step returns (sgd: replica change = -lr x gradient), in its
// GroupStats, and for samples merged by another group (the central PS's total).
#include <cmath>
#include <thread>

#include "cluster_fixture.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

constexpr float kGrad = 0.01f;
constexpr std::uint32_t kBatch = 20;

groupps::LrSchedule warmupLinear() {
  groupps::LrSchedule s;
  s.kind = groupps::LrScheduleKind::kWarmupLinear;
  s.base_lr = 0.4;
  s.warmup_samples = 100;
  s.decay_end_samples = 500;
  s.min_lr = 0.04;
  return s;
}

// The schedule written out independently of learningRateAt().
double expectedLr(std::uint64_t samples) {
  if (samples < 100) return 0.4 * static_cast<double>(samples) / 100.0;
  if (samples >= 500) return 0.04;
  return 0.4 - 0.36 * static_cast<double>(samples - 100) / 400.0;
}

groupps::GroupServerConfig sgdGroup() {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f};  // replaced by the schedule
  return g;
}

// Pushes the constant gradient for `step` as member 1 and returns the lr the step used,
// read off the replica it answered with.
double stepLr(testing::MiniCluster& cluster, RpcClient& raw, std::uint64_t step,
              std::vector<float>& replica) {
  auto reply = raw.call(
      testing::rawPush(1, 1, step, std::vector<float>(cluster.params, kGrad), kBatch), 5000ms);
  REQUIRE(reply.isOk());
  REQUIRE(reply->kind() == BodyKind::STEP_REPLY);
  REQUIRE(reply->header().getBody().getStepReply().getAccepted());
  std::vector<float> next(cluster.params);
  REQUIRE(reply->readTensor(0, next).isOk());
  double moved = 0;  // the mean change over a few elements, against float rounding
  for (std::size_t i = 0; i < 16; ++i) moved += replica[i] - next[i];
  replica = std::move(next);
  return moved / 16.0 / kGrad;
}

groupps::GroupStats statsOf(testing::MiniCluster& cluster) {
  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  OutMessage q(1, 0);
  q.header().getBody().initGroupStatsQuery();
  auto reply = raw.call(std::move(q), 5000ms);
  REQUIRE(reply.isOk());
  REQUIRE(reply->kind() == BodyKind::GROUP_STATS);
  return groupps::fromProto(reply->header().getBody().getGroupStats());
}

std::vector<float> pullReplica(testing::MiniCluster& cluster) {
  std::vector<float> params(cluster.params);
  client::GroupClient member(cluster.ctx, cluster.assignment(1, 1), 1, 5000ms);
  REQUIRE(testbed::pullWhenReady(member, params).isOk());
  return params;
}

}  // namespace

TEST_CASE("lr schedule: a group PS's lr follows the schedule by samples applied, step by step") {
  testing::MiniCluster cluster(testing::smallModel(), sgdGroup());
  testbed::GroupSettings settings;
  settings.lr_schedule = warmupLinear();
  REQUIRE(cluster.InProcessCluster::configure({{1, kBatch, ""}}, settings).isOk());
  std::vector<float> replica = pullReplica(cluster);
  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  // 30 steps of 20 samples: the warm-up (5 steps), the decay (to 500 samples), the floor.
  for (std::uint64_t step = 0; step < 30; ++step) {
    CAPTURE(step);
    const double lr = stepLr(cluster, raw, step, replica);
    CHECK(lr == doctest::Approx(expectedLr((step + 1) * kBatch)).epsilon(1e-3));
  }
  const groupps::GroupStats s = statsOf(cluster);
  CHECK(s.run_samples == 600);
  CHECK(s.learning_rate == doctest::Approx(0.04));
}

TEST_CASE(
    "lr schedule: other groups' merged samples move the position; a late group starts there") {
  testing::MiniCluster cluster(testing::smallModel(), sgdGroup());
  {
    // Another group merges 300 samples into the central PS before this group trains, in
    // 15 steps of 20 like this group's: the central PS's sample weighting then merges this
    // group's deltas at full weight, and the rebase that may land between the two steps
    // below leaves the replica as it is (with steps = 1 it shrank the first step's delta
    // to 20/272 and the second step read -0.003 instead of 0.184 in one run of four).
    RpcClient central(cluster.ctx, cluster.centralEndpoint(), MessageLimits{});
    OutMessage d(1, 7);
    auto body = d.header().getBody().initDeltaPush();
    body.setGroupId(7);
    body.setSamples(300);
    body.setSteps(15);
    d.addTensor(std::make_shared<const std::vector<float>>(cluster.params, 0.0f));
    auto r = central.call(std::move(d), 5000ms);
    REQUIRE(r.isOk());
    REQUIRE(r->header().getBody().getModelReply().getApplied());
  }
  // Configured (with a flush, as a regroup sends): the group PS fetches the model again and
  // with it the run's position, before its first step.
  testbed::GroupSettings settings;
  settings.lr_schedule = warmupLinear();
  settings.flush = true;
  REQUIRE(cluster.InProcessCluster::configure({{1, kBatch, ""}}, settings).isOk());
  for (int i = 0; i < 200 && statsOf(cluster).run_samples != 300; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(statsOf(cluster).run_samples == 300);
  std::vector<float> replica = pullReplica(cluster);
  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  CHECK(stepLr(cluster, raw, 0, replica) == doctest::Approx(expectedLr(320)).epsilon(1e-3));
  CHECK(stepLr(cluster, raw, 1, replica) == doctest::Approx(expectedLr(340)).epsilon(1e-3));
  // Without a schedule the start lr (1.0) would have moved the replica 25x further.
  CHECK(expectedLr(340) < 0.2);
}

TEST_CASE("lr schedule: without one in its GroupConfig a group PS keeps its start lr") {
  testing::MiniCluster cluster(testing::smallModel(), sgdGroup());
  cluster.configure({{1, kBatch}}, 1);
  std::vector<float> replica = pullReplica(cluster);
  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  CHECK(stepLr(cluster, raw, 0, replica) == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(statsOf(cluster).learning_rate == 1.0f);
}

TEST_CASE("lr schedule: a GroupConfig with an unusable schedule is refused") {
  testing::MiniCluster cluster(testing::smallModel(), sgdGroup());
  testbed::GroupSettings settings;
  settings.lr_schedule = warmupLinear();
  settings.lr_schedule->decay_end_samples = 50;  // before the end of its warm-up
  const Status s = cluster.InProcessCluster::configure({{1, kBatch, ""}}, settings);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("learning-rate schedule") != std::string::npos);
}
