// float <-> IEEE 754 binary16 on bit patterns, shared by the CPU codec and the CUDA kernels
// so both produce the same bits. Round to nearest, ties to even; subnormals exact; Inf kept;
// NaN kept as a quiet NaN with its sign and top 9 payload bits.
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
  if (ax >= 0x38800000u) {  // >= 2^-14: a normal half
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
  if (exp == 0x1fu) return sign | 0x7f800000u | (mant << 13);
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

}  // namespace groupsgd::kernels::detail
