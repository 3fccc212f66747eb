// Compression codecs. Wire layouts (little-endian), for a tensor of n floats:
//   dense: n × f32
//   fp16:  n × binary16
//   topk:  u32 k | k × u32 index (strictly increasing) | k × f32 value
//   sign:  f32 scale | ceil(n/8) bytes, bit i%8 (LSB first) of byte i/8 set <=> value i < 0
#include "groupsgd/kernels/compression.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <string>

#include "groupsgd/base/enum_names.h"
#include "half_bits.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

static_assert(std::endian::native == std::endian::little,
              "the codecs write host floats and integers as little-endian wire fields");

namespace groupsgd::kernels {
namespace {

using Code = KernelStatus::Code;

constexpr std::size_t kU32 = sizeof(std::uint32_t);

bool isFiniteBits(float v) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  return (bits & 0x7f800000u) != 0x7f800000u;
}

std::uint32_t loadU32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float loadF32(const std::uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

KernelStatus wrongLength(Encoding e, std::size_t got, std::size_t want, std::size_t n) {
  return KernelStatus::error(Code::kInvalidArgument, std::string(encodingName(e)) +
                                                         " payload for " + std::to_string(n) +
                                                         " values must be " + std::to_string(want) +
                                                         " bytes, got " + std::to_string(got));
}

KernelStatus decodeTopK(std::span<const std::uint8_t> payload, std::span<float> out) {
  const std::size_t n = out.size();
  if (payload.size() < kU32) return wrongLength(Encoding::kTopK, payload.size(), kU32, n);
  const std::size_t k = loadU32(payload.data());
  if (k > n) {
    return KernelStatus::error(Code::kDataLoss, "topk payload count " + std::to_string(k) +
                                                    " exceeds the tensor size " +
                                                    std::to_string(n));
  }
  const std::size_t want = kU32 + 2 * kU32 * k;
  if (payload.size() != want) return wrongLength(Encoding::kTopK, payload.size(), want, n);
  const std::uint8_t* idx = payload.data() + kU32;
  const std::uint8_t* val = idx + kU32 * k;
  // Validate everything before writing, so a bad payload leaves out untouched.
  std::uint32_t prev = 0;
  for (std::size_t j = 0; j < k; ++j) {
    const std::uint32_t i = loadU32(idx + kU32 * j);
    if (i >= n) {
      return KernelStatus::error(
          Code::kDataLoss,
          "topk index " + std::to_string(i) + " out of range for " + std::to_string(n) + " values");
    }
    if (j > 0 && i <= prev) {
      return KernelStatus::error(
          Code::kDataLoss, "topk indices not strictly increasing at " + std::to_string(j) + " (" +
                               std::to_string(prev) + " then " + std::to_string(i) + ")");
    }
    if (!isFiniteBits(loadF32(val + kU32 * j))) {
      return KernelStatus::error(Code::kDataLoss,
                                 "topk value for index " + std::to_string(i) + " is not finite");
    }
    prev = i;
  }
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t j = 0; j < k; ++j) out[loadU32(idx + kU32 * j)] = loadF32(val + kU32 * j);
  return KernelStatus::success();
}

KernelStatus decodeSign(std::span<const std::uint8_t> payload, std::span<float> out) {
  const std::size_t n = out.size();
  const std::size_t want = encodedBytes(Encoding::kSign, n, 0.0f);
  if (payload.size() != want) return wrongLength(Encoding::kSign, payload.size(), want, n);
  const float scale = loadF32(payload.data());
  if (!isFiniteBits(scale) || std::signbit(scale)) {
    return KernelStatus::error(Code::kDataLoss, "sign payload scale " + std::to_string(scale) +
                                                    " is not a finite non-negative number");
  }
  const std::uint8_t* bits = payload.data() + sizeof(float);
  if (n % 8 != 0 && (bits[n / 8] >> (n % 8)) != 0) {
    return KernelStatus::error(Code::kDataLoss, "sign payload has padding bits set");
  }
  // Each bit becomes the float sign bit of scale: branch-free, eight values per byte.
  const std::uint32_t scale_bits = std::bit_cast<std::uint32_t>(scale);
  float* o = out.data();
  for (std::size_t b = 0; b * 8 < n; ++b) {
    const std::uint32_t byte = bits[b];
    const std::size_t count = std::min<std::size_t>(8, n - b * 8);
    for (std::size_t j = 0; j < count; ++j) {
      o[b * 8 + j] = std::bit_cast<float>(scale_bits | (((byte >> j) & 1u) << 31));
    }
  }
  return KernelStatus::success();
}

// fp16 in chunks through aligned stack buffers, so the branch-free conversions vectorise and
// the payload (a byte vector, no alignment promised) is written with plain memcpy. On x86
// CPUs with F16C (checked at run time) the hardware converts 8 values per instruction; its
// rounding (to nearest even) and NaN handling (quietened, top payload bits kept) are the
// reference's, and the tests hold both paths to the reference bit for bit.
constexpr std::size_t kFp16Chunk = 1024;

#if defined(__x86_64__) && defined(__GNUC__)
#define GROUPSGD_HAVE_F16C_PATH 1
__attribute__((target("avx,f16c"))) void encodeFp16F16c(const float* x, std::uint8_t* out,
                                                        std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  for (; i < n; ++i) {
    const std::uint16_t h = floatToHalf(x[i]);
    std::memcpy(out + 2 * i, &h, sizeof h);
  }
}

__attribute__((target("avx,f16c"))) void decodeFp16F16c(const std::uint8_t* payload, float* out,
                                                        std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(payload + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, payload + 2 * i, sizeof h);
    out[i] = halfToFloat(h);
  }
}

