// groupsgd-bench-trainer-step [--quick] [--device cpu|cuda|cuda:N|all]: samples per second
// of one training step (Model::lossAndGrad, as groupsgd-worker runs it: the flat host
// parameters in, the host gradient out) for the mlp and cnn models at several batch sizes,
// on the CPU and, when one is usable, on a CUDA device. The CUDA figures include the
// per-step copies of parameters, batch and gradient between host and device, which is what
// the trainer pays. Prints one JSON object per (device, model, batch), a line saying why
// the GPU was skipped if it was, then a summary object as the last line; the summary gives
// gpu_vs_cpu ratios measured in the same run.
// Each figure is the median over timed steps (at least `reps` and at least `min_seconds`),
// after warm-up steps (the CUDA models pick algorithms and allocate on the first).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_cli.h"
#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/model_device.h"

namespace {

namespace k = groupsgd::kernels;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Settings {
  bool quick = false;
  bool want_cpu = true, want_gpu = true;
  k::ModelDevice gpu{k::Backend::kCuda, 0};
  std::vector<std::size_t> batches{32, 128, 512};
  int warmup = 3;
  int reps = 20;
  double min_seconds = 1.0;
};

void emit(const json& j) {
  std::puts(j.dump().c_str());
  std::fflush(stdout);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Times lossAndGrad on one fixed random batch. Returns the result line.
json measure(const Settings& s, const k::ModelDevice& device, k::ModelKind kind,
             std::size_t batch) {
  constexpr std::size_t kDim = 784, kClasses = 10;
  json j = {{"bench", "trainer-step"},
            {"device", k::modelDeviceName(device)},
            {"model", k::modelKindName(kind)},
            {"batch", batch}};
  std::unique_ptr<k::Model> model;
  if (k::KernelStatus st = k::makeModelOn(device, kind, kDim, kClasses, &model); !st.ok()) {
    j["error"] = st.message;
    return j;
  }
  std::vector<float> params(model->paramCount()), grad(model->paramCount());
  model->init(params, 1);
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> x(batch * kDim);
  for (float& v : x) v = pixel(rng);
  std::vector<std::int32_t> y(batch);
  for (auto& v : y) v = static_cast<std::int32_t>(rng() % kClasses);

  float loss = 0.0f;
  for (int i = 0; i < s.warmup; ++i)
    loss = model->lossAndGrad(params, x.data(), y.data(), batch, grad);
  std::vector<double> ms;
  const auto start = Clock::now();
  while (static_cast<int>(ms.size()) < s.reps ||
         std::chrono::duration<double>(Clock::now() - start).count() < s.min_seconds) {
    const auto t0 = Clock::now();
    loss = model->lossAndGrad(params, x.data(), y.data(), batch, grad);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (k::KernelStatus st = model->deviceStatus(); !st.ok()) {
    j["error"] = st.message;
    return j;
  }
  const double med = median(ms);
  j["params"] = model->paramCount();
  j["steps"] = ms.size();
  j["step_ms_median"] = med;
  j["step_ms_min"] = *std::min_element(ms.begin(), ms.end());
  j["samples_per_s"] = static_cast<double>(batch) / (med / 1000.0);
  j["loss"] = loss;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string device = "all";
  auto app = groupsgd::bench::benchApp(
      "groupsgd-bench-trainer-step", "one trainer step (forward, backward, optimizer) per device");
  app->add_flag("--quick", s.quick, "batches 32 and 128, fewer repeats (CI smoke test)");
  app->add_option("--device", device, "cpu, cuda, cuda:N or all (default all)");
  auto* batches_opt =
      groupsgd::bench::addList(*app, "--batches", s.batches, "batch sizes (default 32,128,512)");
  batches_opt->check(CLI::Range(1, 999999));
  if (auto rc = groupsgd::bench::parseCommandLine(*app, argc, argv)) return *rc;
  if (s.quick) {
    if (batches_opt->count() == 0) s.batches = {32, 128};
    s.warmup = 1;
    s.reps = 3;
    s.min_seconds = 0.1;
  }
  if (device != "all") {
    k::ModelDevice d;
    if (k::KernelStatus st = k::parseModelDevice(device, &d); !st.ok()) {
      std::fprintf(stderr, "%s: --device: %s\n", argv[0], st.message.c_str());
      return 2;
    }
    s.want_cpu = d.backend == k::Backend::kCpu;
    s.want_gpu = !s.want_cpu;
    if (s.want_gpu) s.gpu = d;
  }
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
  json summary = {{"bench", "trainer-step"},
                  {"summary", true},
                  {"quick", s.quick},
                  {"hardware_threads", std::thread::hardware_concurrency()},
                  {"openblas_num_threads", blas_threads ? blas_threads : "unset"}};
  const k::ModelKind kinds[] = {k::ModelKind::kMlp, k::ModelKind::kCnn};
  bool failed = false;
  auto run = [&](const k::ModelDevice& device, const char* key) {
    for (k::ModelKind kind : kinds) {
      for (std::size_t batch : s.batches) {
        json j = measure(s, device, kind, batch);
        emit(j);
        if (j.contains("error")) {
          failed = true;
          continue;
        }
        summary[key][k::modelKindName(kind)][std::to_string(batch)] = j["samples_per_s"];
      }
    }
  };
  if (s.want_cpu) run(k::ModelDevice{}, "cpu_samples_per_s");
  if (s.want_gpu) {
    if (k::KernelStatus st = k::checkModelDevice(s.gpu); !st.ok()) {
      emit({{"bench", "trainer-step"},
            {"device", k::modelDeviceName(s.gpu)},
            {"skipped", "no GPU: " + st.message}});
      summary["gpu"] = "skipped: no GPU: " + st.message;
    } else {
      summary["gpu"] = k::modelDeviceName(s.gpu);
      run(s.gpu, "gpu_samples_per_s");
      // Ratios from the same run: how much faster one step is on the GPU than on the CPU.
      if (summary.contains("cpu_samples_per_s") && summary.contains("gpu_samples_per_s")) {
        for (auto& [model, per_batch] : summary["gpu_samples_per_s"].items()) {
          for (auto& [batch, gpu_rate] : per_batch.items()) {
            const json& cpu = summary["cpu_samples_per_s"][model];
            if (cpu.contains(batch)) {
              summary["gpu_vs_cpu"][model][batch] =
                  gpu_rate.get<double>() / cpu[batch].get<double>();
            }
          }
        }
      }
    }
  }
  emit(summary);
  return failed ? 1 : 0;
}
