// groupsgd-bench-kernels [--quick]: memory-bound kernel throughput against memcpy.
//
// Prints one JSON object per measurement, then a summary object as the last line with
// memcpy_gbps, aggregate_gbps and aggregate_vs_memcpy (and gpu_* when a GPU is usable).
// Bandwidth counts every byte a kernel must move: memcpy of S bytes moves 2S (read + write),
// weightedSum of 8 inputs moves 9 buffers (8 read + 1 written), axpy 3, sgd 3, momentum 5,
// adam/adamw 7.
// Each figure is the best of several repetitions after a warm-up (buffers are touched first,
// so page faults are not timed). --quick uses small buffers and few repetitions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_cli.h"
#include "groupsgd/kernels/compression.h"
#include "groupsgd/kernels/device.h"
#include "groupsgd/kernels/ops.h"
#include "groupsgd/kernels/optimizer.h"

namespace {

namespace k = groupsgd::kernels;
using json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

struct Settings {
  bool quick = false;
  std::size_t buffer_bytes = 64 << 20;  // each aggregation input / memcpy buffer
  std::size_t codec_floats = 4 << 20;   // tensor size for the compression codecs
  int reps = 10;
  int codec_reps = 3;
};

constexpr k::OptimizerKind kOptimizerKinds[] = {k::OptimizerKind::kSgd, k::OptimizerKind::kMomentum,
                                                k::OptimizerKind::kNesterov,
                                                k::OptimizerKind::kAdam, k::OptimizerKind::kAdamW};

// Bytes an optimizer step must move over buffers of `buf` bytes: p read and written, g
// read, and each state buffer read and written (sgd 3, momentum 5, adam 7).
double bytesMoved(k::OptimizerKind kind, double buf) {
  return static_cast<double>(3 + 2 * k::optimizerStateBuffers(kind)) * buf;
}

// Wall time of one call of fn.
double timeOnce(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

// Best wall time of `reps` calls of fn, after one untimed warm-up call.
double bestSeconds(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) best = std::min(best, timeOnce(fn));
  return best;
}

void emit(const json& j) {
  std::puts(j.dump().c_str());
  std::fflush(stdout);
}

json measurement(const char* name, const char* backend, double bytes_moved, double seconds) {
  return {{"bench", "kernels"}, {"name", name},
          {"backend", backend}, {"bytes_moved", bytes_moved},
          {"seconds", seconds}, {"gbps", bytes_moved / seconds / 1e9}};
}

// memcpy split over `threads` threads (each copies one contiguous slice).
void parallelMemcpy(char* dst, const char* src, std::size_t bytes, unsigned threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<std::thread> pool;
  const std::size_t chunk = (bytes / threads + 4095) / 4096 * 4096;
  std::size_t begin = 0;
  for (unsigned t = 0; t + 1 < threads && begin + chunk < bytes; ++t, begin += chunk) {
    pool.emplace_back([=] { std::memcpy(dst + begin, src + begin, chunk); });
  }
  std::memcpy(dst + begin, src + begin, bytes - begin);
  for (auto& th : pool) th.join();
}

std::vector<float> filled(std::size_t n, float seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = seed + static_cast<float>(i % 1000) * 1e-3f;
  return v;
}

struct CpuResults {
  double memcpy_gbps = 0;
  double aggregate_gbps = 0;
};

CpuResults benchCpu(const Settings& s) {
  CpuResults out;
  const std::size_t n = s.buffer_bytes / sizeof(float);
  const double buf = static_cast<double>(n * sizeof(float));
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> src = filled(n, 1.0f), dst = filled(n, 2.0f);
  constexpr std::size_t kInputs = 8;
  std::vector<std::vector<float>> inputs;
  for (std::size_t i = 0; i < kInputs; ++i) inputs.push_back(filled(n, float(i)));
  std::vector<std::span<const float>> spans(inputs.begin(), inputs.end());
  std::vector<float> weights(kInputs, 1.0f / kInputs);

  // The memcpy baselines (one thread = glibc, and all hardware threads) and the aggregation
  // (weightedSum of 8 buffers into a ninth, as the library runs it and on one core) are
  // timed round-robin, so that load from other processes hits them alike.
  constexpr std::size_t kSlice = std::size_t{1} << 21;  // below the library's threading
  struct Case {
    const char* name;
    unsigned threads;  // 0: as the library decides
    double moved;
    std::function<void()> fn;
    double best = 1e300;
  };
  auto memcpyWith = [&](unsigned threads) {
    return [&, threads] {
      parallelMemcpy(reinterpret_cast<char*>(dst.data()), reinterpret_cast<const char*>(src.data()),
                     n * sizeof(float), threads);
    };
  };
  std::vector<Case> cases;
  cases.push_back({"memcpy", 1, 2 * buf, memcpyWith(1)});
  if (hw > 1) cases.push_back({"memcpy", hw, 2 * buf, memcpyWith(hw)});
  cases.push_back(
      {"weighted_sum", 0, (kInputs + 1) * buf, [&] { k::weightedSum(spans, weights, dst); }});
  cases.push_back({"weighted_sum", 1, (kInputs + 1) * buf, [&] {
                     for (std::size_t b = 0; b < n; b += kSlice) {
                       const std::size_t m = std::min(kSlice, n - b);
                       std::vector<std::span<const float>> parts;
                       parts.reserve(spans.size());
                       for (const auto& in : spans) parts.push_back(in.subspan(b, m));
                       k::weightedSum(parts, weights, std::span<float>(dst).subspan(b, m));
                     }
                   }});
  for (Case& c : cases) c.fn();  // warm-up
  for (int r = 0; r < s.reps; ++r) {
    for (Case& c : cases) c.best = std::min(c.best, timeOnce(c.fn));
  }
  for (const Case& c : cases) {
    json j = measurement(c.name, "cpu", c.moved, c.best);
    j["buffer_mib"] = buf / kMiB;
    if (c.threads == 0) {
      j["threads"] = "library";
    } else {
      j["threads"] = c.threads;
    }
    if (std::string_view(c.name) == "weighted_sum") j["inputs"] = kInputs;
    emit(j);
    const double gbps = c.moved / c.best / 1e9;
    if (std::string_view(c.name) == "memcpy") out.memcpy_gbps = std::max(out.memcpy_gbps, gbps);
    if (std::string_view(c.name) == "weighted_sum" && c.threads == 0) out.aggregate_gbps = gbps;
  }
  inputs.resize(2);  // free what the next measurements do not need

  {
    const double t = bestSeconds(s.reps, [&] { k::axpy(1e-3f, src, dst); });
    emit(measurement("axpy", "cpu", 3 * buf, t));
  }
  for (k::OptimizerKind kind : kOptimizerKinds) {
    k::Optimizer opt({kind, 1e-3f, 0.9f, 1e-4f}, n);
    const double moved = bytesMoved(kind, buf);
    const double t = bestSeconds(s.reps, [&] { opt.step(dst, src); });
    json j = measurement("optimizer_step", "cpu", moved, t);
    j["optimizer"] = k::optimizerKindName(kind);
    emit(j);
  }
  return out;
}

// The sizes the servers work at: the group PS adds each pushed 1 MiB part into its sum
// with axpyIfFinite (one pass: checked, measured, added), and aggregation runs over
// buffers of that size. Each timing repeats the kernel over 64 MiB of work, so a call's
// microseconds are not lost in the clock's resolution. Returns each size's ratios to
// memcpy at the same size: {"256kib": {...}, "1mib": {...}}.
json benchSmallBuffers(const Settings& s) {
  json ratios = json::object();
  for (const std::size_t bytes : {std::size_t{256} << 10, std::size_t{1} << 20}) {
    const std::size_t n = bytes / sizeof(float);
    const double buf = static_cast<double>(bytes);
    std::vector<float> src = filled(n, 1.0f), dst = filled(n, 2.0f);
    constexpr std::size_t kInputs = 8;
    std::vector<std::vector<float>> inputs;
    for (std::size_t i = 0; i < kInputs; ++i) inputs.push_back(filled(n, float(i)));
    const std::vector<std::span<const float>> spans(inputs.begin(), inputs.end());
    const std::vector<float> weights(kInputs, 1.0f / kInputs);
    const int inner = static_cast<int>(std::max<std::size_t>(1, (std::size_t{64} << 20) / bytes));
    auto repeated = [&](const std::function<void()>& fn) {
      return [&, fn] {
        for (int i = 0; i < inner; ++i) fn();
      };
    };
    const int reps = s.quick ? 5 : 15;
    const double t_copy =
        bestSeconds(reps, repeated([&] { std::memcpy(dst.data(), src.data(), bytes); })) / inner;
    const double t_axpy =
        bestSeconds(reps, repeated([&] { (void)k::axpyIfFinite(1e-3f, src, dst); })) / inner;
    const double t_sum =
        bestSeconds(reps, repeated([&] { k::weightedSum(spans, weights, dst); })) / inner;
    // memcpy over as many bytes as the weighted sum touches (9 buffers): at 256 KiB the
    // sum's 2.25 MiB leave a 2 MiB L2 while a 256 KiB copy stays in it, so the plain ratio
    // compares L3 with L2; this one compares like with like.
    const std::size_t wide = (kInputs + 1) * bytes / 2;
    std::vector<char> wide_src(wide, 1), wide_dst(wide, 2);
    const double t_copy_wide =
        bestSeconds(reps, repeated([&] { std::memcpy(wide_dst.data(), wide_src.data(), wide); })) /
        inner;
    const double wide_copy_gbps = 2 * static_cast<double>(wide) / t_copy_wide / 1e9;
    const double copy_gbps = 2 * buf / t_copy / 1e9;
    const char* key = bytes == (std::size_t{1} << 20) ? "1mib" : "256kib";
    for (const auto& [name, moved, t] :
         {std::tuple{"memcpy", 2 * buf, t_copy}, std::tuple{"axpy_if_finite", 3 * buf, t_axpy},
          std::tuple{"weighted_sum", (kInputs + 1) * buf, t_sum}}) {
      json j = measurement(name, "cpu", moved, t);
      j["buffer_mib"] = buf / kMiB;
      j["vs_memcpy"] = moved / t / 1e9 / copy_gbps;
      if (std::string_view(name) == "weighted_sum") {
        j["vs_memcpy_same_footprint"] = moved / t / 1e9 / wide_copy_gbps;
        ratios[key]["weighted_sum_same_footprint"] = j["vs_memcpy_same_footprint"];
      }
      emit(j);
      if (std::string_view(name) != "memcpy") ratios[key][name] = j["vs_memcpy"];
    }
  }
  return ratios;
}

void benchCodecs(const Settings& s) {
  const std::size_t n = s.codec_floats;
  std::vector<float> grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    grad[i] = std::sin(static_cast<float>(i) * 0.37f) * (1.0f + static_cast<float>(i % 97));
  }
  std::vector<float> decoded(n);
  const double dense_bytes = static_cast<double>(n * sizeof(float));
  for (k::Encoding e :
       {k::Encoding::kDense, k::Encoding::kFp16, k::Encoding::kTopK, k::Encoding::kSign}) {
    k::Compressor c(e, n, 0.01f);
    std::vector<std::uint8_t> payload;
    const double te = bestSeconds(s.codec_reps, [&] { c.encode(grad, &payload); });
    bool ok = true;
    const double td =
        bestSeconds(s.codec_reps, [&] { ok = ok && k::decode(e, payload, decoded).ok(); });
    emit({{"bench", "kernels"},
          {"name", "codec"},
          {"backend", "cpu"},
          {"encoding", k::encodingName(e)},
          {"floats", n},
          {"payload_bytes", payload.size()},
          {"ratio", dense_bytes / static_cast<double>(payload.size())},
          {"encode_gbps", dense_bytes / te / 1e9},
          {"decode_gbps", dense_bytes / td / 1e9},
          {"encode_seconds", te},
          {"decode_seconds", td},
          {"decode_ok", ok}});
  }
}

