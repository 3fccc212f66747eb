// CUDA kernels for the vector ops, the optimizer step and the fp16 codec. Elementwise work
// runs in grid-stride loops over float4 (16-byte) vectors with a scalar tail, or scalar
// throughout when a pointer is not 16-byte aligned. Built with --fmad=false so each element
// takes the same IEEE single-precision operations, in the same order, as the CPU reference.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "../adam_step.h"
#include "../half_bits.h"
#include "cuda_check.h"
#include "groupsgd/kernels/device.h"

namespace groupsgd::kernels {
namespace {

using Code = KernelStatus::Code;

constexpr unsigned kThreads = 256;           // per block; a multiple of the warp size
constexpr unsigned kMaxBlocks = 4096;        // grid-stride loops cover the rest
constexpr unsigned kMaxReduceBlocks = 1024;  // partial sums a single block then adds up
constexpr int kMaxSumInputs = 16;            // weightedSum inputs per kernel launch

bool aligned(const void* p, std::size_t to) {
  return reinterpret_cast<std::uintptr_t>(p) % to == 0;
}

unsigned blocksFor(std::size_t items, unsigned cap) {
  const std::size_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::size_t>(b, 1, cap));
}

KernelStatus launched(const char* what) { return detail::cudaStatus(cudaGetLastError(), what); }

// ---- elementwise ------------------------------------------------------------------------

// Calls op.vec4(i) for the i-th float4 and op.one(i) for the scalar tail (or everything
// when vec is false).
template <class Op>
__global__ void mapKernel(Op op, std::size_t n, bool vec) {
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t done = 0;
  if (vec) {
    const std::size_t n4 = n / 4;
    for (std::size_t i = tid; i < n4; i += stride) op.vec4(i);
    done = n4 * 4;
  }
  for (std::size_t i = done + tid; i < n; i += stride) op.one(i);
}

template <class Op>
KernelStatus launchMap(const Op& op, std::size_t n, bool vec, const char* what) {
  if (n == 0) return KernelStatus::success();
  const unsigned blocks = blocksFor(vec ? (n + 3) / 4 : n, kMaxBlocks);
  mapKernel<<<blocks, kThreads>>>(op, n, vec);
  return launched(what);
}

struct ScaleOp {
  float* x;
  float a;
  __device__ void one(std::size_t i) const { x[i] *= a; }
  __device__ void vec4(std::size_t i) const {
    float4 v = reinterpret_cast<float4*>(x)[i];
    v.x *= a;
    v.y *= a;
    v.z *= a;
    v.w *= a;
    reinterpret_cast<float4*>(x)[i] = v;
  }
};

// acc += a * v, lane by lane.
__device__ inline void addScaled(float4& acc, float a, const float4& v) {
  acc.x += a * v.x;
  acc.y += a * v.y;
  acc.z += a * v.z;
  acc.w += a * v.w;
}

struct AxpyOp {
  const float* x;
  float* y;
  float a;
  __device__ void one(std::size_t i) const { y[i] += a * x[i]; }
  __device__ void vec4(std::size_t i) const {
    const float4 xv = reinterpret_cast<const float4*>(x)[i];
    float4 yv = reinterpret_cast<float4*>(y)[i];
    addScaled(yv, a, xv);
    reinterpret_cast<float4*>(y)[i] = yv;
  }
};

// replica = central + ((replica - base) - cut); cut null: no cut term.
struct RebaseOp {
  const float* central;
  const float* base;
  const float* cut;
  float* replica;
  __device__ float at(float c, float r, float b, float k) const { return c + ((r - b) - k); }
  __device__ void one(std::size_t i) const {
    replica[i] =
        cut ? at(central[i], replica[i], base[i], cut[i]) : central[i] + (replica[i] - base[i]);
  }
  __device__ void vec4(std::size_t i) const {
    const float4 c = reinterpret_cast<const float4*>(central)[i];
    const float4 b = reinterpret_cast<const float4*>(base)[i];
    float4 r = reinterpret_cast<float4*>(replica)[i];
    if (cut) {
      const float4 k = reinterpret_cast<const float4*>(cut)[i];
      r = make_float4(at(c.x, r.x, b.x, k.x), at(c.y, r.y, b.y, k.y), at(c.z, r.z, b.z, k.z),
                      at(c.w, r.w, b.w, k.w));
    } else {
      r = make_float4(c.x + (r.x - b.x), c.y + (r.y - b.y), c.z + (r.z - b.z), c.w + (r.w - b.w));
    }
    reinterpret_cast<float4*>(replica)[i] = r;
  }
};

struct SubtractOp {
  const float* a;
  const float* b;
  float* out;
  __device__ void one(std::size_t i) const { out[i] = a[i] - b[i]; }
  __device__ void vec4(std::size_t i) const {
    const float4 av = reinterpret_cast<const float4*>(a)[i];
    const float4 bv = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(out)[i] =
        make_float4(av.x - bv.x, av.y - bv.y, av.z - bv.z, av.w - bv.w);
  }
};

// out = w0*in0 + w1*in1 + ... over one launch's inputs, or out += ... when accumulate (the
// inputs after the first kMaxSumInputs). Same order of additions as the CPU per element.
struct WeightedSumOp {
  const float* in[kMaxSumInputs];
  float w[kMaxSumInputs];
  int count;
  bool accumulate;
  float* out;