// CPUID directly: clang 14 rejects __builtin_cpu_supports("f16c") (the fuzz build).
// AVX needs the OS to save the YMM state too (OSXSAVE, then XCR0 bits 1 and 2).
bool cpuHasAvxF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx || !f16c) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0x6u) == 0x6u;
}

bool haveF16c() {
  static const bool yes = cpuHasAvxF16c();
  return yes;
}
#endif

// n values of From at src, each convert()ed to a To at dst, through aligned chunk buffers
// (memcpy in and out, so neither side needs the alignment of its type).
template <class From, class To, class Convert>
void convertChunked(const void* src, void* dst, std::size_t n, Convert convert) {
  alignas(64) From in[kFp16Chunk];
  alignas(64) To conv[kFp16Chunk];
  const auto* s = static_cast<const std::uint8_t*>(src);
  auto* d = static_cast<std::uint8_t*>(dst);
  for (std::size_t b = 0; b < n; b += kFp16Chunk) {
    const std::size_t m = std::min(kFp16Chunk, n - b);
    std::memcpy(in, s + b * sizeof(From), m * sizeof(From));
    for (std::size_t i = 0; i < m; ++i) conv[i] = convert(in[i]);
    std::memcpy(d + b * sizeof(To), conv, m * sizeof(To));
  }
}

void encodeFp16Bulk(const float* x, std::uint8_t* out, std::size_t n) {
#ifdef GROUPSGD_HAVE_F16C_PATH
  if (haveF16c()) return encodeFp16F16c(x, out, n);
#endif
  convertChunked<std::uint32_t, std::uint16_t>(
      x, out, n, [](std::uint32_t v) { return detail::floatBitsToHalfBranchless(v); });
}

void decodeFp16Bulk(const std::uint8_t* payload, float* out, std::size_t n) {
#ifdef GROUPSGD_HAVE_F16C_PATH
  if (haveF16c()) return decodeFp16F16c(payload, out, n);
#endif
  convertChunked<std::uint16_t, std::uint32_t>(
      payload, out, n, [](std::uint16_t h) { return detail::halfToFloatBitsBranchless(h); });
}

