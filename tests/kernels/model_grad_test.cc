#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "groupsgd/kernels/model.h"
#include "test_util.h"

using namespace groupsgd::kernels;
using groupsgd::kernels::testing::randomVector;

namespace {

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::size_t size;
};

Batch randomBatch(std::size_t batch, std::size_t dim, std::size_t classes, std::uint64_t seed) {
  Batch b{randomVector(batch * dim, seed, 0.0f, 1.0f), std::vector<std::int32_t>(batch), batch};
  for (std::size_t i = 0; i < batch; ++i)
    b.y[i] = static_cast<std::int32_t>((i * 7 + seed) % classes);
  return b;
}

// Independent double-precision mean cross-entropy, written from the layouts documented in
// model.h: the finite differences below run on it, so float rounding and the code under test
// stay out of the numeric side.
// The CNN's logits for one image, by direct convolution in double from the layout in model.h:
// kernels [out][ky][kx][in], maps [y][x][channel], dense inputs in (y, x, channel) order.
std::vector<double> referenceCnnLogits(const std::vector<double>& p, const double* image,
                                       std::size_t side, std::size_t classes) {
  struct Map {
    std::size_t h, w, c;
    std::vector<double> v;
    double& at(std::size_t y, std::size_t x, std::size_t ch) { return v[(y * w + x) * c + ch]; }
  };
  std::size_t off = 0;
  auto conv_relu = [&](Map& in, std::size_t c_out) {
    const std::size_t k = kCnnKernel, patch = k * k * in.c;
    const std::size_t bias = off + c_out * patch;
    Map out{in.h - k + 1, in.w - k + 1, c_out, {}};
    out.v.resize(out.h * out.w * c_out);
    for (std::size_t y = 0; y < out.h; ++y)
      for (std::size_t x = 0; x < out.w; ++x)
        for (std::size_t o = 0; o < c_out; ++o) {
          double acc = p[bias + o];
          for (std::size_t ky = 0; ky < k; ++ky)
            for (std::size_t kx = 0; kx < k; ++kx)
              for (std::size_t i = 0; i < in.c; ++i)
                acc += p[off + ((o * k + ky) * k + kx) * in.c + i] * in.at(y + ky, x + kx, i);
          out.at(y, x, o) = std::max(acc, 0.0);
        }
    off = bias + c_out;
    return out;
  };
  auto pool = [](Map& in) {
    Map out{in.h / 2, in.w / 2, in.c, {}};
    out.v.resize(out.h * out.w * out.c);
    for (std::size_t y = 0; y < out.h; ++y)
      for (std::size_t x = 0; x < out.w; ++x)
        for (std::size_t ch = 0; ch < in.c; ++ch)
          out.at(y, x, ch) =
              std::max({in.at(2 * y, 2 * x, ch), in.at(2 * y, 2 * x + 1, ch),
                        in.at(2 * y + 1, 2 * x, ch), in.at(2 * y + 1, 2 * x + 1, ch)});
    return out;
  };
  Map m{side, side, 1, std::vector<double>(image, image + side * side)};
  m = conv_relu(m, kCnnChannels1);
  m = pool(m);
  m = conv_relu(m, kCnnChannels2);
  m = pool(m);
  std::vector<double> z(classes);
  const std::size_t f = m.v.size();
  for (std::size_t o = 0; o < classes; ++o) {
    z[o] = p[off + classes * f + o];
    for (std::size_t i = 0; i < f; ++i) z[o] += p[off + o * f + i] * m.v[i];
  }
  return z;
}

double referenceLoss(ModelKind kind, const std::vector<double>& p, const Batch& b, std::size_t dim,
                     std::size_t classes) {
  // Dense layer: out[o] = bias[o] + sum_i W[o][i] in[i], W at p[w], bias right after it.
  auto dense = [&](std::size_t w, const std::vector<double>& in, std::size_t outs, bool relu) {
    std::vector<double> out(outs);
    for (std::size_t o = 0; o < outs; ++o) {
      double acc = p[w + outs * in.size() + o];
      for (std::size_t i = 0; i < in.size(); ++i) acc += p[w + o * in.size() + i] * in[i];
      out[o] = relu ? std::max(acc, 0.0) : acc;
    }
    return out;
  };
  double total = 0;
  for (std::size_t r = 0; r < b.size; ++r) {
    std::vector<double> z(b.x.begin() + r * dim, b.x.begin() + (r + 1) * dim);
    if (kind == ModelKind::kCnn) {
      const auto side = static_cast<std::size_t>(std::lround(std::sqrt(double(dim))));
      z = referenceCnnLogits(p, z.data(), side, classes);
    } else if (kind == ModelKind::kMlp) {
      z = dense(0, z, kMlpHidden1, true);
      z = dense(kMlpHidden1 * dim + kMlpHidden1, z, kMlpHidden2, true);
      z = dense(p.size() - classes * kMlpHidden2 - classes, z, classes, false);
    } else {
      z = dense(0, z, classes, false);
    }
    double max = *std::max_element(z.begin(), z.end()), sum = 0;
    for (double v : z) sum += std::exp(v - max);
    total += std::log(sum) + max - z[b.y[r]];
  }
  return total / b.size;
}