  __device__ float sumAt(std::size_t i) const {
    float acc = accumulate ? out[i] + w[0] * in[0][i] : w[0] * in[0][i];
    for (int k = 1; k < count; ++k) acc += w[k] * in[k][i];
    return acc;
  }
  __device__ void one(std::size_t i) const { out[i] = sumAt(i); }
  __device__ void vec4(std::size_t i) const {
    float4 acc = accumulate ? reinterpret_cast<const float4*>(out)[i] : make_float4(0, 0, 0, 0);
    for (int k = 0; k < count; ++k) {
      const float4 v = reinterpret_cast<const float4*>(in[k])[i];
      const float wk = w[k];
      if (k == 0 && !accumulate) {
        acc = make_float4(wk * v.x, wk * v.y, wk * v.z, wk * v.w);
      } else {
        addScaled(acc, wk, v);
      }
    }
    reinterpret_cast<float4*>(out)[i] = acc;
  }
};

struct ZeroOp {
  float* out;
  __device__ void one(std::size_t i) const { out[i] = 0.0f; }
  __device__ void vec4(std::size_t i) const {
    reinterpret_cast<float4*>(out)[i] = make_float4(0, 0, 0, 0);
  }
};

// sgd, momentum and nesterov of optimizer.h, element by element in the CPU's order.
struct OptimizerOp {
  float* p;
  const float* g;
  float* v;
  float lr, mu, wd;
  OptimizerKind kind;

  __device__ float update(float pi, float gi, float* vi) const {
    if (kind == OptimizerKind::kSgd) return pi - lr * (gi + wd * pi);
    const float gd = gi + wd * pi;
    const float vn = mu * *vi + gd;
    *vi = vn;
    return kind == OptimizerKind::kNesterov ? pi - lr * (gd + mu * vn) : pi - lr * vn;
  }
  __device__ void one(std::size_t i) const {
    float dummy = 0.0f;
    p[i] = update(p[i], g[i], v ? &v[i] : &dummy);
  }
  __device__ void vec4(std::size_t i) const {
    float4 pv = reinterpret_cast<float4*>(p)[i];
    const float4 gv = reinterpret_cast<const float4*>(g)[i];
    float4 vv = v ? reinterpret_cast<float4*>(v)[i] : make_float4(0, 0, 0, 0);
    pv.x = update(pv.x, gv.x, &vv.x);
    pv.y = update(pv.y, gv.y, &vv.y);
    pv.z = update(pv.z, gv.z, &vv.z);
    pv.w = update(pv.w, gv.w, &vv.w);
    reinterpret_cast<float4*>(p)[i] = pv;
    if (v) reinterpret_cast<float4*>(v)[i] = vv;
  }
};

// Adam (keep 1, l2 = wd) and AdamW (keep = 1 - lr*wd, l2 0): optimizer.cc's adamRange,
// the same operations in the same order (IEEE sqrt and division: nvcc's defaults).
struct AdamOp {
  float* p;
  const float* g;
  float* m;
  float* v;
  detail::AdamStep s;
  float keep, l2;

