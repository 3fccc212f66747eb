#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/optimizer.h"
#include "test_util.h"

using namespace groupsgd::kernels;

namespace {

// Three well-separated classes in [0,1]^8: class c is bright on features j % 3 == c.
struct Problem : testing::LabelledPoints {
  static constexpr std::size_t kDim = 8, kClasses = 3, kCount = 96;
};

void trainAndCheck(ModelKind kind, OptimizerConfig cfg) {
  Problem prob = testing::separablePoints<Problem>(17, 0.1f, 0.8f, 0.2f, /*draw_class=*/false);
  auto m = makeModel(kind, Problem::kDim, Problem::kClasses);
  std::vector<float> params(m->paramCount()), grad(m->paramCount());
  m->init(params, 3);
  Optimizer opt(cfg, params.size());
  constexpr std::size_t kBatch = 16, kSteps = 300;
  float first = 0, last = 0;
  for (std::size_t step = 0; step < kSteps; ++step) {
    const std::size_t off = (step * kBatch) % Problem::kCount;
    last = m->lossAndGrad(params, prob.x.data() + off * Problem::kDim, prob.y.data() + off, kBatch,
                          grad);
    if (step == 0) first = last;
    opt.step(params, grad);
  }
  std::vector<float> full_grad(params.size());
  const float final_loss =
      m->lossAndGrad(params, prob.x.data(), prob.y.data(), Problem::kCount, full_grad);
  const std::string name = std::string(modelKindName(kind)) + "/" + optimizerKindName(cfg.kind);
  MESSAGE(name, ": loss ", first, " -> ", final_loss);
  CHECK(final_loss < 0.1f * first);
  std::vector<std::int32_t> pred(Problem::kCount);
  m->predict(params, prob.x.data(), Problem::kCount, pred.data());
  CHECK(pred == prob.y);
}

}  // namespace

TEST_CASE("training: sgd on softmax drives the loss down on a separable problem") {
  trainAndCheck(ModelKind::kSoftmax, {OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f});
}

TEST_CASE("training: momentum on the mlp drives the loss down on a separable problem") {
  trainAndCheck(ModelKind::kMlp, {OptimizerKind::kMomentum, 0.05f, 0.9f, 0.0f});
}

TEST_CASE("training: nesterov with weight decay on the mlp drives the loss down") {
  trainAndCheck(ModelKind::kMlp, {OptimizerKind::kNesterov, 0.05f, 0.9f, 1e-4f});
}

namespace {

// Three classes of 16x16 images: a bright 5x5 square in the top-left, top-right or bottom
// middle, on a noisy background.
void squares(std::size_t count, std::vector<float>* x, std::vector<std::int32_t>* y) {
  constexpr std::size_t kSide = 16;
  const std::size_t corner[3][2] = {{2, 2}, {2, 9}, {9, 5}};
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<float> noise(0.0f, 0.3f);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t c = i % 3;
    y->push_back(static_cast<std::int32_t>(c));
    for (std::size_t r = 0; r < kSide; ++r)
      for (std::size_t q = 0; q < kSide; ++q) {
        const bool in =
            r >= corner[c][0] && r < corner[c][0] + 5 && q >= corner[c][1] && q < corner[c][1] + 5;
        x->push_back(in ? 0.9f : noise(rng));
      }
  }
}

}  // namespace

TEST_CASE("training: momentum on the cnn learns to tell squares apart") {
  constexpr std::size_t kCount = 48, kBatch = 12, kSteps = 150, kDim = 256;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  squares(kCount, &x, &y);
  auto m = makeModel(ModelKind::kCnn, kDim, 3);
  REQUIRE(m != nullptr);
  std::vector<float> params(m->paramCount()), grad(m->paramCount());
  m->init(params, 3);
  Optimizer opt({OptimizerKind::kMomentum, 0.02f, 0.9f, 0.0f}, params.size());
  const float first = m->lossAndGrad(params, x.data(), y.data(), kCount, grad);
  for (std::size_t step = 0; step < kSteps; ++step) {
    const std::size_t off = (step * kBatch) % kCount;
    m->lossAndGrad(params, x.data() + off * kDim, y.data() + off, kBatch, grad);
    opt.step(params, grad);
  }
  const float final_loss = m->lossAndGrad(params, x.data(), y.data(), kCount, grad);
  MESSAGE("cnn/momentum: loss ", first, " -> ", final_loss);
  CHECK(final_loss < 0.1f * first);
  std::vector<std::int32_t> pred(kCount);
  m->predict(params, x.data(), kCount, pred.data());
  CHECK(pred == y);
}
