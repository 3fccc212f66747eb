// Softmax regression: logits = x W^T + b. Parameters W (C×D) | b (C).
#include <algorithm>
#include <random>

#include "contract.h"
#include "groupsgd/kernels/gemm.h"
#include "layer_math.h"
#include "models_impl.h"
#include "random.h"
#include "scratch.h"

namespace groupsgd::kernels::detail {
namespace {

// Small enough that the initial loss is ~ln(C); the problem is convex, no symmetry to break.
constexpr double kInitStddev = 0.01;

class SoftmaxModel final : public Model {
 public:
  SoftmaxModel(std::size_t input_dim, std::size_t classes) : d_(input_dim), c_(classes) {}

  std::size_t paramCount() const override { return c_ * d_ + c_; }
  std::size_t inputDim() const override { return d_; }
  std::size_t numClasses() const override { return c_; }

  void init(std::span<float> params, std::uint64_t seed) const override {
    GSGD_KERNEL_REQUIRE(params.size() == paramCount());
    std::mt19937_64 rng(seed);
    fillNormal(params.first(c_ * d_), kInitStddev, rng);
    std::fill(params.begin() + c_ * d_, params.end(), 0.0f);
  }

  float lossAndGrad(std::span<const float> params, const float* x, const std::int32_t* labels,
                    std::size_t batch, std::span<float> grad) override {
    GSGD_KERNEL_REQUIRE(params.size() == paramCount() && grad.size() == paramCount());
    if (batch == 0) {
      std::fill(grad.begin(), grad.end(), 0.0f);
      return 0.0f;
    }
    float* dz = forward(params, x, batch);
    const float loss = softmaxXentBackward(dz, labels, batch, c_);
    gemm(Transpose::kYes, Transpose::kNo, c_, d_, batch, 1.0f, dz, c_, x, d_, 0.0f, grad.data(),
         d_);
    sumRows(dz, batch, c_, grad.data() + c_ * d_);
    return loss;
  }

  void predict(std::span<const float> params, const float* x, std::size_t batch,
               std::int32_t* out_labels) override {
    GSGD_KERNEL_REQUIRE(params.size() == paramCount());
    if (batch == 0) return;
    argmaxRows(forward(params, x, batch), batch, c_, out_labels);
  }

 private:
  // Returns the batch×C logits in scratch.
  float* forward(std::span<const float> params, const float* x, std::size_t batch) {
    float* logits = logits_.get(batch * c_);
    broadcastRows(params.data() + c_ * d_, batch, c_, logits);
    gemm(Transpose::kNo, Transpose::kYes, batch, c_, d_, 1.0f, x, d_, params.data(), d_, 1.0f,
         logits, c_);
    return logits;
  }

  std::size_t d_, c_;
  Scratch logits_;
};

}  // namespace

std::unique_ptr<Model> makeSoftmaxModel(std::size_t input_dim, std::size_t classes) {
  return std::make_unique<SoftmaxModel>(input_dim, classes);
}

}  // namespace groupsgd::kernels::detail
