// optimizer.placement workers against a real group PS and central PS: a step answers
// with the batch-weighted mean gradient (the replica is not stepped), the parameters are
// asked for when an exchange is due and the central PS's rebase comes back as a
// correction; a joining member waits for the group's current parameters and everybody
// restarts its optimizer with it; a client without an optimizer refuses a mean gradient.
#include <future>
#include <thread>

#include "cluster_fixture.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kParams = 8;
constexpr float kInnerLr = 0.1f;  // the members' own (plain SGD) step in these cases

centralps::CentralConfig zeroModel() {
  centralps::CentralConfig c;
  c.param_count = kParams;
  c.outer = {kernels::OptimizerKind::kSgd, 0.5f, 0.0f, 0.0f};  // central != group's params
  return c;
}

groupps::GroupServerConfig onWorkers() {
  groupps::GroupServerConfig g;
  g.placement = groupps::OptimizerPlacement::kWorkers;
  return g;
}

// A member with its own parameters and optimizer (SGD), as the Python binding has.
struct Member {
  client::GroupClient client;
  std::vector<float> params = std::vector<float>(kParams);
  std::vector<float> mean = std::vector<float>(kParams);
  std::vector<float> correction = std::vector<float>(kParams);
  bool attach = false;

  Member(testing::MiniCluster& c, std::uint64_t id, std::uint64_t epoch)
      : client(c.ctx, c.assignment(id, epoch), 1, 5000ms) {
    client.setMeanGradientTargets(mean, correction);
  }
  client::StepAnswer pull() {
    auto r = testbed::pullWhenReady(client, params);
    REQUIRE(r.isOk());
    return *r;
  }
  // Pushes a constant gradient (the parameters too when asked), then steps like a worker.
  client::StepAnswer push(std::uint64_t step, float value, std::uint32_t batch) {
    std::vector<float> grad(kParams, value);
    auto r = client.push(step, grad, batch, 0.0f, 0.0f, params,
                         attach ? std::span<const float>(params) : std::span<const float>());
    REQUIRE_MESSAGE(r.isOk(), r.status().toString());
    attach = r->attach_parameters;
    if (r->mean_gradient) {
      if (r->correction) {
        for (std::size_t i = 0; i < kParams; ++i) params[i] += correction[i];
      }
      for (std::size_t i = 0; i < kParams; ++i) params[i] -= kInnerLr * mean[i];
    }
    return *r;
  }
};

// Both members push for `step` (member a from another thread: a push waits for the step).
std::pair<client::StepAnswer, client::StepAnswer> stepBoth(Member& a, Member& b,
                                                           std::uint64_t step) {
  auto first = std::async(std::launch::async, [&] { return a.push(step, 1.0f, 1); });
  auto second = b.push(step, 5.0f, 3);
  return {first.get(), second};
}

}  // namespace

TEST_CASE("workers placement: mean gradient replies, parameters at the exchange, correction") {
  testing::MiniCluster c(zeroModel(), onWorkers());
  c.configure({{1, 1}, {2, 3}}, 1, /*k=*/2);
  Member a(c, 1, 1), b(c, 2, 1);
  CHECK(a.pull().step == 0);
  CHECK(b.pull().step == 0);

  auto [ra, rb] = stepBoth(a, b, 0);
  // (1 x 1 + 3 x 5) / 4: the batch-weighted mean, the same for both; the replica is not
  // stepped at the group PS, so the pushes' params were left alone.
  for (std::size_t i = 0; i < kParams; ++i) {
    CHECK(a.mean[i] == 4.0f);
    CHECK(b.mean[i] == 4.0f);
  }
  CHECK(ra.mean_gradient);
  CHECK(ra.reset_optimizer);  // both pulled: the optimizers start together
  CHECK_FALSE(ra.correction);
  CHECK_FALSE(ra.attach_parameters);  // 1 step of K = 2
  CHECK(a.params == b.params);

  std::tie(ra, rb) = stepBoth(a, b, 1);
  CHECK(ra.attach_parameters);  // K steps: the next push brings the parameters
  CHECK(rb.attach_parameters);
  CHECK_FALSE(ra.reset_optimizer);
  const std::vector<float> at_cut = a.params;  // what step 2's pushes attach
  std::tie(ra, rb) = stepBoth(a, b, 2);
  CHECK_FALSE(ra.attach_parameters);
  c.configure({{1, 1}, {2, 3}}, 1, /*k=*/100);  // that exchange alone: central is known

  // The central PS applied 0.5 x the delta (at_cut - 0): its answer becomes a correction
  // central - at_cut, delivered with the next step's replies (step 2's already, when it
  // came back before the second push) to every member.
  bool corrected = ra.correction;
  CHECK(rb.correction == ra.correction);
  for (std::uint64_t step = 3; step < 8 && !corrected; ++step) {
    std::this_thread::sleep_for(100ms);  // the exchange runs in the background
    std::tie(ra, rb) = stepBoth(a, b, step);
    corrected = ra.correction;
    CHECK(rb.correction == ra.correction);
  }
  std::vector<float> central(kParams);
  RpcClient rpc(c.ctx, c.centralEndpoint(), MessageLimits{});
  REQUIRE(client::fetchCentralModel(rpc, 1, central, 3000ms).isOk());
  REQUIRE(corrected);
  CHECK(ra.model_version == 1);
  for (std::size_t i = 0; i < kParams; ++i) {
    CHECK(central[i] == doctest::Approx(0.5f * at_cut[i]));
    CHECK(a.correction[i] == doctest::Approx(central[i] - at_cut[i]));
  }
  CHECK(a.params == b.params);  // the same correction and step on both
}

