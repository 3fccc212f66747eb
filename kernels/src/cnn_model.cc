// LeNet-like CNN: conv 5x5 1->8, ReLU, maxpool 2, conv 5x5 8->16, ReLU, maxpool 2, dense.
// Convolutions are im2col + GEMM on NHWC maps: with one im2col row per output pixel, a
// convolution is col (pixels × k·k·Cin) times K^T (k·k·Cin × Cout), and its weight gradient
// is dOut^T · col. Activations are kept from the forward pass for the backward pass.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "contract.h"
#include "conv_math.h"
#include "groupsgd/kernels/gemm.h"
#include "layer_math.h"
#include "models_impl.h"
#include "random.h"
#include "scratch.h"

namespace groupsgd::kernels {

std::size_t cnnPooledSide(std::size_t input_dim) {
  const auto side = static_cast<std::size_t>(std::llround(std::sqrt(double(input_dim))));
  if (side * side != input_dim || side < kCnnMinSide) return 0;
  return CnnLayout::of(input_dim, 1).pool2;
}

CnnLayout CnnLayout::of(std::size_t input_dim, std::size_t classes) {
  CnnLayout l;
  l.side = static_cast<std::size_t>(std::llround(std::sqrt(double(input_dim))));
  l.conv1 = l.side - kCnnKernel + 1;
  l.pool1 = l.conv1 / 2;
  l.conv2 = l.pool1 - kCnnKernel + 1;
  l.pool2 = l.conv2 / 2;
  l.flat = kCnnChannels2 * l.pool2 * l.pool2;
  l.k1 = 0;
  l.c1 = l.k1 + kCnnChannels1 * kCnnKernel * kCnnKernel;
  l.k2 = l.c1 + kCnnChannels1;
  l.c2 = l.k2 + kCnnChannels2 * kCnnKernel * kCnnKernel * kCnnChannels1;
  l.w = l.c2 + kCnnChannels2;
  l.b = l.w + classes * l.flat;
  l.params = l.b + classes;
  return l;
}

namespace detail {
namespace {

constexpr std::size_t kK = kCnnKernel;
constexpr std::size_t kC1 = kCnnChannels1;
constexpr std::size_t kC2 = kCnnChannels2;
constexpr std::size_t kPatch1 = kK * kK * 1;    // im2col row length, layer 1
constexpr std::size_t kPatch2 = kK * kK * kC1;  // im2col row length, layer 2

class CnnModel final : public Model {
 public:
  CnnModel(std::size_t input_dim, std::size_t classes)
      : d_(input_dim), c_(classes), l_(CnnLayout::of(input_dim, classes)) {}

  std::size_t paramCount() const override { return l_.params; }
  std::size_t inputDim() const override { return d_; }
  std::size_t numClasses() const override { return c_; }

  void init(std::span<float> params, std::uint64_t seed) const override {
    GSGD_KERNEL_REQUIRE(params.size() == l_.params);
    std::mt19937_64 rng(seed);
    std::fill(params.begin(), params.end(), 0.0f);  // biases
    fillNormal(params.subspan(0, kC1 * kPatch1), std::sqrt(2.0 / kPatch1), rng);
    fillNormal(params.subspan(l_.k2, kC2 * kPatch2), std::sqrt(2.0 / kPatch2), rng);
    fillNormal(params.subspan(l_.w, c_ * l_.flat), std::sqrt(2.0 / l_.flat), rng);
  }

