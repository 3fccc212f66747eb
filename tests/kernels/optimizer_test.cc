#include "groupsgd/kernels/optimizer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "groupsgd/kernels/ops.h"

using namespace groupsgd::kernels;

namespace {

constexpr OptimizerKind kAllKinds[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                       OptimizerKind::kNesterov, OptimizerKind::kAdam,
                                       OptimizerKind::kAdamW};

// Two steps from p = [1, -2] with g1 = [0.5, -1], g2 = [0.25, 2], lr 0.1, momentum 0.9.
struct TwoSteps {
  std::vector<float> after1, after2;
};

TwoSteps runTwoSteps(OptimizerConfig cfg) {
  Optimizer opt(cfg, 2);
  std::vector<float> p = {1.0f, -2.0f};
  const std::vector<float> g1 = {0.5f, -1.0f}, g2 = {0.25f, 2.0f};
  TwoSteps out;
  opt.step(p, g1);
  out.after1 = p;
  opt.step(p, g2);
  out.after2 = p;
  return out;
}

void checkNear(const std::vector<float>& got, std::vector<double> want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
}

}  // namespace

TEST_CASE("optimizer: sgd with weight decay, two hand-computed steps") {
  // g' = g + 0.1 p.  step 1: g' = [0.6, -1.2],       p = [0.94, -1.88]
  //                  step 2: g' = [0.344, 1.812],    p = [0.9056, -2.0612]
  auto r = runTwoSteps({OptimizerKind::kSgd, 0.1f, 0.9f, 0.1f});
  checkNear(r.after1, {0.94, -1.88});
  checkNear(r.after2, {0.9056, -2.0612});
}

TEST_CASE("optimizer: momentum, two hand-computed steps") {
  // step 1: v = [0.5, -1],                    p = [0.95, -1.9]
  // step 2: v = 0.9*[0.5, -1] + g2 = [0.7, 1.1], p = [0.88, -2.01]
  auto r = runTwoSteps({OptimizerKind::kMomentum, 0.1f, 0.9f, 0.0f});
  checkNear(r.after1, {0.95, -1.9});
  checkNear(r.after2, {0.88, -2.01});
}

TEST_CASE("optimizer: nesterov with weight decay, two hand-computed steps") {
  // step 1: g' = [0.6, -1.2], v = g', update g' + 0.9 v = [1.14, -2.28], p = [0.886, -1.772]
  // step 2: g' = [0.3386, 1.8228], v = [0.8786, 0.7428],
  //         update = [1.12934, 2.49132], p = [0.773066, -2.021132]
  auto r = runTwoSteps({OptimizerKind::kNesterov, 0.1f, 0.9f, 0.1f});
  checkNear(r.after1, {0.886, -1.772});
  checkNear(r.after2, {0.773066, -2.021132});
}

TEST_CASE("optimizer: reset zeroes the velocity, setLearningRate takes effect") {
  Optimizer opt({OptimizerKind::kMomentum, 0.1f, 0.9f, 0.0f}, 1);
  std::vector<float> p = {0.0f};
  const std::vector<float> g = {1.0f};
  opt.step(p, g);  // v = 1, p = -0.1
  opt.reset();
  opt.setLearningRate(0.5f);
  CHECK(opt.config().lr == 0.5f);
  opt.step(p, g);  // v = 1 again, p = -0.1 - 0.5
  CHECK(p[0] == doctest::Approx(-0.6));
}

TEST_CASE("optimizer: grad_scale gives bit for bit the step on a gradient scaled first") {
  // The group PS steps with the sum of batch-weighted gradients and 1/samples instead of
  // scaling the sum into the mean first: the replicas must not depend on which it does.
  const std::size_t n = 10007;  // odd: the vector loops' tails are covered too
  std::vector<float> g(n), p0(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>((i * 7919) % 1000) * 0.37f - 180.0f;
    p0[i] = static_cast<float>((i * 104729) % 997) * 0.01f - 5.0f;
  }
  const float mean_of = 1.0f / 224.0f;
  for (OptimizerKind kind : kAllKinds) {
    CAPTURE(optimizerKindName(kind));
    OptimizerConfig cfg{kind, 0.05f, 0.9f, 1e-4f};
    Optimizer fused(cfg, n), two_pass(cfg, n);
    std::vector<float> pf = p0, pt = p0;
    for (int step = 0; step < 3; ++step) {
      fused.step(pf, g, mean_of);
      std::vector<float> mean = g;
      scale(mean, mean_of);
      two_pass.step(pt, mean);
    }
    CHECK(std::memcmp(pf.data(), pt.data(), n * sizeof(float)) == 0);
    CHECK(pf != p0);  // it moved
  }
}

TEST_CASE("optimizer: a gradient in pieces steps bit for bit as the whole, decay ranges across") {
  // The central PS steps on a received delta's parts where they lie.
  const std::size_t n = 10007;
  std::vector<float> g(n), p0(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>((i * 7919) % 1000) * 0.37f - 180.0f;
    p0[i] = static_cast<float>((i * 104729) % 997) * 0.01f - 5.0f;
  }
  // Pieces of 3000, 1, 4000 and 3006; a no-decay range straddles the first two boundaries.
  const std::vector<ElementRange> no_decay = {{2990, 3005}, {9000, 9100}};
  const std::span<const float> all(g);
  const std::span<const float> pieces[] = {all.subspan(0, 3000), all.subspan(3000, 1),
                                           all.subspan(3001, 4000), all.subspan(7001)};
  for (OptimizerKind kind : kAllKinds) {
    CAPTURE(optimizerKindName(kind));
    OptimizerConfig cfg{kind, 0.05f, 0.9f, 1e-2f};
    Optimizer in_pieces(cfg, n, no_decay), whole(cfg, n, no_decay);
    std::vector<float> pp = p0, pw = p0;
    for (int step = 0; step < 3; ++step) {
      in_pieces.step(pp, std::span<const std::span<const float>>(pieces), -0.5f);
      whole.step(pw, g, -0.5f);
    }
    CHECK(std::memcmp(pp.data(), pw.data(), n * sizeof(float)) == 0);
    CHECK(pp != p0);
    CHECK(std::equal(in_pieces.state().begin(), in_pieces.state().end(), whole.state().begin()));
  }
}

TEST_CASE("optimizer: kind names round-trip and unknown names are refused") {
  for (OptimizerKind k : kAllKinds) {
    OptimizerKind parsed{};
    REQUIRE(parseOptimizerKind(optimizerKindName(k), &parsed));
    CHECK(parsed == k);
  }
  OptimizerKind unused = OptimizerKind::kSgd;
  CHECK_FALSE(parseOptimizerKind("Adam", &unused));
  CHECK_FALSE(parseOptimizerKind("lamb", &unused));
  CHECK_FALSE(parseOptimizerKind("", &unused));
  CHECK(std::string_view(optimizerKindName(OptimizerKind::kNesterov)) == "nesterov");
}
