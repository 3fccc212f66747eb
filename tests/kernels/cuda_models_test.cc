// The CUDA MLP and CNN (libgroupsgd-gpu-models.so) against the CPU reference models: loss,
// every gradient element, predictions, batch-size changes and error paths, on random
// inputs. Without a usable GPU, or in a build without the CUDA models, every case here is
// marked skipped by doctest, and CTest reports the executable as skipped.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/model_device.h"
#include "test_util.h"

using namespace groupsgd::kernels;

namespace {

const ModelDevice kGpu{Backend::kCuda, 0};

// Evaluated once, during static initialisation, by the skip decorators below.
bool noGpu() {
  static const bool none = [] {
    const KernelStatus st = checkModelDevice(kGpu);
    if (!st.ok()) std::fprintf(stderr, "cuda model tests skipped: %s\n", st.message.c_str());
    return !st.ok();
  }();
  return none;
}

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Batch randomBatch(std::size_t batch, std::size_t dim, std::size_t classes, std::uint64_t seed) {
  Batch b{testing::randomVector(batch * dim, seed, 0.0f, 1.0f), {}};
  std::mt19937_64 rng(seed + 1);
  for (std::size_t i = 0; i < batch; ++i) b.y.push_back(static_cast<std::int32_t>(rng() % classes));
  return b;
}

// [begin, end) of each parameter tensor, in layout order (model.h).
std::vector<std::pair<std::size_t, std::size_t>> segments(ModelKind kind, std::size_t dim,
                                                          std::size_t classes) {
  std::vector<std::size_t> sizes;
  if (kind == ModelKind::kMlp) {
    sizes = {kMlpHidden1 * dim, kMlpHidden1,           kMlpHidden2 * kMlpHidden1,
             kMlpHidden2,       classes * kMlpHidden2, classes};
  } else {
    const std::size_t p = cnnPooledSide(dim), f = kCnnChannels2 * p * p;
    sizes = {kCnnChannels1 * kCnnKernel * kCnnKernel,
             kCnnChannels1,
             kCnnChannels2 * kCnnKernel * kCnnKernel * kCnnChannels1,
             kCnnChannels2,
             classes * f,
             classes};
  }
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t at = 0;
  for (std::size_t s : sizes) {
    out.emplace_back(at, at + s);
    at += s;
  }
  return out;
}

// Loss and every gradient element of the CUDA model against the CPU model, on the same
// parameters and batch. Per tensor, the worst difference relative to that tensor's largest
// CPU gradient: summation orders differ (cuBLAS/cuDNN vs OpenBLAS/im2col), so results agree
// to float rounding, not bit for bit. The gradient starts as NaN, so an element the CUDA
// model fails to write shows up.
void compareStep(Model& cpu, Model& gpu, ModelKind kind, std::size_t dim, std::size_t classes,
                 const std::vector<float>& params, std::size_t batch, std::uint64_t seed) {
  const Batch b = randomBatch(batch, dim, classes, seed);
  std::vector<float> g_cpu(params.size()),
      g_gpu(params.size(), std::numeric_limits<float>::quiet_NaN());
  const float l_cpu = cpu.lossAndGrad(params, b.x.data(), b.y.data(), batch, g_cpu);
  const float l_gpu = gpu.lossAndGrad(params, b.x.data(), b.y.data(), batch, g_gpu);
  REQUIRE(gpu.deviceStatus().ok());
  INFO(std::string(modelKindName(kind)) << " dim " << dim << " batch " << batch);
  CHECK(std::isfinite(l_gpu));
  CHECK(std::fabs(l_gpu - l_cpu) <= 1e-4f * std::max(1.0f, std::fabs(l_cpu)));
  const std::size_t unwritten = static_cast<std::size_t>(
      std::count_if(g_gpu.begin(), g_gpu.end(), [](float v) { return !std::isfinite(v); }));
  CHECK(unwritten == 0);
  for (auto [lo, hi] : segments(kind, dim, classes)) {
    float scale = 0.0f, worst = 0.0f;
    for (std::size_t i = lo; i < hi; ++i) scale = std::max(scale, std::fabs(g_cpu[i]));
    for (std::size_t i = lo; i < hi; ++i) worst = std::max(worst, std::fabs(g_gpu[i] - g_cpu[i]));
    INFO("tensor [" << lo << ", " << hi << "): max |grad| " << scale << ", worst diff " << worst);
    CHECK(scale > 0.0f);  // a tensor with no gradient at all would make the check vacuous
    CHECK(worst <= 1e-3f * scale + 1e-7f);
  }
}

void compareModel(ModelKind kind, std::size_t dim, std::size_t classes) {
  auto cpu = makeModel(kind, dim, classes);
  REQUIRE(cpu != nullptr);
  std::unique_ptr<Model> gpu;
  const KernelStatus st = makeModelOn(kGpu, kind, dim, classes, &gpu);
  INFO(st.message);
  REQUIRE(st.ok());
  REQUIRE(gpu->paramCount() == cpu->paramCount());
  std::vector<float> params(cpu->paramCount()), params_gpu(cpu->paramCount());
  cpu->init(params, 42);
  gpu->init(params_gpu, 42);
  CHECK(params == params_gpu);  // the same initialisation
  // Nonzero biases, so their use in the forward pass is checked too.
  const auto noise = testing::randomVector(params.size(), 7, -0.05f, 0.05f);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  // Batch sizes change and come back: the CNN reconfigures cuDNN for each.
  std::uint64_t seed = 100;
  for (std::size_t batch : {1, 7, 64, 7, 256})
    compareStep(*cpu, *gpu, kind, dim, classes, params, batch, ++seed);
}

}  // namespace