  __device__ float update(float pi, float gi, float* mi, float* vi) const {
    pi = pi * keep;
    gi = gi + l2 * pi;
    const float mn = s.b1 * *mi + s.one_minus_b1 * gi;
    const float vn = s.b2 * *vi + s.one_minus_b2 * gi * gi;
    *mi = mn;
    *vi = vn;
    return pi - s.step_size * (mn / (sqrtf(vn) / s.bc2_sqrt + s.eps));
  }
  __device__ void one(std::size_t i) const { p[i] = update(p[i], g[i], &m[i], &v[i]); }
  __device__ void vec4(std::size_t i) const {
    float4 pv = reinterpret_cast<float4*>(p)[i];
    const float4 gv = reinterpret_cast<const float4*>(g)[i];
    float4 mv = reinterpret_cast<float4*>(m)[i];
    float4 vv = reinterpret_cast<float4*>(v)[i];
    pv.x = update(pv.x, gv.x, &mv.x, &vv.x);
    pv.y = update(pv.y, gv.y, &mv.y, &vv.y);
    pv.z = update(pv.z, gv.z, &mv.z, &vv.z);
    pv.w = update(pv.w, gv.w, &mv.w, &vv.w);
    reinterpret_cast<float4*>(p)[i] = pv;
    reinterpret_cast<float4*>(m)[i] = mv;
    reinterpret_cast<float4*>(v)[i] = vv;
  }
};

struct EncodeFp16Op {
  const float* x;
  std::uint16_t* out;
  __device__ void one(std::size_t i) const {
    out[i] = detail::floatBitsToHalf(__float_as_uint(x[i]));
  }
  __device__ void vec4(std::size_t i) const {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    reinterpret_cast<ushort4*>(out)[i] =
        make_ushort4(detail::floatBitsToHalf(__float_as_uint(v.x)),
                     detail::floatBitsToHalf(__float_as_uint(v.y)),
                     detail::floatBitsToHalf(__float_as_uint(v.z)),
                     detail::floatBitsToHalf(__float_as_uint(v.w)));
  }
};

struct DecodeFp16Op {
  const std::uint16_t* in;
  float* out;
  __device__ void one(std::size_t i) const {
    out[i] = __uint_as_float(detail::halfToFloatBits(in[i]));
  }
  __device__ void vec4(std::size_t i) const {
    const ushort4 h = reinterpret_cast<const ushort4*>(in)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(__uint_as_float(detail::halfToFloatBits(h.x)),
                                                    __uint_as_float(detail::halfToFloatBits(h.y)),
                                                    __uint_as_float(detail::halfToFloatBits(h.z)),
                                                    __uint_as_float(detail::halfToFloatBits(h.w)));
  }
};

// ---- reductions ---------------------------------------------------------------------------

template <class T>
__device__ T warpSum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block; the result is valid in thread 0. blockDim.x is a multiple of 32.
template <class T>
__device__ T blockSum(T v) {
  __shared__ T warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warpSum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? warp_sums[lane] : T(0);
    v = warpSum(v);
  }
  return v;
}

struct SquareTerm {
  __device__ double operator()(float x) const {
    const double d = x;
    return d * d;
  }
};

struct NonFiniteTerm {
  __device__ unsigned long long operator()(float x) const {
    return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
  }
};

// Each block writes its partial sum to partials[blockIdx.x].
template <class T, class Term>
__global__ void partialSumKernel(Term term, const float* x, std::size_t n, bool vec, T* partials) {
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  T acc = 0;
  std::size_t done = 0;
  if (vec) {
    const std::size_t n4 = n / 4;
    for (std::size_t i = tid; i < n4; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      acc += term(v.x) + term(v.y) + term(v.z) + term(v.w);
    }
    done = n4 * 4;
  }
  for (std::size_t i = done + tid; i < n; i += stride) acc += term(x[i]);
  acc = blockSum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One block adds up `count` partials into *result.
template <class T>
__global__ void finalSumKernel(const T* partials, unsigned count, T* result) {
  T acc = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = blockSum(acc);
  if (threadIdx.x == 0) *result = acc;
}

// The two launches and the copy back of reduce(); partials has blocks + 1 slots.
template <class T, class Term>
KernelStatus reduceInto(const float* x, std::size_t n, bool vec, unsigned blocks, T* partials,
                        T* out, const char* what) {
  partialSumKernel<T, Term><<<blocks, kThreads>>>(Term{}, x, n, vec, partials);
  if (KernelStatus s = launched(what); !s.ok()) return s;
  finalSumKernel<T><<<1, kThreads>>>(partials, blocks, partials + blocks);
  if (KernelStatus s = launched(what); !s.ok()) return s;
  return detail::cudaStatus(cudaMemcpy(out, partials + blocks, sizeof(T), cudaMemcpyDeviceToHost),
                            what);
}

// Two-pass sum of Term(x[i]): deterministic for a given n (the grid depends on n only).
// Scratch comes from the runtime's stream-ordered pool, so there is no per-call cudaMalloc.
template <class T, class Term>
KernelStatus reduce(const float* x, std::size_t n, T* out, const char* what) {
  *out = 0;
  if (n == 0) return KernelStatus::success();
  const bool vec = aligned(x, 16);
  const unsigned blocks = blocksFor(vec ? (n + 3) / 4 : n, kMaxReduceBlocks);
  void* scratch = nullptr;
  GROUPSGD_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&scratch, (blocks + 1) * sizeof(T), 0));
  KernelStatus st = reduceInto<T, Term>(x, n, vec, blocks, static_cast<T*>(scratch), out, what);
  const cudaError_t freed = cudaFreeAsync(scratch, 0);
  if (!st.ok()) return st;
  return detail::cudaStatus(freed, "cudaFreeAsync");
}

KernelStatus badArgument(const std::string& message) {
  return KernelStatus::error(Code::kInvalidArgument, message);
}

}  // namespace

