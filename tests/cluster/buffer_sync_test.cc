// Buffers pushed with the gradients (Push.bufferCount, docs/protocol.md "Buffers"): with
// placement server the group PS steps the parameters with its optimizer and sets the
// buffer range to the members' batch-weighted mean (no lr, momentum or decay on it),
// leaves that range out of the gradient norm bound, whole or in parts, and refuses a
// push whose count differs from the group's.
#include <future>

#include "cluster_fixture.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kParams = 10000;  // 7,500 parameters, then 2,500 buffer values
constexpr std::size_t kBuffers = 2500;
constexpr std::uint32_t kPartBytes = 8192;  // 2048 floats: the buffers start inside part 3

centralps::CentralConfig zeroModel(std::uint32_t part_bytes) {
  centralps::CentralConfig c;
  c.param_count = kParams;
  c.max_delta_norm = 1e12;  // the deltas carry the buffer values below
  if (part_bytes > 0) c.part_bytes = part_bytes;
  return c;
}

groupps::GroupServerConfig momentumWithDecay(std::uint32_t part_bytes) {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kMomentum, 0.1f, 0.9f, 0.1f};
  g.max_grad_norm = 100;  // the buffer values below are far over it: not bounded
  g.quarantine_after = 0;
  if (part_bytes > 0) {
    g.part_bytes = part_bytes;
    g.limits.max_part_bytes = 3 * part_bytes / 2;
  }
  return g;
}

// A gradient of `grad` for the parameters followed by buffer values base + i.
std::vector<float> pushed(float grad, float base) {
  std::vector<float> v(kParams, grad);
  for (std::size_t i = 0; i < kBuffers; ++i) v[kParams - kBuffers + i] = base + float(i);
  return v;
}

// Two members (batches 1 and 3) take two steps; after each, the replica's parameters are
// the optimizer's step with the mean gradient and its buffers the weighted mean.
void checkTwoSteps(std::uint32_t part_bytes) {
  testing::MiniCluster c(zeroModel(part_bytes), momentumWithDecay(part_bytes));
  c.configure({{1, 1}, {2, 3}}, 1);
  client::GroupClient a(c.ctx, c.assignment(1, 1), 1, 5000ms);
  client::GroupClient b(c.ctx, c.assignment(2, 1), 1, 5000ms);
  for (auto* member : {&a, &b}) {
    member->setBufferCount(kBuffers);
    if (part_bytes > 0) member->setPartBytes(part_bytes);
  }
  std::vector<float> pa(kParams), pb(kParams);
  REQUIRE(testbed::pullWhenReady(a, pa).isOk());
  REQUIRE(testbed::pullWhenReady(b, pb).isOk());

  // The group PS's own optimizer over the whole vector: the reference for the parameters.
  kernels::Optimizer reference(momentumWithDecay(0).optimizer, kParams);
  std::vector<float> expected(kParams, 0.0f);
  const float a_base[2] = {10.0f, 1.0f}, b_base[2] = {1e5f, -3.0f};
  for (std::uint64_t step = 0; step < 2; ++step) {
    const auto ga = pushed(0.1f, a_base[step]);
    const auto gb = pushed(0.5f, b_base[step]);
    auto first = std::async(std::launch::async, [&] { return a.push(step, ga, 1, 0, 0, pa); });
    auto second = b.push(step, gb, 3, 0, 0, pb);
    REQUIRE_MESSAGE(second.isOk(), second.status().toString());
    auto first_answer = first.get();
    REQUIRE_MESSAGE(first_answer.isOk(), first_answer.status().toString());
    CHECK(second->accepted);
    CHECK(pa == pb);  // one replica

    std::vector<float> sum(kParams);
    for (std::size_t i = 0; i < kParams; ++i) sum[i] = 1.0f * ga[i] + 3.0f * gb[i];
    reference.step(expected, sum, 0.25f);
    std::size_t wrong_params = 0, wrong_buffers = 0;
    for (std::size_t i = 0; i < kParams - kBuffers; ++i) {
      if (pa[i] != doctest::Approx(expected[i]).epsilon(1e-5)) ++wrong_params;
    }
    for (std::size_t i = kParams - kBuffers; i < kParams; ++i) {
      if (pa[i] != doctest::Approx((ga[i] + 3.0f * gb[i]) / 4.0f).epsilon(1e-6)) ++wrong_buffers;
    }
    CAPTURE(step);
    CHECK(wrong_params == 0);
    CHECK(wrong_buffers == 0);
  }
}

}  // namespace

TEST_CASE("buffers: the replica's buffer range is the members' batch-weighted mean") {
  SUBCASE("whole pushes and replies") { checkTwoSteps(0); }
  SUBCASE("in parts, the buffers starting inside a part") { checkTwoSteps(kPartBytes); }
}

TEST_CASE("buffers: a push stating another buffer count than the group's is refused") {
  testing::MiniCluster c(zeroModel(0), momentumWithDecay(0));
  c.configure({{1, 4}}, 1);
  client::GroupClient a(c.ctx, c.assignment(1, 1), 1, 5000ms);
  a.setBufferCount(kBuffers);
  std::vector<float> params(kParams);
  auto pulled = testbed::pullWhenReady(a, params);
  REQUIRE(pulled.isOk());
  auto first = a.push(pulled->step, pushed(0.1f, 1.0f), 4, 0, 0, params);
  REQUIRE_MESSAGE(first.isOk(), first.status().toString());

  RpcClient raw(c.ctx, (*c.group)->endpoint(), MessageLimits{});
  for (std::uint64_t count : {std::uint64_t{0}, std::uint64_t{3}, std::uint64_t{kParams}}) {
    CAPTURE(count);
    OutMessage msg = testing::rawPush(1, 1, first->step, pushed(0.1f, 1.0f));
    msg.header().getBody().getPush().setBufferCount(count);
    auto r = raw.call(std::move(msg), 3000ms);
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("buffer values") != std::string::npos);
  }
}