// Compares the float analytic gradient with central differences of referenceLoss at a
// sample of parameters from each segment (begin, length) of the layout.
void gradCheck(ModelKind kind, const std::vector<std::pair<std::size_t, std::size_t>>& segments,
               std::size_t kDim = 20) {
  constexpr std::size_t kClasses = 5, kBatch = 6, kPerSegment = 12;
  constexpr double kStep = 1e-5;
  auto m = makeModel(kind, kDim, kClasses);
  REQUIRE(m != nullptr);
  std::vector<float> params(m->paramCount());
  m->init(params, 7);
  // Non-zero biases, and a point away from the init, so every parameter matters.
  auto noise = randomVector(params.size(), 99, -0.05f, 0.05f);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  Batch b = randomBatch(kBatch, kDim, kClasses, 3);

  std::vector<float> grad(params.size(), std::numeric_limits<float>::quiet_NaN());
  const float loss = m->lossAndGrad(params, b.x.data(), b.y.data(), kBatch, grad);
  for (float g : grad) REQUIRE(std::isfinite(g));  // fully overwritten
  std::vector<double> p(params.begin(), params.end());
  CHECK(loss == doctest::Approx(referenceLoss(kind, p, b, kDim, kClasses)).epsilon(1e-5));

  std::mt19937_64 rng(5);
  double worst = 0;
  for (auto [begin, len] : segments) {
    for (std::size_t s = 0; s < kPerSegment; ++s) {
      const std::size_t i = begin + rng() % len;
      const double saved = p[i];
      p[i] = saved + kStep;
      const double up = referenceLoss(kind, p, b, kDim, kClasses);
      p[i] = saved - kStep;
      const double down = referenceLoss(kind, p, b, kDim, kClasses);
      p[i] = saved;
      const double numeric = (up - down) / (2 * kStep);
      const double err =
          std::abs(numeric - grad[i]) / std::max(std::abs(numeric) + std::abs(grad[i]), 1e-4);
      worst = std::max(worst, err);
      CAPTURE(i);
      CAPTURE(numeric);
      CAPTURE(grad[i]);
      CHECK(err < 1e-3);
    }
  }
  MESSAGE(std::string(modelKindName(kind)), " gradient check: worst relative error ", worst);
}

}  // namespace

TEST_CASE("model: softmax gradient matches central finite differences") {
  const std::size_t w = 5 * 20;
  gradCheck(ModelKind::kSoftmax, {{0, w}, {w, 5}});
}

TEST_CASE("model: mlp gradient matches central finite differences in every layer") {
  const std::size_t w1 = 256 * 20, b1 = w1, w2 = b1 + 256, b2 = w2 + 128 * 256, w3 = b2 + 128,
                    b3 = w3 + 5 * 128;
  gradCheck(ModelKind::kMlp,
            {{0, w1}, {b1, 256}, {w2, 128 * 256}, {b2, 128}, {w3, 5 * 128}, {b3, 5}});
}

TEST_CASE("model: cnn gradient matches central finite differences in every layer") {
  // 16x16 images: conv1 12x12x8, pool 6x6x8, conv2 2x2x16, pool 1x1x16, dense 16 -> 5.
  const std::size_t k1 = 8 * 25, c1 = k1, k2 = c1 + 8, c2 = k2 + 16 * 200, w = c2 + 16,
                    b = w + 5 * 16;
  gradCheck(ModelKind::kCnn, {{0, k1}, {c1, 8}, {k2, 16 * 200}, {c2, 16}, {w, 5 * 16}, {b, 5}},
            16 * 16);
}

TEST_CASE("model: cnn gradient check on an odd side (pooling drops the last row)") {
  // 17x17: conv1 13x13, pool 6x6 (row/column 12 dropped), conv2 2x2, pool 1x1.
  const std::size_t k1 = 8 * 25, c1 = k1, k2 = c1 + 8, c2 = k2 + 16 * 200, w = c2 + 16,
                    b = w + 5 * 16;
  gradCheck(ModelKind::kCnn, {{0, k1}, {c1, 8}, {k2, 16 * 200}, {c2, 16}, {w, 5 * 16}, {b, 5}},
            17 * 17);
}