struct GpuResults {
  bool ran = false;
  std::string why;
  double memcpy_gbps = 0;
  double aggregate_gbps = 0;
};

// Times fn (which enqueues device work) to completion, best of reps.
double bestDeviceSeconds(int reps, const std::function<k::KernelStatus()>& fn, bool* ok) {
  return bestSeconds(reps, [&] {
    k::KernelStatus st = fn();
    if (st.ok()) st = k::cuda::synchronize();
    if (!st.ok()) {
      std::fprintf(stderr, "gpu: %s\n", st.message.c_str());
      *ok = false;
    }
  });
}

GpuResults benchGpu(const Settings& s) {
  GpuResults out;
  if (!k::cudaAvailable(&out.why)) return out;
  const std::size_t n = s.buffer_bytes / sizeof(float);
  const double buf = static_cast<double>(n * sizeof(float));
  constexpr std::size_t kInputs = 8;
  const std::vector<float> host = filled(n, 1.0f);
  std::vector<k::DeviceBuffer> bufs(kInputs + 2);  // 8 inputs, out, optimizer state
  for (auto& b : bufs) {
    if (k::KernelStatus st = b.upload(host); !st.ok()) {
      out.why = "device allocation failed: " + st.message;
      return out;
    }
  }
  bool ok = true;
  float* a = bufs[0].floats();
  float* o = bufs[kInputs].floats();
  // The optimizer state: adam's 2n floats (first and second moments), zero.
  if (k::KernelStatus st = bufs[kInputs + 1].upload(std::vector<float>(2 * n, 0.0f)); !st.ok()) {
    out.why = "device allocation failed: " + st.message;
    return out;
  }
  float* v = bufs[kInputs + 1].floats();
  double t = bestDeviceSeconds(
      s.reps, [&] { return k::cuda::copy(a, o, n); }, &ok);
  emit(measurement("memcpy_d2d", "cuda", 2 * buf, t));
  out.memcpy_gbps = 2 * buf / t / 1e9;

  std::vector<const float*> ptrs;
  for (std::size_t i = 0; i < kInputs; ++i) ptrs.push_back(bufs[i].floats());
  const std::vector<float> weights(kInputs, 1.0f / kInputs);
  t = bestDeviceSeconds(
      s.reps, [&] { return k::cuda::weightedSum(ptrs, weights, o, n); }, &ok);
  emit(measurement("weighted_sum", "cuda", (kInputs + 1) * buf, t));
  out.aggregate_gbps = (kInputs + 1) * buf / t / 1e9;

  t = bestDeviceSeconds(
      s.reps, [&] { return k::cuda::axpy(1e-3f, a, o, n); }, &ok);
  emit(measurement("axpy", "cuda", 3 * buf, t));
  for (k::OptimizerKind kind : kOptimizerKinds) {
    const k::OptimizerConfig cfg{kind, 1e-3f, 0.9f, 1e-4f};
    std::uint64_t step = 0;
    t = bestDeviceSeconds(
        s.reps, [&] { return k::cuda::optimizerStep(cfg, o, a, v, n, ++step); }, &ok);
    json j = measurement("optimizer_step", "cuda", bytesMoved(kind, buf), t);
    j["optimizer"] = k::optimizerKindName(kind);
    emit(j);
  }
  auto* half = static_cast<std::uint16_t*>(bufs[1].data());  // n halves fit in n floats
  t = bestDeviceSeconds(
      s.reps, [&] { return k::cuda::encodeFp16(a, half, n); }, &ok);
  json enc = measurement("fp16_encode", "cuda", 1.5 * buf, t);
  enc["dense_gbps"] = buf / t / 1e9;
  emit(enc);
  t = bestDeviceSeconds(
      s.reps, [&] { return k::cuda::decodeFp16(half, o, n); }, &ok);
  json dec = measurement("fp16_decode", "cuda", 1.5 * buf, t);
  dec["dense_gbps"] = buf / t / 1e9;
  emit(dec);
  double ss = 0;
  t = bestDeviceSeconds(
      s.reps, [&] { return k::cuda::sumSquares(a, n, &ss); }, &ok);
  emit(measurement("sum_squares", "cuda", buf, t));
  out.ran = ok;
  if (!ok) out.why = "a CUDA call failed (see stderr)";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  auto app = groupsgd::bench::benchApp("groupsgd-bench-kernels",
                                       "kernel bandwidth against memcpy, codecs");
  app->add_flag("--quick", s.quick, "smaller buffers, fewer repeats (CI smoke test)");
  if (auto rc = groupsgd::bench::parseCommandLine(*app, argc, argv)) return *rc;
  if (s.quick) {
    s.buffer_bytes = 8 << 20;
    s.codec_floats = 256 << 10;
    s.reps = 3;
    s.codec_reps = 2;
  }
  const CpuResults cpu = benchCpu(s);
  const json small = benchSmallBuffers(s);
  benchCodecs(s);
  const GpuResults gpu = benchGpu(s);

  json summary = {{"bench", "kernels"},
                  {"summary", true},
                  {"quick", s.quick},
                  {"threads", std::thread::hardware_concurrency()},
                  {"buffer_mib", static_cast<double>(s.buffer_bytes) / kMiB},
                  {"memcpy_gbps", cpu.memcpy_gbps},
                  {"aggregate_gbps", cpu.aggregate_gbps},
                  {"aggregate_vs_memcpy", cpu.aggregate_gbps / cpu.memcpy_gbps},
                  {"small_buffers_vs_memcpy", small}};
  if (gpu.ran) {
    summary["gpu_memcpy_gbps"] = gpu.memcpy_gbps;
    summary["gpu_aggregate_gbps"] = gpu.aggregate_gbps;
    summary["gpu_aggregate_vs_memcpy"] = gpu.aggregate_gbps / gpu.memcpy_gbps;
  } else {
    summary["gpu"] = "not measured: " + gpu.why;
  }
  emit(summary);
  return 0;
}