TEST_CASE("cuda models: mlp loss and every gradient element match the CPU" *
          doctest::skip(noGpu())) {
  compareModel(ModelKind::kMlp, 784, 10);
  compareModel(ModelKind::kMlp, 33, 3);  // odd sizes everywhere
}

TEST_CASE("cuda models: cnn loss and every gradient element match the CPU" *
          doctest::skip(noGpu())) {
  compareModel(ModelKind::kCnn, 784, 10);
  compareModel(ModelKind::kCnn, 17 * 17, 5);  // odd side: pooling drops a row and column
}

TEST_CASE("cuda models: predictions match the CPU's" * doctest::skip(noGpu())) {
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kCnn}) {
    auto cpu = makeModel(kind);
    std::unique_ptr<Model> gpu;
    REQUIRE(makeModelOn(kGpu, kind, 784, 10, &gpu).ok());
    std::vector<float> params(cpu->paramCount());
    cpu->init(params, 3);
    const std::size_t batch = 200;
    const Batch b = randomBatch(batch, 784, 10, 9);
    std::vector<std::int32_t> p_cpu(batch), p_gpu(batch, -1);
    cpu->predict(params, b.x.data(), batch, p_cpu.data());
    gpu->predict(params, b.x.data(), batch, p_gpu.data());
    REQUIRE(gpu->deviceStatus().ok());
    // Near-ties may flip under different rounding; allow a few.
    const auto same = std::count_if(p_cpu.begin(), p_cpu.end(),
                                    [&, i = 0](std::int32_t v) mutable { return v == p_gpu[i++]; });
    INFO(std::string(modelKindName(kind)));
    CHECK(same >= static_cast<long>(batch) - 2);
  }
}

