// float <-> IEEE 754 binary16 on bit patterns, shared by the CPU codec and the CUDA kernels
// so both produce the same bits. Round to nearest, ties to even; subnormals exact; Inf kept;
// NaN kept as a quiet NaN with its sign and payload (the top 10 bits of it, float -> half),
// as x86 F16C and CUDA's conversions do.
// Thread rule: pure functions.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GROUPSGD_HOST_DEVICE __host__ __device__
#else
#define GROUPSGD_HOST_DEVICE
#endif

namespace groupsgd::kernels::detail {

GROUPSGD_HOST_DEVICE inline std::uint16_t floatBitsToHalf(std::uint32_t x) {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // Inf or NaN
    if (ax == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 65520 = 0x477ff000 is the tie between 65504 (odd mantissa) and 2^16: it and everything
  // above rounds to Inf.
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {               // >= 2^-14: a normal half
    std::uint32_t v = ax - 0x38000000u;  // rebias the exponent from 127 to 15
    v += 0xfffu + ((v >> 13) & 1u);      // round to nearest even on the 13 dropped bits
    return static_cast<std::uint16_t>(sign | (v >> 13));  // a mantissa carry bumps exp
  }
  if (ax < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to 0
  // Subnormal half: value / 2^-24 rounded to an integer in [0, 1024] (1024 = smallest
  // normal, which is the right encoding when rounding carries).
  const std::uint32_t e = ax >> 23;  // biased exponent, 102..112
  const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14..24
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

GROUPSGD_HOST_DEVICE inline std::uint32_t halfToFloatBits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);
  if (exp != 0) return sign | ((exp + 112u) << 23) | (mant << 13);
  if (mant == 0) return sign;
  // Subnormal: normalise so the leading 1 becomes the implicit bit.
  std::uint32_t e = 113u;  // exponent of 2^-14 with the mantissa still to be shifted
  std::uint32_t m = mant;
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --e;
  }
  return sign | (e << 23) | ((m & 0x3ffu) << 13);
}

// All ones when cond holds, else zero; select(m, a, b) = m ? a : b without a branch.
inline std::uint32_t maskIf(bool cond) { return 0u - static_cast<std::uint32_t>(cond); }
inline std::uint32_t select(std::uint32_t mask, std::uint32_t a, std::uint32_t b) {
  return (a & mask) | (b & ~mask);
}

// Branch-free forms of the two functions above, bit-identical to them (tested), for the
// bulk CPU loops: written with masks so the compiler vectorises them. They rely on the
// default floating-point environment (round to nearest, no flush-to-zero).
inline std::uint16_t floatBitsToHalfBranchless(std::uint32_t x) {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  const auto sax = static_cast<std::int32_t>(ax);  // < 2^31: signed compares vectorise
  std::uint32_t normal = ax - 0x38000000u;
  normal = (normal + 0xfffu + ((normal >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5 leaves |x| rounded (to nearest even) to a multiple of 2^-24 in
  // the low mantissa bits of the sum.
  float f, half = 0.5f;
  __builtin_memcpy(&f, &ax, sizeof f);
  f += half;
  std::uint32_t subnormal;
  __builtin_memcpy(&subnormal, &f, sizeof subnormal);
  subnormal -= 0x3f000000u;
  const std::uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  std::uint32_t r = select(maskIf(sax < 0x38800000), subnormal, normal);
  r = select(maskIf(sax >= 0x477ff000), 0x7c00u, r);
  r = select(maskIf(sax > 0x7f800000), nan, r);
  return static_cast<std::uint16_t>(sign | r);
}

inline std::uint32_t halfToFloatBitsBranchless(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t shifted = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exp = shifted & 0x0f800000u;
  const std::uint32_t normal = shifted + 0x38000000u;   // rebias 15 -> 127
  const std::uint32_t inf_nan = (normal + 0x38000000u)  // exponent all ones, payload kept,
                                | (maskIf(shifted & 0x7fe000u) & 0x400000u);  // NaN made quiet
  // Subnormal: 2^-14 * (1 + m/1024) - 2^-14 = m * 2^-24, exactly.
  const std::uint32_t biased = normal + 0x00800000u;
  float f, base;
  const std::uint32_t base_bits = 0x38800000u;
  __builtin_memcpy(&f, &biased, sizeof f);
  __builtin_memcpy(&base, &base_bits, sizeof base);
  f -= base;
  std::uint32_t subnormal;
  __builtin_memcpy(&subnormal, &f, sizeof subnormal);
  std::uint32_t r = select(maskIf(exp == 0), subnormal, normal);
  r = select(maskIf(exp == 0x0f800000u), inf_nan, r);
  return sign | r;
}

}  // namespace groupsgd::kernels::detail