  float lossAndGrad(std::span<const float> params, const float* x, const std::int32_t* labels,
                    std::size_t batch, std::span<float> grad) override {
    GSGD_KERNEL_REQUIRE(params.size() == l_.params && grad.size() == l_.params);
    if (batch == 0) {
      std::fill(grad.begin(), grad.end(), 0.0f);
      return 0.0f;
    }
    const float* p = params.data();
    float* g = grad.data();
    float* dz = forward(p, x, batch);
    const float loss = softmaxXentBackward(dz, labels, batch, c_);
    const std::size_t m1 = batch * l_.conv1 * l_.conv1, m2 = batch * l_.conv2 * l_.conv2;
    const MapShape s_h1{batch, l_.conv1, l_.conv1, kC1}, s_a1{batch, l_.pool1, l_.pool1, kC1};
    const MapShape s_h2{batch, l_.conv2, l_.conv2, kC2};

    // Dense: dW = dZ^T a2, db = colsum dZ, da2 = dZ W.
    gemm(Transpose::kYes, Transpose::kNo, c_, l_.flat, batch, 1.0f, dz, c_, a2_.data(), l_.flat,
         0.0f, g + l_.w, l_.flat);
    sumRows(dz, batch, c_, g + l_.b);
    float* da2 = da2_.get(batch * l_.flat);
    gemm(Transpose::kNo, Transpose::kNo, batch, l_.flat, c_, 1.0f, dz, c_, p + l_.w, l_.flat, 0.0f,
         da2, l_.flat);
    // Pool 2 and ReLU 2.
    float* dh2 = dh2_.get(s_h2.size());
    maxPool2Backward(da2, arg2_.data(), batch * l_.flat, dh2, s_h2.size());
    reluBackward(h2_.data(), dh2, s_h2.size());
    // Conv 2: dK2 = dH2^T col2, dc2 = colsum dH2, dcol2 = dH2 K2, then back to the map.
    gemm(Transpose::kYes, Transpose::kNo, kC2, kPatch2, m2, 1.0f, dh2, kC2, col2_.data(), kPatch2,
         0.0f, g + l_.k2, kPatch2);
    sumRows(dh2, m2, kC2, g + l_.c2);
    float* dcol2 = dcol2_.get(m2 * kPatch2);
    gemm(Transpose::kNo, Transpose::kNo, m2, kPatch2, kC2, 1.0f, dh2, kC2, p + l_.k2, kPatch2, 0.0f,
         dcol2, kPatch2);
    float* da1 = da1_.get(s_a1.size());
    col2im(dcol2, s_a1, kK, da1);
    // Pool 1 and ReLU 1.
    float* dh1 = dh1_.get(s_h1.size());
    maxPool2Backward(da1, arg1_.data(), s_a1.size(), dh1, s_h1.size());
    reluBackward(h1_.data(), dh1, s_h1.size());
    // Conv 1: no gradient w.r.t. the input is needed.
    gemm(Transpose::kYes, Transpose::kNo, kC1, kPatch1, m1, 1.0f, dh1, kC1, col1_.data(), kPatch1,
         0.0f, g, kPatch1);
    sumRows(dh1, m1, kC1, g + l_.c1);
    return loss;
  }

  void predict(std::span<const float> params, const float* x, std::size_t batch,
               std::int32_t* out_labels) override {
    GSGD_KERNEL_REQUIRE(params.size() == l_.params);
    if (batch == 0) return;
    argmaxRows(forward(params.data(), x, batch), batch, c_, out_labels);
  }

 private:
  // One valid 5x5 convolution + bias + ReLU: col gets the im2col rows, out the activations.
  static void convRelu(const float* in, MapShape in_shape, const float* kernel, const float* bias,
                       std::size_t c_out, float* col, float* out) {
    const std::size_t ho = in_shape.height - kK + 1, wo = in_shape.width - kK + 1;
    const std::size_t m = in_shape.batch * ho * wo, patch = kK * kK * in_shape.channels;
    im2col(in, in_shape, kK, col);
    broadcastRows(bias, m, c_out, out);
    gemm(Transpose::kNo, Transpose::kYes, m, c_out, patch, 1.0f, col, patch, kernel, patch, 1.0f,
         out, c_out);
    reluInPlace(out, m * c_out);
  }

  // Fills every kept activation and returns the batch×C logits, all in scratch.
  float* forward(const float* p, const float* x, std::size_t batch) {
    const MapShape s_x{batch, l_.side, l_.side, 1}, s_h1{batch, l_.conv1, l_.conv1, kC1};
    const MapShape s_a1{batch, l_.pool1, l_.pool1, kC1}, s_h2{batch, l_.conv2, l_.conv2, kC2};
    float* col1 = col1_.get(batch * l_.conv1 * l_.conv1 * kPatch1);
    float* h1 = h1_.get(s_h1.size());
    float* a1 = a1_.get(s_a1.size());
    float* col2 = col2_.get(batch * l_.conv2 * l_.conv2 * kPatch2);
    float* h2 = h2_.get(s_h2.size());
    float* a2 = a2_.get(batch * l_.flat);
    float* z = z_.get(batch * c_);
    arg1_.resize(std::max(arg1_.size(), s_a1.size()));
    arg2_.resize(std::max(arg2_.size(), batch * l_.flat));

    convRelu(x, s_x, p, p + l_.c1, kC1, col1, h1);
    maxPool2(h1, s_h1, a1, arg1_.data());
    convRelu(a1, s_a1, p + l_.k2, p + l_.c2, kC2, col2, h2);
    maxPool2(h2, s_h2, a2, arg2_.data());  // batch × F in (y, x, channel) order
    broadcastRows(p + l_.b, batch, c_, z);
    gemm(Transpose::kNo, Transpose::kYes, batch, c_, l_.flat, 1.0f, a2, l_.flat, p + l_.w, l_.flat,
         1.0f, z, c_);
    return z;
  }

  std::size_t d_, c_;
  CnnLayout l_;
  Scratch col1_, h1_, a1_, col2_, h2_, a2_, z_;  // forward, kept for backward
  Scratch da2_, dh2_, dcol2_, da1_, dh1_;        // backward
  std::vector<std::uint32_t> arg1_, arg2_;       // max-pool winners
};

}  // namespace

std::unique_ptr<Model> makeCnnModel(std::size_t input_dim, std::size_t classes) {
  if (cnnPooledSide(input_dim) == 0) return nullptr;
  return std::make_unique<CnnModel>(input_dim, classes);
}

}  // namespace detail
}  // namespace groupsgd::kernels
