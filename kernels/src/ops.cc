#include "groupsgd/kernels/ops.h"

#include <cassert>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"

namespace groupsgd::kernels {
namespace {

using detail::parallelFor;

// weightedSum walks out in blocks that stay in L1 while every input is added in.
constexpr std::size_t kSumBlock = 2048;
// sumSquares adds fixed-size blocks in index order, so threading never changes the result.
constexpr std::size_t kSquaresBlock = std::size_t{1} << 16;

double sumSquaresBlock(const float* __restrict x, std::size_t n) {
  double acc[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::size_t j = 0; j < 8; ++j) {
      double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (; i < n; ++i) {
    double v = x[i];
    acc[i % 8] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

std::size_t countNonFiniteRange(const float* __restrict x, std::size_t n) {
  // Exponent all ones <=> Inf or NaN; integer test so it vectorises without -ffinite-math.
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    count += (bits & 0x7f800000u) == 0x7f800000u;
  }
  return count;
}

}  // namespace

void scale(std::span<float> x, float a) {
  float* p = x.data();
  parallelFor(x.size(), [=](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) p[i] *= a;
  });
}

void axpy(float a, std::span<const float> x, std::span<float> y) {
  assert(x.size() == y.size());
  const float* xp = x.data();
  float* yp = y.data();
  parallelFor(y.size(), [=](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) yp[i] += a * xp[i];
  });
}

void weightedSum(std::span<const std::span<const float>> inputs, std::span<const float> weights,
                 std::span<float> out) {
  assert(inputs.size() == weights.size());
  for ([[maybe_unused]] const auto& in : inputs) {
    assert(in.size() == out.size());
    assert(in.data() + in.size() <= out.data() || out.data() + out.size() <= in.data() ||
           out.empty());
  }
  parallelFor(out.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t b = begin; b < end; b += kSumBlock) {
      std::size_t e = std::min(end, b + kSumBlock);
      float* __restrict o = out.data();
      if (inputs.empty()) {
        for (std::size_t i = b; i < e; ++i) o[i] = 0.0f;
        continue;
      }
      const float* __restrict in0 = inputs[0].data();
      float w0 = weights[0];
      for (std::size_t i = b; i < e; ++i) o[i] = w0 * in0[i];
      for (std::size_t k = 1; k < inputs.size(); ++k) {
        const float* __restrict in = inputs[k].data();
        float w = weights[k];
        for (std::size_t i = b; i < e; ++i) o[i] += w * in[i];
      }
    }
  });
}

void copy(std::span<const float> src, std::span<float> dst) {
  assert(src.size() == dst.size());
  if (src.data() == dst.data()) return;
  const float* s = src.data();
  float* d = dst.data();
  parallelFor(src.size(), [=](std::size_t b, std::size_t e) {
    std::memmove(d + b, s + b, (e - b) * sizeof(float));
  });
}

void subtract(std::span<const float> a, std::span<const float> b, std::span<float> out) {
  assert(a.size() == out.size() && b.size() == out.size());
  const float* ap = a.data();
  const float* bp = b.data();
  float* op = out.data();
  parallelFor(out.size(), [=](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) op[i] = ap[i] - bp[i];
  });
}

std::size_t countNonFinite(std::span<const float> x) {
  if (x.size() <= kSquaresBlock) return countNonFiniteRange(x.data(), x.size());
  std::size_t blocks = (x.size() + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<std::size_t> partial(blocks);
  parallelFor(
      blocks,
      [&](std::size_t b, std::size_t e) {
        for (std::size_t k = b; k < e; ++k) {
          std::size_t lo = k * kSquaresBlock;
          partial[k] = countNonFiniteRange(x.data() + lo, std::min(x.size() - lo, kSquaresBlock));
        }
      },
      1, kSquaresBlock);
  std::size_t total = 0;
  for (std::size_t p : partial) total += p;
  return total;
}

double sumSquares(std::span<const float> x) {
  if (x.size() <= kSquaresBlock) return sumSquaresBlock(x.data(), x.size());
  std::size_t blocks = (x.size() + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<double> partial(blocks);
  parallelFor(
      blocks,
      [&](std::size_t b, std::size_t e) {
        for (std::size_t k = b; k < e; ++k) {
          std::size_t lo = k * kSquaresBlock;
          partial[k] = sumSquaresBlock(x.data() + lo, std::min(x.size() - lo, kSquaresBlock));
        }
      },
      1, kSquaresBlock);
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace groupsgd::kernels