// The same 30 SGD steps on the CPU reference and on the GPU: the losses must fall and
// follow the same path. (Halving the loss is not the test: the CNN on these noise images
// goes from 2.31 to 1.61 in 30 steps on the CPU too, which a first GPU run showed.)
TEST_CASE("cuda models: SGD on the GPU lowers the loss like on the CPU" * doctest::skip(noGpu())) {
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kCnn}) {
    std::unique_ptr<Model> gpu;
    REQUIRE(makeModelOn(kGpu, kind, 784, 10, &gpu).ok());
    const std::unique_ptr<Model> cpu = makeModel(kind, 784, 10);
    const Batch b = randomBatch(32, 784, 10, 11);
    float first[2] = {}, last[2] = {};
    Model* models[2] = {cpu.get(), gpu.get()};
    for (int m = 0; m < 2; ++m) {
      std::vector<float> params(models[m]->paramCount()), grad(models[m]->paramCount());
      models[m]->init(params, 5);
      first[m] = last[m] = models[m]->lossAndGrad(params, b.x.data(), b.y.data(), 32, grad);
      for (int step = 0; step < 30; ++step) {
        for (std::size_t i = 0; i < params.size(); ++i) params[i] -= 0.05f * grad[i];
        last[m] = models[m]->lossAndGrad(params, b.x.data(), b.y.data(), 32, grad);
      }
    }
    INFO(std::string(modelKindName(kind))
         << ": cpu " << first[0] << " -> " << last[0] << ", gpu " << first[1] << " -> " << last[1]);
    REQUIRE(gpu->deviceStatus().ok());
    CHECK(last[1] < 0.9f * first[1]);
    CHECK(std::abs(first[1] - first[0]) <= 1e-4f * first[0]);
    // Rounding differs (cuBLAS/cuDNN sum in other orders) and 30 steps amplify it a little.
    CHECK(std::abs(last[1] - last[0]) <= 0.02f * first[0]);
  }
}

TEST_CASE("cuda models: an empty batch gives zero loss and a zeroed gradient" *
          doctest::skip(noGpu())) {
  std::unique_ptr<Model> gpu;
  REQUIRE(makeModelOn(kGpu, ModelKind::kCnn, 784, 10, &gpu).ok());
  std::vector<float> params(gpu->paramCount(), 0.1f), grad(gpu->paramCount(), 5.0f);
  CHECK(gpu->lossAndGrad(params, nullptr, nullptr, 0, grad) == 0.0f);
  CHECK(std::all_of(grad.begin(), grad.end(), [](float v) { return v == 0.0f; }));
  CHECK(gpu->deviceStatus().ok());
}

TEST_CASE("cuda models: unsupported requests get a clear status" * doctest::skip(noGpu())) {
  std::unique_ptr<Model> m;
  KernelStatus st = makeModelOn(kGpu, ModelKind::kSoftmax, 784, 10, &m);
  CHECK(st.code == KernelStatus::Code::kInvalidArgument);
  CHECK(st.message.find("softmax") != std::string::npos);
  CHECK(m == nullptr);
  st = makeModelOn(ModelDevice{Backend::kCuda, 1023}, ModelKind::kMlp, 784, 10, &m);
  CHECK(st.code == KernelStatus::Code::kUnavailable);
  CHECK(st.message.find("does not exist") != std::string::npos);
  CHECK(m == nullptr);
}

TEST_CASE("cuda models: a failed step sticks: NaN loss and gradient, deviceStatus says why" *
          doctest::skip(noGpu())) {
  std::unique_ptr<Model> gpu;
  REQUIRE(makeModelOn(kGpu, ModelKind::kMlp, 784, 10, &gpu).ok());
  std::vector<float> params(gpu->paramCount()), grad(gpu->paramCount(), 0.0f);
  gpu->init(params, 1);
  Batch b = randomBatch(4, 784, 10, 3);
  b.y[2] = 10;  // not a class: refused before anything reaches the device
  CHECK(std::isnan(gpu->lossAndGrad(params, b.x.data(), b.y.data(), 4, grad)));
  CHECK(std::all_of(grad.begin(), grad.end(), [](float v) { return std::isnan(v); }));
  CHECK(gpu->deviceStatus().code == KernelStatus::Code::kInvalidArgument);
  CHECK(gpu->deviceStatus().message.find("label 10 at 2") != std::string::npos);
  b.y[2] = 1;  // a good batch afterwards still fails: the model is not trusted any more
  CHECK(std::isnan(gpu->lossAndGrad(params, b.x.data(), b.y.data(), 4, grad)));
}