namespace cuda {

KernelStatus scale(float* x, std::size_t n, float a) {
  return launchMap(ScaleOp{x, a}, n, aligned(x, 16), "cuda::scale");
}

KernelStatus axpy(float a, const float* x, float* y, std::size_t n) {
  return launchMap(AxpyOp{x, y, a}, n, aligned(x, 16) && aligned(y, 16), "cuda::axpy");
}

KernelStatus subtract(const float* a, const float* b, float* out, std::size_t n) {
  const bool vec = aligned(a, 16) && aligned(b, 16) && aligned(out, 16);
  return launchMap(SubtractOp{a, b, out}, n, vec, "cuda::subtract");
}

KernelStatus rebase(const float* central, const float* base, const float* cut, float* replica,
                    std::size_t n) {
  const bool vec = aligned(central, 16) && aligned(base, 16) && aligned(replica, 16) &&
                   (cut == nullptr || aligned(cut, 16));
  return launchMap(RebaseOp{central, base, cut, replica}, n, vec, "cuda::rebase");
}

KernelStatus weightedSum(std::span<const float* const> inputs, std::span<const float> weights,
                         float* out, std::size_t n) {
  if (inputs.size() != weights.size()) {
    return badArgument("cuda::weightedSum: " + std::to_string(inputs.size()) + " inputs but " +
                       std::to_string(weights.size()) + " weights");
  }
  if (inputs.empty()) return launchMap(ZeroOp{out}, n, aligned(out, 16), "cuda::weightedSum");
  for (std::size_t first = 0; first < inputs.size(); first += kMaxSumInputs) {
    WeightedSumOp op{};
    op.count = static_cast<int>(std::min<std::size_t>(kMaxSumInputs, inputs.size() - first));
    op.accumulate = first > 0;
    op.out = out;
    bool vec = aligned(out, 16);
    for (int k = 0; k < op.count; ++k) {
      op.in[k] = inputs[first + k];
      op.w[k] = weights[first + k];
      vec = vec && aligned(op.in[k], 16);
    }
    if (KernelStatus s = launchMap(op, n, vec, "cuda::weightedSum"); !s.ok()) return s;
  }
  return KernelStatus::success();
}

KernelStatus copy(const float* src, float* dst, std::size_t n) {
  if (n == 0 || src == dst) return KernelStatus::success();
  GROUPSGD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, 0));
  return KernelStatus::success();
}

KernelStatus countNonFinite(const float* x, std::size_t n, std::size_t* out) {
  unsigned long long count = 0;
  KernelStatus st = reduce<unsigned long long, NonFiniteTerm>(x, n, &count, "cuda::countNonFinite");
  *out = static_cast<std::size_t>(count);
  return st;
}

KernelStatus sumSquares(const float* x, std::size_t n, double* out) {
  return reduce<double, SquareTerm>(x, n, out, "cuda::sumSquares");
}

KernelStatus optimizerStep(const OptimizerConfig& cfg, float* params, const float* grad,
                           float* state, std::size_t n, std::uint64_t step) {
  const std::size_t buffers = optimizerStateBuffers(cfg.kind);
  if (buffers != 0 && state == nullptr && n != 0) {
    return badArgument(std::string("cuda::optimizerStep: ") + optimizerKindName(cfg.kind) +
                       " needs a state buffer");
  }
  if (buffers == 2) {
    if (step == 0) {
      return badArgument(std::string("cuda::optimizerStep: ") + optimizerKindName(cfg.kind) +
                         " needs the step count (>= 1) for its bias correction");
    }
    const bool adamw = cfg.kind == OptimizerKind::kAdamW;
    const detail::AdamStep s = detail::adamStepFor(cfg, step);
    float* m = state;
    float* v = state + n;
    const bool vec = aligned(params, 16) && aligned(grad, 16) && aligned(m, 16) && aligned(v, 16);
    return launchMap(
        AdamOp{params, grad, m, v, s, adamw ? s.keep : 1.0f, adamw ? 0.0f : cfg.weight_decay}, n,
        vec, "cuda::optimizerStep");
  }
  float* v = buffers != 0 ? state : nullptr;
  const bool vec = aligned(params, 16) && aligned(grad, 16) && (v == nullptr || aligned(v, 16));
  return launchMap(OptimizerOp{params, grad, v, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.kind},
                   n, vec, "cuda::optimizerStep");
}

KernelStatus encodeFp16(const float* x, std::uint16_t* out, std::size_t n) {
  return launchMap(EncodeFp16Op{x, out}, n, aligned(x, 16) && aligned(out, 8), "cuda::encodeFp16");
}

KernelStatus decodeFp16(const std::uint16_t* in, float* out, std::size_t n) {
  return launchMap(DecodeFp16Op{in, out}, n, aligned(in, 8) && aligned(out, 16),
                   "cuda::decodeFp16");
}

}  // namespace cuda
}  // namespace groupsgd::kernels
