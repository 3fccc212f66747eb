// Adam and AdamW against the torch.optim formulas evaluated in double, the no-decay
// ranges, and the state export/import used by checkpoints.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "groupsgd/kernels/optimizer.h"

using namespace groupsgd::kernels;

namespace {

// torch.optim.Adam (decoupled = false) / AdamW (true) for one parameter, in double.
struct AdamReference {
  double b1, b2, eps, lr, wd;
  bool decoupled;
  double m = 0, v = 0;
  int t = 0;

  double step(double p, double g) {
    ++t;
    if (decoupled) {
      p *= 1 - lr * wd;
    } else {
      g += wd * p;
    }
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    return p - lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

float gradAt(std::size_t i, int step) {
  return std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(step)) *
         (1.0f + static_cast<float>(i % 5));
}

void compareWithReference(OptimizerKind kind, float wd, std::vector<ElementRange> no_decay,
                          const std::vector<bool>& decayed) {
  const std::size_t n = decayed.size();
  const OptimizerConfig cfg{kind, 2e-3f, 0.0f, wd, 0.9f, 0.999f, 1e-8f};
  Optimizer opt(cfg, n, no_decay);
  std::vector<float> p(n);
  std::vector<double> ref_p(n);
  std::vector<AdamReference> ref;
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = 0.5f - 0.01f * static_cast<float>(i);
    ref_p[i] = p[i];
    ref.push_back({0.9, 0.999, 1e-8, 2e-3, decayed[i] ? static_cast<double>(wd) : 0.0,
                   kind == OptimizerKind::kAdamW});
  }
  std::vector<float> g(n);
  for (int step = 1; step <= 50; ++step) {
    for (std::size_t i = 0; i < n; ++i) g[i] = gradAt(i, step);
    opt.step(p, g);
    for (std::size_t i = 0; i < n; ++i) ref_p[i] = ref[i].step(ref_p[i], g[i]);
  }
  CHECK(opt.stepCount() == 50);
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    // 50 steps of lr 2e-3 move p by up to 0.1; float rounding stays far below 1e-5.
    CHECK(std::fabs(p[i] - ref_p[i]) < 1e-5);
  }
}

}  // namespace

TEST_CASE("optimizer: adam and adamw match torch's formulas in double over 50 steps") {
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    CAPTURE(optimizerKindName(kind));
    compareWithReference(kind, 0.0f, {}, std::vector<bool>(37, true));
    compareWithReference(kind, 0.1f, {}, std::vector<bool>(37, true));
  }
}

TEST_CASE("optimizer: adam first step is lr * sign(g) (bias correction)") {
  // After one step m/(1-b1) = g and sqrt(v/(1-b2)) = |g|: the move is lr*g/(|g|+eps).
  Optimizer opt({OptimizerKind::kAdam, 0.01f, 0.0f, 0.0f}, 3);
  std::vector<float> p = {1.0f, 1.0f, 1.0f};
  opt.step(p, std::vector<float>{3.0f, -0.5f, 1e-3f});
  CHECK(p[0] == doctest::Approx(0.99).epsilon(1e-6));
  CHECK(p[1] == doctest::Approx(1.01).epsilon(1e-6));
  CHECK(p[2] == doctest::Approx(1.0 - 0.01 * 1e-3 / (1e-3 + 1e-8)).epsilon(1e-6));
}

TEST_CASE("optimizer: adamw decay is decoupled, adam's goes through the moments") {
  // Zero gradient: adamw only shrinks p by lr*wd; adam moves it by lr (the L2 term is the
  // whole gradient, normalised to sign 1 on the first step).
  std::vector<float> pw = {2.0f}, pa = {2.0f};
  const std::vector<float> zero = {0.0f};
  Optimizer adamw({OptimizerKind::kAdamW, 0.1f, 0.0f, 0.5f}, 1);
  Optimizer adam({OptimizerKind::kAdam, 0.1f, 0.0f, 0.5f}, 1);
  adamw.step(pw, zero);
  adam.step(pa, zero);
  CHECK(pw[0] == doctest::Approx(2.0 * (1 - 0.1 * 0.5)));
  CHECK(pa[0] == doctest::Approx(1.9).epsilon(1e-6));
}

