#include "groupsgd/kernels/ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "contract.h"
#include "parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace groupsgd::kernels {
namespace {

using detail::parallelFor;

// weightedSum adds up to kSumGroup inputs per pass, holding the partial sum in registers, so
// 8 inputs cost one read of each input and one write of out. With more inputs, out is walked
// in blocks that stay in L2 while every group is added in.
constexpr std::size_t kSumGroup = 8;
constexpr std::size_t kSumBlock = 16384;
// Outputs at least this large are written with non-temporal stores by the last group: they
// do not fit in cache anyway, and streaming saves the read-for-ownership of every line.
constexpr std::size_t kStreamBytes = std::size_t{16} << 20;
// sumSquares adds fixed-size blocks in index order, so threading never changes the result.
constexpr std::size_t kSquaresBlock = std::size_t{1} << 16;

// The group PS checks every pushed part with this (axpyIfFinite): compiled for AVX2 and FMA
// too where the CPU has them (picked once at load time), it converts and accumulates 4
// doubles per instruction instead of SSE2's 2. Both clones sum the same blocks in the same
// order; FMA rounds each square-and-add once, so the last bits may differ between machines
// (never between sumSquares and axpyIfFinite on one machine).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
double
sumSquaresBlock(const float* __restrict x, std::size_t n) {
  // 16 partial sums: four independent 4-wide chains keep the adds' latency hidden.
  constexpr std::size_t kLanes = 16;
  double acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t j = 0; j < kLanes; ++j) {
      double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (; i < n; ++i) {
    double v = x[i];
    acc[i % kLanes] += v * v;
  }
  for (std::size_t w = kLanes / 2; w > 0; w /= 2) {  // pairwise, in a fixed order
    for (std::size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
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

// o[b, e) = (first ? 0 : o) + sum_k w[k]*in[k], added left to right in exactly the order of
// the plain loop "o = w0*in0; o += w1*in1; ..." so results do not depend on the grouping.
template <std::size_t K>
void sumGroup(float* o, const float* const* in, const float* w, std::size_t b, std::size_t e,
              bool first, bool stream) {
  const float* p[K];
  float wk[K];
  for (std::size_t k = 0; k < K; ++k) {
    p[k] = in[k];
    wk[k] = w[k];
  }
  auto scalar = [&](std::size_t i) {
    float acc = first ? wk[0] * p[0][i] : o[i] + wk[0] * p[0][i];
    for (std::size_t k = 1; k < K; ++k) acc += wk[k] * p[k][i];
    o[i] = acc;
  };
  std::size_t i = b;
#if defined(__SSE2__)
  for (; i < e && reinterpret_cast<std::uintptr_t>(o + i) % 16 != 0; ++i) scalar(i);
  __m128 wv[K];
  for (std::size_t k = 0; k < K; ++k) wv[k] = _mm_set1_ps(wk[k]);
  for (; i + 4 <= e; i += 4) {
    __m128 acc = _mm_mul_ps(wv[0], _mm_loadu_ps(p[0] + i));
    if (!first) acc = _mm_add_ps(_mm_load_ps(o + i), acc);
    for (std::size_t k = 1; k < K; ++k)
      acc = _mm_add_ps(acc, _mm_mul_ps(wv[k], _mm_loadu_ps(p[k] + i)));
    if (stream) {
      _mm_stream_ps(o + i, acc);
    } else {
      _mm_store_ps(o + i, acc);
    }
  }
#else
  (void)stream;
#endif
  for (; i < e; ++i) scalar(i);
}

using SumGroupFn = void (*)(float*, const float* const*, const float*, std::size_t, std::size_t,
                            bool, bool);
constexpr SumGroupFn kSumGroupFns[kSumGroup] = {sumGroup<1>, sumGroup<2>, sumGroup<3>, sumGroup<4>,
                                                sumGroup<5>, sumGroup<6>, sumGroup<7>, sumGroup<8>};

}  // namespace

void scale(std::span<float> x, float a) {
  float* p = x.data();
  parallelFor(x.size(), [=](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) p[i] *= a;
  });
}

void scaleInto(float a, std::span<const float> x, std::span<float> y) {
  GSGD_KERNEL_REQUIRE(x.size() == y.size());
  const float* xp = x.data();
  float* yp = y.data();
  parallelFor(y.size(), [=](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) yp[i] = a * xp[i];
  });
}

void axpy(float a, std::span<const float> x, std::span<float> y) {
  GSGD_KERNEL_REQUIRE(x.size() == y.size());
  const float* xp = x.data();
  float* yp = y.data();
  parallelFor(y.size(), [=](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) yp[i] += a * xp[i];
  });
}

void weightedSum(std::span<const std::span<const float>> inputs, std::span<const float> weights,
                 std::span<float> out) {
  GSGD_KERNEL_REQUIRE(inputs.size() == weights.size());
  for ([[maybe_unused]] const auto& in : inputs) {
    GSGD_KERNEL_REQUIRE(in.size() == out.size());
    assert(in.data() + in.size() <= out.data() || out.data() + out.size() <= in.data() ||
           out.empty());
  }
  float* o = out.data();
  if (inputs.empty()) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  std::vector<const float*> ptrs(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) ptrs[k] = inputs[k].data();
  const bool stream = out.size_bytes() >= kStreamBytes;
  parallelFor(out.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t b = begin; b < end; b += kSumBlock) {
      const std::size_t e = std::min(end, b + kSumBlock);
      for (std::size_t first = 0; first < ptrs.size(); first += kSumGroup) {
        const std::size_t count = std::min(kSumGroup, ptrs.size() - first);
        const bool last = first + count == ptrs.size();
        kSumGroupFns[count - 1](o, ptrs.data() + first, weights.data() + first, b, e, first == 0,
                                stream && last);
      }
    }
#if defined(__SSE2__)
    if (stream) _mm_sfence();  // order the streaming stores before the join publishes them
#endif
  });
}