TEST_CASE("workers placement: a joiner waits for the group's parameters; all optimizers restart") {
  testing::MiniCluster c(zeroModel(), onWorkers());
  c.configure({{1, 1}}, 1, /*k=*/100);
  Member a(c, 1, 1);
  a.pull();
  CHECK(a.push(0, 1.0f, 1).reset_optimizer);
  CHECK_FALSE(a.push(1, 1.0f, 1).reset_optimizer);
  // Member 2 joins: its pull is held until a push brings the group's parameters.
  c.configure({{1, 1}, {2, 1}}, 1, 100);
  Member b(c, 2, 1);
  auto joined = std::async(std::launch::async, [&] { return b.pull(); });
  CHECK(joined.wait_for(300ms) == std::future_status::timeout);
  auto r = a.push(2, 1.0f, 1);
  CHECK(r.attach_parameters);  // asked for because a member waits
  CHECK(joined.wait_for(300ms) == std::future_status::timeout);
  const std::vector<float> group = a.params;
  auto step3 = std::async(std::launch::async, [&] { return a.push(3, 1.0f, 1); });
  const client::StepAnswer pulled = joined.get();  // answered once the parameters came
  CHECK(pulled.step == 3);
  CHECK(b.params == group);
  r = b.push(3, 3.0f, 1);
  const client::StepAnswer ra = step3.get();
  CHECK(r.reset_optimizer);
  CHECK(ra.reset_optimizer);
  CHECK(a.mean == std::vector<float>(kParams, 2.0f));
  CHECK(a.params == b.params);
}

TEST_CASE("workers placement: a client without an optimizer refuses the mean gradient") {
  testing::MiniCluster c(zeroModel(), onWorkers());
  c.configure({{1, 1}}, 1, 100);
  client::GroupClient bare(c.ctx, c.assignment(1, 1), 1, 5000ms);
  std::vector<float> params(kParams), grad(kParams, 1.0f);
  REQUIRE(testbed::pullWhenReady(bare, params).isOk());
  auto r = bare.push(0, grad, 1, 0.0f, 0.0f, params);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kFailedPrecondition);
  CHECK(r.status().message().find("no optimizer") != std::string::npos);
}

TEST_CASE("server placement: replies carry the stepped replica, as before") {
  testing::MiniCluster c(zeroModel(), groupps::GroupServerConfig{});
  c.configure({{1, 1}}, 1, 100);
  Member a(c, 1, 1);
  a.pull();
  std::vector<float> grad(kParams, 1.0f);
  auto r = a.client.push(0, grad, 1, 0.0f, 0.0f, a.params);
  REQUIRE(r.isOk());
  CHECK_FALSE(r->mean_gradient);
  CHECK_FALSE(r->attach_parameters);
  CHECK(a.params != std::vector<float>(kParams, 0.0f));  // the group PS stepped it
}

TEST_CASE("workers placement: a member one step late takes that step as the others did") {
  testing::MiniCluster c(zeroModel(), onWorkers());
  c.configure({{1, 1}, {2, 1}}, 1, /*k=*/100, /*deadline_ms=*/300);
  Member a(c, 1, 1), b(c, 2, 1);
  a.pull();
  b.pull();
  stepBoth(a, b, 0);
  // Step 1 closes at its deadline with member 1 alone; member 2's push comes late.
  const client::StepAnswer ra = a.push(1, 2.0f, 1);
  CHECK(ra.step == 2);
  const client::StepAnswer rb = b.push(1, 7.0f, 1);
  CHECK_FALSE(rb.accepted);  // its gradient was dropped...
  CHECK(rb.mean_gradient);   // ...but it gets the step's mean, as member 1 had it
  CHECK(rb.step == 2);
  CHECK(b.mean == std::vector<float>(kParams, 2.0f));
  CHECK(a.params == b.params);  // the same step from the same state: still identical
  auto [ra2, rb2] = stepBoth(a, b, 2);
  CHECK(ra2.accepted);
  CHECK(rb2.accepted);
  CHECK_FALSE(rb2.reset_optimizer);  // no restart was needed
  CHECK(a.params == b.params);
}