TEST_CASE("optimizer: no-decay ranges take wd 0 for every kind, the rest is unchanged") {
  std::vector<bool> decayed(40, true);
  for (std::size_t i = 5; i < 9; ++i) decayed[i] = false;
  for (std::size_t i = 30; i < 40; ++i) decayed[i] = false;
  // Unsorted and overlapping on purpose: the optimizer normalises them.
  const std::vector<ElementRange> ranges = {{30, 35}, {5, 9}, {33, 40}};
  compareWithReference(OptimizerKind::kAdamW, 0.2f, ranges, decayed);
  compareWithReference(OptimizerKind::kAdam, 0.2f, ranges, decayed);
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kNesterov}) {
    CAPTURE(optimizerKindName(kind));
    // Ranged vs one optimizer per element with wd or 0: bit for bit the same.
    const OptimizerConfig with{kind, 0.05f, 0.9f, 0.3f};
    OptimizerConfig without = with;
    without.weight_decay = 0.0f;
    Optimizer ranged(with, 40, ranges);
    std::vector<float> p(40, 1.5f), q(40, 1.5f);
    std::vector<Optimizer> single;
    for (std::size_t i = 0; i < 40; ++i) single.emplace_back(decayed[i] ? with : without, 1);
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g(40);
      for (std::size_t i = 0; i < 40; ++i) g[i] = gradAt(i, step);
      ranged.step(p, g);
      for (std::size_t i = 0; i < 40; ++i)
        single[i].step(std::span<float>(q).subspan(i, 1), std::span<const float>(g).subspan(i, 1));
    }
    CHECK(std::memcmp(p.data(), q.data(), p.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("optimizer: clipRanges clips, shifts, sorts and merges") {
  const std::vector<ElementRange> r = {{90, 120}, {0, 4}, {10, 20}, {15, 30}, {40, 40}};
  CHECK(clipRanges(r, 0, 1000) == std::vector<ElementRange>{{0, 4}, {10, 30}, {90, 120}});
  CHECK(clipRanges(r, 12, 88) == std::vector<ElementRange>{{0, 18}, {78, 88}});
  CHECK(clipRanges(r, 30, 10).empty());
}

TEST_CASE("optimizer: state() and setState() carry a run across optimizers exactly") {
  for (OptimizerKind kind : {OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kAdamW,
                             OptimizerKind::kSgd}) {
    CAPTURE(optimizerKindName(kind));
    const OptimizerConfig cfg{kind, 1e-2f, 0.9f, 1e-2f};
    const std::size_t n = 17;
    Optimizer straight(cfg, n), first(cfg, n);
    std::vector<float> p(n, 0.25f), g(n);
    for (int step = 1; step <= 4; ++step) {
      for (std::size_t i = 0; i < n; ++i) g[i] = gradAt(i, step);
      straight.step(p, g);
    }
    std::vector<float> q(n, 0.25f);
    for (int step = 1; step <= 2; ++step) {
      for (std::size_t i = 0; i < n; ++i) g[i] = gradAt(i, step);
      first.step(q, g);
    }
    CHECK(first.state().size() == optimizerStateBuffers(kind) * n);
    const std::vector<float> saved(first.state().begin(), first.state().end());
    Optimizer resumed(cfg, n);
    REQUIRE(resumed.setState(saved, first.stepCount()));
    CHECK(resumed.stepCount() == 2);
    CHECK_FALSE(resumed.setState(std::vector<float>(n * 3), 1));  // wrong size: refused
    for (int step = 3; step <= 4; ++step) {
      for (std::size_t i = 0; i < n; ++i) g[i] = gradAt(i, step);
      resumed.step(q, g);
    }
    CHECK(std::memcmp(p.data(), q.data(), n * sizeof(float)) == 0);
    resumed.reset();
    CHECK(resumed.stepCount() == 0);
  }
}

TEST_CASE("optimizer: setLearningRate applies to adamw's step and its decoupled decay") {
  Optimizer opt({OptimizerKind::kAdamW, 0.1f, 0.0f, 0.5f}, 1);
  std::vector<float> p = {1.0f};
  opt.setLearningRate(0.2f);
  opt.step(p, std::vector<float>{4.0f});  // p = 1*(1 - 0.2*0.5) - 0.2*sign(4)
  CHECK(p[0] == doctest::Approx(0.9 - 0.2).epsilon(1e-6));
}