// The k-th largest value of mags (1 <= k <= mags.size()), exactly; NaN-free input. Large
// inputs first guess a lower bound from a strided sample, chosen so that about 2k values
// reach it, and select among those only; if fewer than k reach it, among all of them.
float kthLargest(const std::vector<float>& mags, std::size_t k, std::vector<float>* scratch) {
  constexpr std::size_t kSample = 4096;
  const std::size_t n = mags.size();
  const auto descending = [](float a, float b) { return a > b; };
  scratch->clear();
  if (n >= 16 * kSample && k <= n / 8) {
    const std::size_t stride = n / kSample;
    for (std::size_t i = 0; i < kSample; ++i) scratch->push_back(mags[i * stride]);
    const std::size_t rank = std::min(kSample - 1, 2 * k * kSample / n + 8);
    std::nth_element(scratch->begin(), scratch->begin() + static_cast<std::ptrdiff_t>(rank),
                     scratch->end(), descending);
    const float guess = (*scratch)[rank];
    scratch->clear();
    for (float m : mags) {
      if (m >= guess) scratch->push_back(m);
    }
    if (scratch->size() < k) scratch->clear();  // the guess was too high: fall back
  }
  if (scratch->empty()) scratch->assign(mags.begin(), mags.end());
  std::nth_element(scratch->begin(), scratch->begin() + static_cast<std::ptrdiff_t>(k - 1),
                   scratch->end(), descending);
  return (*scratch)[k - 1];
}

}  // namespace

constexpr std::array<base::EnumName<Encoding>, 4> kEncodingNames{{
    {Encoding::kDense, "dense"},
    {Encoding::kFp16, "fp16"},
    {Encoding::kTopK, "topk"},
    {Encoding::kSign, "sign"},
}};

bool parseEncoding(std::string_view text, Encoding* out) {
  return base::parseInto(kEncodingNames, text, out);
}

const char* encodingName(Encoding encoding) { return base::nameOf(kEncodingNames, encoding); }

std::size_t topKCount(std::size_t n, float ratio) {
  if (n == 0) return 0;
  const double r = std::clamp(static_cast<double>(ratio), 0.0, 1.0);  // NaN stays NaN
  const double k = std::round((r == r ? r : 0.0) * static_cast<double>(n));
  return std::clamp<std::size_t>(static_cast<std::size_t>(k), 1, n);
}

std::size_t encodedBytes(Encoding encoding, std::size_t n, float ratio) {
  switch (encoding) {
    case Encoding::kDense:
      return n * sizeof(float);
    case Encoding::kFp16:
      return n * sizeof(std::uint16_t);
    case Encoding::kTopK:
      return kU32 + 2 * kU32 * topKCount(n, ratio);
    case Encoding::kSign:
      return sizeof(float) + (n + 7) / 8;
  }
  return 0;
}

KernelStatus decode(Encoding encoding, std::span<const std::uint8_t> payload,
                    std::span<float> out) {
  const std::size_t n = out.size();
  switch (encoding) {
    case Encoding::kDense: {
      if (payload.size() != n * sizeof(float)) {
        return wrongLength(encoding, payload.size(), n * sizeof(float), n);
      }
      if (n != 0) std::memcpy(out.data(), payload.data(), payload.size());
      return KernelStatus::success();
    }
    case Encoding::kFp16: {
      if (payload.size() != n * sizeof(std::uint16_t)) {
        return wrongLength(encoding, payload.size(), n * sizeof(std::uint16_t), n);
      }
      decodeFp16Bulk(payload.data(), out.data(), n);
      return KernelStatus::success();
    }
    case Encoding::kTopK:
      return decodeTopK(payload, out);
    case Encoding::kSign:
      return decodeSign(payload, out);
  }
  return KernelStatus::error(Code::kInvalidArgument, "unknown encoding");
}

std::uint16_t floatToHalf(float value) {
  return detail::floatBitsToHalf(std::bit_cast<std::uint32_t>(value));
}

float halfToFloat(std::uint16_t bits) {
  return std::bit_cast<float>(detail::halfToFloatBits(bits));
}

Compressor::Compressor(Encoding encoding, std::size_t n, float ratio)
    : encoding_(encoding), n_(n), ratio_(ratio) {
  assert(n <= 0xffffffffu);  // top-k indices are u32
  if (encoding_ == Encoding::kTopK || encoding_ == Encoding::kSign) residual_.assign(n_, 0.0f);
}

void Compressor::reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

