// The internal branch-free fp16 conversions (kernels/src/half_bits.h) against the reference
// ones. The codec only uses them on CPUs without F16C, so they are tested here directly.
#include "half_bits.h"

#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <random>

using namespace groupsgd::kernels::detail;

TEST_CASE("half bits: branch-free half -> float equals the reference for every half") {
  std::size_t bad = 0;
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    bad += halfToFloatBitsBranchless(static_cast<std::uint16_t>(h)) !=
           halfToFloatBits(static_cast<std::uint16_t>(h));
  }
  CHECK(bad == 0);
}

TEST_CASE("half bits: branch-free float -> half equals the reference") {
  std::size_t bad = 0, checked = 0;
  auto check = [&](std::uint32_t f) {
    bad += floatBitsToHalfBranchless(f) != floatBitsToHalf(f);
    ++checked;
  };
  // Every float whose low 12 bits are 0x000, 0x001, 0x7ff, 0x800, 0x801 or 0xfff: all
  // exponents and signs, every half mantissa, and each side of every rounding midpoint.
  for (std::uint32_t hi = 0; hi < (1u << 20); ++hi) {
    for (std::uint32_t lo : {0x000u, 0x001u, 0x7ffu, 0x800u, 0x801u, 0xfffu}) check(hi << 12 | lo);
  }
  std::mt19937 rng(9);
  for (int i = 0; i < 1'000'000; ++i) check(static_cast<std::uint32_t>(rng()));
  CHECK(bad == 0);
  MESSAGE("compared ", checked, " floats");
}
