// The zero-copy data path end to end: a gradient computed into GroupClient's send buffer
// is pushed without a copy, and the group PS's replica (sent as it is, written in place
// once no reply holds it) comes back right step after step.
#include <cmath>

#include "cluster_fixture.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

groupps::GroupServerConfig sgd(float lr) {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kSgd, lr, 0.0f, 0.0f};
  g.exchange_period = 1000;  // no exchange: the replica moves by the group steps alone
  return g;
}

}  // namespace

TEST_CASE("zero-copy push: a gradient written into gradientBuffer() trains like a copied one") {
  testing::MiniCluster in_place(testing::smallModel(), sgd(0.5f)),
      copied(testing::smallModel(), sgd(0.5f));
  in_place.configure({{1, 4}}, 1, 1000);
  copied.configure({{1, 4}}, 1, 1000);
  client::GroupClient a(in_place.ctx, in_place.assignment(1, 1), 1, 5000ms);
  client::GroupClient b(copied.ctx, copied.assignment(1, 1), 1, 5000ms);
  std::vector<float> pa(in_place.params), pb(copied.params);
  auto sa = testbed::pullWhenReady(a, pa);
  auto sb = testbed::pullWhenReady(b, pb);
  REQUIRE(sa.isOk());
  REQUIRE(sb.isOk());
  REQUIRE(pa == pb);
  const std::vector<float> start = pa;
  std::uint64_t step_a = sa->step, step_b = sb->step;
  for (int step = 1; step <= 4; ++step) {
    CAPTURE(step);
    std::vector<float> g(in_place.params);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.001f * static_cast<float>(i % 7) - 0.002f;
    auto buf = a.gradientBuffer();
    REQUIRE(buf.size() == g.size());
    std::copy(g.begin(), g.end(), buf.begin());
    auto ra = a.push(step_a, buf, 4, 0.0f, 0.0f, pa);
    auto rb = b.push(step_b, g, 4, 0.0f, 0.0f, pb);
    REQUIRE(ra.isOk());
    REQUIRE(rb.isOk());
    REQUIRE(ra->accepted);
    step_a = ra->step;
    step_b = rb->step;
    CHECK(pa == pb);  // bit for bit: the same arithmetic on the same bytes
    // SGD, one member: every step moves the replica by -lr * g.
    for (std::size_t i = 0; i < pa.size(); i += 97) {
      CHECK(pa[i] == doctest::Approx(start[i] - 0.5f * step * g[i]).epsilon(1e-4));
    }
  }
}