void copy(std::span<const float> src, std::span<float> dst) {
  GSGD_KERNEL_REQUIRE(src.size() == dst.size());
  if (src.data() == dst.data()) return;
  const float* s = src.data();
  float* d = dst.data();
  parallelFor(src.size(), [=](std::size_t b, std::size_t e) {
    std::memmove(d + b, s + b, (e - b) * sizeof(float));
  });
}

void subtract(std::span<const float> a, std::span<const float> b, std::span<float> out) {
  GSGD_KERNEL_REQUIRE(a.size() == out.size() && b.size() == out.size());
  const float* ap = a.data();
  const float* bp = b.data();
  float* op = out.data();
  parallelFor(out.size(), [=](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) op[i] = ap[i] - bp[i];
  });
}

void rebase(std::span<const float> central, std::span<const float> base, std::span<const float> cut,
            std::span<float> replica) {
  GSGD_KERNEL_REQUIRE(central.size() == replica.size() && base.size() == replica.size() &&
                      (cut.empty() || cut.size() == replica.size()));
  const float* cp = central.data();
  const float* bp = base.data();
  const float* kp = cut.empty() ? nullptr : cut.data();
  float* rp = replica.data();
  parallelFor(replica.size(), [=](std::size_t lo, std::size_t hi) {
    if (kp == nullptr) {
      for (std::size_t i = lo; i < hi; ++i) rp[i] = cp[i] + (rp[i] - bp[i]);
    } else {
      for (std::size_t i = lo; i < hi; ++i) rp[i] = cp[i] + ((rp[i] - bp[i]) - kp[i]);
    }
  });
}

namespace {

// block(data, n) over x in blocks of kSquaresBlock (in parallel when there are several),
// the results summed in block order, so the total does not depend on the thread count.
template <class T, class Block>
T sumOverBlocks(std::span<const float> x, Block block) {
  if (x.size() <= kSquaresBlock) return block(x.data(), x.size());
  std::size_t blocks = (x.size() + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<T> partial(blocks);
  parallelFor(
      blocks,
      [&](std::size_t b, std::size_t e) {
        for (std::size_t k = b; k < e; ++k) {
          std::size_t lo = k * kSquaresBlock;
          partial[k] = block(x.data() + lo, std::min(x.size() - lo, kSquaresBlock));
        }
      },
      1, kSquaresBlock);
  T total = 0;
  for (T p : partial) total += p;
  return total;
}

}  // namespace

std::size_t countNonFinite(std::span<const float> x) {
  return sumOverBlocks<std::size_t>(x, countNonFiniteRange);
}

double sumSquares(std::span<const float> x) { return sumOverBlocks<double>(x, sumSquaresBlock); }

namespace {

// y[0, n) += a * x[0, n), or = with kStore, vectorised as wide as the CPU allows (picked once
// at load time). Never fused into a multiply-add: the same bits as axpy's multiply, then add.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"),
               optimize("fp-contract=off")))
#endif
void addScaledBlock(float a, const float* __restrict x, float* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// axpyIfFinite and storeIfFinite: blocks of sumSquares' own size and order, so the
// squares match it bit for bit; each block checked, then written while still in cache.
// y[0, n) = a * x[0, n) with stores that bypass the cache (no read for ownership of y's
// lines); the caller fences.
void storeAround(float a, const float* __restrict x, float* __restrict y, std::size_t n) {
  std::size_t i = 0;
#if defined(__SSE2__)
  for (; i < n && reinterpret_cast<std::uintptr_t>(y + i) % 16 != 0; ++i) y[i] = a * x[i];
  const __m128 av = _mm_set1_ps(a);
  for (; i + 4 <= n; i += 4) _mm_stream_ps(y + i, _mm_mul_ps(av, _mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = a * x[i];
}

template <bool kStore>
FiniteAdd finiteBlocks(float a, std::span<const float> x, std::span<float> y, bool stream) {
  GSGD_KERNEL_REQUIRE(x.size() == y.size());
  FiniteAdd out;
  for (std::size_t lo = 0; lo < x.size(); lo += kSquaresBlock) {
    const std::size_t n = std::min(x.size() - lo, kSquaresBlock);
    const double block = sumSquaresBlock(x.data() + lo, n);
    if (!std::isfinite(block)) return out;  // a NaN or an infinity in this block
    const float* __restrict xp = x.data() + lo;
    float* __restrict yp = y.data() + lo;
    if constexpr (kStore) {
      if (stream) {
        storeAround(a, xp, yp, n);
      } else {
        for (std::size_t i = 0; i < n; ++i) yp[i] = a * xp[i];
      }
    } else {
      addScaledBlock(a, xp, yp, n);
    }
    out.squares += block;
    out.added = lo + n;
  }
#if defined(__SSE2__)
  if (stream) _mm_sfence();  // the streamed stores before whatever reads y next
#endif
  return out;
}

}  // namespace

FiniteAdd axpyIfFinite(float a, std::span<const float> x, std::span<float> y) {
  return finiteBlocks<false>(a, x, y, false);
}

FiniteAdd storeIfFinite(float a, std::span<const float> x, std::span<float> y, bool stream) {
  return finiteBlocks<true>(a, x, y, stream);
}

}  // namespace groupsgd::kernels
