// groupsgd-bench-model-timing [--quick]: how long one Model::lossAndGrad of the mlp and
// cnn models takes on the CPU at batch 64 (the trainer's default batch), with the GEMM
// backend named (OpenBLAS or the C++ fallback). Run with OPENBLAS_NUM_THREADS=1 to time
// one core, as the CTest smoke test does.
//
// Prints one JSON object per model (median, min and max milliseconds over the timed calls,
// after 5 untimed warm-up calls), then a summary object as the last line with
// mlp_median_ms and cnn_median_ms. --quick times fewer calls.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_cli.h"
#include "groupsgd/kernels/gemm.h"
#include "groupsgd/kernels/model.h"

namespace {

namespace k = groupsgd::kernels;
using json = nlohmann::json;

constexpr std::size_t kBatch = 64;
constexpr std::size_t kPixels = 784;  // one 28x28 image
constexpr int kWarmup = 5;

void emit(const json& j) {
  std::puts(j.dump().c_str());
  std::fflush(stdout);
}

// A batch of uniform [0, 1) pixels with labels 0..9 in turn (seeded: every run the same).
struct Batch {
  std::vector<float> x = std::vector<float>(kBatch * kPixels);
  std::vector<std::int32_t> y = std::vector<std::int32_t>(kBatch);
  Batch() {
    std::mt19937_64 rng(2);
    std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
    for (float& v : x) v = pixel(rng);
    for (std::size_t i = 0; i < kBatch; ++i) y[i] = static_cast<std::int32_t>(i % 10);
  }
};

// Times `runs` calls of lossAndGrad; emits the line and returns the median (ms), or a
// negative number when the loss was not finite (the model is broken: no timing counts).
double timeModel(k::ModelKind kind, int runs, const Batch& batch) {
  auto model = k::makeModel(kind);
  std::vector<float> params(model->paramCount()), grad(model->paramCount());
  model->init(params, 1);
  for (int i = 0; i < kWarmup; ++i) {
    model->lossAndGrad(params, batch.x.data(), batch.y.data(), kBatch, grad);
  }
  std::vector<double> ms;
  float loss = 0;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    loss = model->lossAndGrad(params, batch.x.data(), batch.y.data(), kBatch, grad);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  emit({{"bench", "model-timing"},
        {"model", k::modelKindName(kind)},
        {"batch", kBatch},
        {"runs", runs},
        {"median_ms", median},
        {"min_ms", ms.front()},
        {"max_ms", ms.back()},
        {"loss", std::isfinite(loss) ? json(loss) : json(nullptr)},
        {"gemm", k::haveBlas() ? "openblas" : "fallback"}});
  return std::isfinite(loss) ? median : -1;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  auto app = groupsgd::bench::benchApp("groupsgd-bench-model-timing",
                                       "forward+backward time of the built-in models on the CPU");
  app->add_flag("--quick", quick, "fewer repeats (CI smoke test)");
  if (auto rc = groupsgd::bench::parseCommandLine(*app, argc, argv)) return *rc;
  const Batch batch;
  const double mlp = timeModel(k::ModelKind::kMlp, quick ? 10 : 50, batch);
  const double cnn = timeModel(k::ModelKind::kCnn, quick ? 4 : 20, batch);
  const bool ok = mlp > 0 && cnn > 0;
  emit({{"bench", "model-timing"},
        {"summary", true},
        {"ok", ok},
        {"quick", quick},
        {"batch", kBatch},
        {"mlp_median_ms", mlp},
        {"cnn_median_ms", cnn},
        {"gemm", k::haveBlas() ? "openblas" : "fallback"}});
  return ok ? 0 : 1;
}
