// MLP D-256-128-C with ReLU. Parameters W1 | b1 | W2 | b2 | W3 | b3, each W row-major
// [out][in]. Activations are kept from the forward pass for the backward pass.
#include <algorithm>
#include <cmath>
#include <random>

#include "contract.h"
#include "groupsgd/kernels/gemm.h"
#include "layer_math.h"
#include "models_impl.h"
#include "random.h"
#include "scratch.h"

namespace groupsgd::kernels::detail {
namespace {

constexpr std::size_t kH1 = kMlpHidden1;
constexpr std::size_t kH2 = kMlpHidden2;

class MlpModel final : public Model {
 public:
  MlpModel(std::size_t input_dim, std::size_t classes)
      : d_(input_dim),
        c_(classes),
        o_b1_(kH1 * d_),
        o_w2_(o_b1_ + kH1),
        o_b2_(o_w2_ + kH2 * kH1),
        o_w3_(o_b2_ + kH2),
        o_b3_(o_w3_ + c_ * kH2),
        n_(o_b3_ + c_) {}

  std::size_t paramCount() const override { return n_; }
  std::size_t inputDim() const override { return d_; }
  std::size_t numClasses() const override { return c_; }

  void init(std::span<float> params, std::uint64_t seed) const override {
    GSGD_KERNEL_REQUIRE(params.size() == n_);
    std::mt19937_64 rng(seed);
    std::fill(params.begin(), params.end(), 0.0f);  // biases
    fillNormal(params.subspan(0, kH1 * d_), std::sqrt(2.0 / d_), rng);
    fillNormal(params.subspan(o_w2_, kH2 * kH1), std::sqrt(2.0 / kH1), rng);
    fillNormal(params.subspan(o_w3_, c_ * kH2), std::sqrt(2.0 / kH2), rng);
  }

  float lossAndGrad(std::span<const float> params, const float* x, const std::int32_t* labels,
                    std::size_t batch, std::span<float> grad) override {
    GSGD_KERNEL_REQUIRE(params.size() == n_ && grad.size() == n_);
    if (batch == 0) {
      std::fill(grad.begin(), grad.end(), 0.0f);
      return 0.0f;
    }
    const float* p = params.data();
    float* g = grad.data();
    float* dz = forward(p, x, batch);
    const float loss = softmaxXentBackward(dz, labels, batch, c_);
    float* dh2 = dh2_.get(batch * kH2);
    float* dh1 = dh1_.get(batch * kH1);
    const float* h1 = h1_.data();
    const float* h2 = h2_.data();

    hiddenBackward(p, g, batch, dz, c_, h2, kH2, o_w3_, o_b3_, dh2);    // layer 3
    hiddenBackward(p, g, batch, dh2, kH2, h1, kH1, o_w2_, o_b2_, dh1);  // layer 2
    // Layer 1: no gradient w.r.t. x is needed.
    gemm(Transpose::kYes, Transpose::kNo, kH1, d_, batch, 1.0f, dh1, kH1, x, d_, 0.0f, g, d_);
    sumRows(dh1, batch, kH1, g + o_b1_);
    return loss;
  }

  void predict(std::span<const float> params, const float* x, std::size_t batch,
               std::int32_t* out_labels) override {
    GSGD_KERNEL_REQUIRE(params.size() == n_);
    if (batch == 0) return;
    argmaxRows(forward(params.data(), x, batch), batch, c_, out_labels);
  }

 private:
  // The backward pass of a dense layer over a ReLU hidden layer h (batch×in): dW = dZ^T h,
  // db = colsum dZ (into g at w_off, b_off) and dh = dZ W masked by ReLU.
  static void hiddenBackward(const float* p, float* g, std::size_t batch, const float* dz,
                             std::size_t out, const float* h, std::size_t in, std::size_t w_off,
                             std::size_t b_off, float* dh) {
    gemm(Transpose::kYes, Transpose::kNo, out, in, batch, 1.0f, dz, out, h, in, 0.0f, g + w_off,
         in);
    sumRows(dz, batch, out, g + b_off);
    gemm(Transpose::kNo, Transpose::kNo, batch, in, out, 1.0f, dz, out, p + w_off, in, 0.0f, dh,
         in);
    reluBackward(h, dh, batch * in);
  }

  // Fills h1, h2 (post-ReLU) and returns the batch×C logits, all in scratch.
  float* forward(const float* p, const float* x, std::size_t batch) {
    float* h1 = h1_.get(batch * kH1);
    float* h2 = h2_.get(batch * kH2);
    float* z = z_.get(batch * c_);
    broadcastRows(p + o_b1_, batch, kH1, h1);
    gemm(Transpose::kNo, Transpose::kYes, batch, kH1, d_, 1.0f, x, d_, p, d_, 1.0f, h1, kH1);
    reluInPlace(h1, batch * kH1);
    broadcastRows(p + o_b2_, batch, kH2, h2);
    gemm(Transpose::kNo, Transpose::kYes, batch, kH2, kH1, 1.0f, h1, kH1, p + o_w2_, kH1, 1.0f, h2,
         kH2);
    reluInPlace(h2, batch * kH2);
    broadcastRows(p + o_b3_, batch, c_, z);
    gemm(Transpose::kNo, Transpose::kYes, batch, c_, kH2, 1.0f, h2, kH2, p + o_w3_, kH2, 1.0f, z,
         c_);
    return z;
  }

  std::size_t d_, c_;
  std::size_t o_b1_, o_w2_, o_b2_, o_w3_, o_b3_, n_;  // offsets into the flat vector
  Scratch h1_, h2_, z_, dh1_, dh2_;
};

}  // namespace

std::unique_ptr<Model> makeMlpModel(std::size_t input_dim, std::size_t classes) {
  return std::make_unique<MlpModel>(input_dim, classes);
}

}  // namespace groupsgd::kernels::detail