TEST_CASE("model: cnn takes square images of side >= 16 only") {
  CHECK(cnnPooledSide(784) == 4);
  CHECK(cnnPooledSide(256) == 1);
  CHECK(cnnPooledSide(17 * 17) == 1);
  CHECK(cnnPooledSide(15 * 15) == 0);
  CHECK(cnnPooledSide(785) == 0);
  CHECK(makeModel(ModelKind::kCnn, 20, 5) == nullptr);
  CHECK(makeModel(ModelKind::kCnn, 784, 10) != nullptr);
}

TEST_CASE("model: parameter counts follow the documented layouts") {
  CHECK(makeModel(ModelKind::kCnn)->paramCount() ==
        8 * 25 + 8 + 16 * 25 * 8 + 16 + 10 * 16 * 4 * 4 + 10);
  CHECK(makeModel(ModelKind::kSoftmax)->paramCount() == 10 * 784 + 10);
  CHECK(makeModel(ModelKind::kMlp)->paramCount() ==
        256 * 784 + 256 + 128 * 256 + 128 + 10 * 128 + 10);
  auto m = makeModel(ModelKind::kMlp, 20, 5);
  CHECK(m->inputDim() == 20);
  CHECK(m->numClasses() == 5);
}

TEST_CASE("model: softmax loss is ln(10) at zero weights and close to it after init") {
  auto m = makeModel(ModelKind::kSoftmax);
  Batch b = randomBatch(64, 784, 10, 1);
  std::vector<float> params(m->paramCount(), 0.0f);
  std::vector<float> grad(params.size());
  CHECK(m->lossAndGrad(params, b.x.data(), b.y.data(), 64, grad) ==
        doctest::Approx(std::log(10.0)).epsilon(1e-6));
  m->init(params, 42);
  CHECK(std::abs(m->lossAndGrad(params, b.x.data(), b.y.data(), 64, grad) - std::log(10.0)) < 0.05);
}

TEST_CASE("model: init is deterministic for a seed; mlp is He-normal with zero biases") {
  for (ModelKind kind : {ModelKind::kSoftmax, ModelKind::kMlp, ModelKind::kCnn}) {
    auto m = makeModel(kind);
    std::vector<float> a(m->paramCount()), b(m->paramCount()), c(m->paramCount());
    m->init(a, 1234);
    m->init(b, 1234);
    m->init(c, 1235);
    CHECK(a == b);
    CHECK(a != c);
  }
  auto m = makeModel(ModelKind::kMlp);
  std::vector<float> p(m->paramCount());
  m->init(p, 9);
  double ss = 0;
  for (std::size_t i = 0; i < 256 * 784; ++i) ss += double(p[i]) * p[i];
  CHECK(std::sqrt(ss / (256 * 784)) == doctest::Approx(std::sqrt(2.0 / 784)).epsilon(0.02));
  bool biases_zero = true;
  for (std::size_t i = 256 * 784; i < 256 * 784 + 256; ++i) biases_zero &= p[i] == 0.0f;
  CHECK(biases_zero);
  CHECK(p[p.size() - 1] == 0.0f);
}

TEST_CASE("model: an empty batch gives zero loss and a zeroed gradient") {
  std::unique_ptr<Model> models[] = {makeModel(ModelKind::kMlp, 8, 3),
                                     makeModel(ModelKind::kCnn, 256, 3)};
  for (auto& m : models) {
    std::vector<float> params(m->paramCount());
    m->init(params, 1);
    std::vector<float> grad(params.size(), std::numeric_limits<float>::quiet_NaN());
    CHECK(m->lossAndGrad(params, nullptr, nullptr, 0, grad) == 0.0f);
    CHECK(std::count(grad.begin(), grad.end(), 0.0f) == static_cast<long>(grad.size()));
  }
}

TEST_CASE("model: softmax predict returns the arg-max class") {
  auto m = makeModel(ModelKind::kSoftmax, 2, 3);
  // W rows: class 0 likes x0, class 1 likes x1, class 2 has a bias only.
  std::vector<float> params = {1, 0, 0, 1, 0, 0, /*b*/ 0, 0, 0.5f};
  const float x[] = {1, 0, 0, 1, 0.1f, 0.2f};
  std::int32_t out[3] = {-1, -1, -1};
  m->predict(params, x, 3, out);
  CHECK(out[0] == 0);
  CHECK(out[1] == 1);
  CHECK(out[2] == 2);
}

TEST_CASE("model: kind names round-trip and unknown names are refused") {
  testing::checkNamesRoundTrip<ModelKind>(
      std::initializer_list<ModelKind>{ModelKind::kSoftmax, ModelKind::kMlp, ModelKind::kCnn},
      modelKindName, parseModelKind, {"resnet", "CNN"});
}