void Compressor::encode(std::span<const float> x, std::vector<std::uint8_t>* out) {
  assert(x.size() == n_);
  out->resize(payloadBytes());
  switch (encoding_) {
    case Encoding::kDense:
      if (n_ != 0) std::memcpy(out->data(), x.data(), n_ * sizeof(float));
      return;
    case Encoding::kFp16: {
      encodeFp16Bulk(x.data(), out->data(), n_);
      return;
    }
    case Encoding::kTopK:
    case Encoding::kSign: {
      // v = x + r, held in residual_ until the encoder turns it into the new residual.
      float* v = residual_.data();
      const float* xs = x.data();
      for (std::size_t i = 0; i < n_; ++i) v[i] += xs[i];
      if (encoding_ == Encoding::kTopK) {
        encodeTopK(out);
      } else {
        encodeSign(out);
      }
      return;
    }
  }
}

void Compressor::encodeTopK(std::vector<std::uint8_t>* out) {
  const std::size_t k = topKCount(n_, ratio_);
  std::uint8_t* p = out->data();
  const std::uint32_t k32 = static_cast<std::uint32_t>(k);
  std::memcpy(p, &k32, kU32);
  if (k == 0) return;
  float* v = residual_.data();
  // Threshold = the k-th largest magnitude (NaN counts as +Inf so it is always sent).
  magnitude_.resize(n_);
  bool finite = true;
  for (std::size_t i = 0; i < n_; ++i) {
    const float a = std::fabs(v[i]);
    finite &= isFiniteBits(a);
    magnitude_[i] = a != a ? INFINITY : a;
  }
  const float threshold = kthLargest(magnitude_, k, &select_);
  // Send everything above the threshold, then ties at it in index order until there are k.
  // One pass collects every candidate (usually k of them); ties beyond k are then dropped.
  picked_.clear();
  std::size_t above = 0;
  for (std::size_t i = 0; i < n_; ++i) {
    const float m = magnitude_[i];
    if (m >= threshold) {
      picked_.push_back(static_cast<std::uint32_t>(i));
      above += m > threshold;
    }
  }
  if (picked_.size() > k) {
    std::size_t ties_left = k - above, j = 0;
    for (std::uint32_t i : picked_) {
      const bool keep = magnitude_[i] > threshold || ties_left > 0;
      if (keep && !(magnitude_[i] > threshold)) --ties_left;
      if (keep) picked_[j++] = i;
    }
    picked_.resize(j);
  }
  assert(picked_.size() == k);
  std::uint8_t* idx = p + kU32;
  std::uint8_t* val = idx + kU32 * k;
  for (std::size_t t = 0; t < k; ++t) {
    const std::uint32_t i = picked_[t];
    std::memcpy(idx + kU32 * t, &i, kU32);
    std::memcpy(val + kU32 * t, &v[i], sizeof(float));
    v[i] = 0.0f;  // r = v - decode(C(v)): exact zero where v was sent
  }
  if (!finite) reset();
}

void Compressor::encodeSign(std::vector<std::uint8_t>* out) {
  float* v = residual_.data();
  // mean |v| in double; eight independent sums so the loop is not one long add chain.
  double acc[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n_; i += 8) {
    for (std::size_t j = 0; j < 8; ++j) acc[j] += std::fabs(static_cast<double>(v[i + j]));
  }
  for (; i < n_; ++i) acc[0] += std::fabs(static_cast<double>(v[i]));
  const double sum_abs =
      ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  const float scale = n_ == 0 ? 0.0f : static_cast<float>(sum_abs / static_cast<double>(n_));
  std::uint8_t* p = out->data();
  std::memcpy(p, &scale, sizeof scale);
  std::uint8_t* bits = p + sizeof(float);
  for (std::size_t b = 0; b * 8 < n_; ++b) {
    const std::size_t lo = b * 8, count = std::min<std::size_t>(8, n_ - lo);
    float* w = v + lo;
    std::uint8_t byte = 0;
    for (std::size_t j = 0; j < count; ++j) {
      const bool negative = w[j] < 0.0f;
      byte |= static_cast<std::uint8_t>(static_cast<unsigned>(negative) << j);
      w[j] -= negative ? -scale : scale;  // r = v - decoded
    }
    bits[b] = byte;
  }
  if (!isFiniteBits(scale)) reset();
}

}  // namespace groupsgd::kernels
