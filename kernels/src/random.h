// Platform-independent random draws on top of std::mt19937_64 (whose output the standard
// fixes, unlike std::normal_distribution's). Thread rule: plain functions on a caller's rng.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <span>

namespace groupsgd::kernels::detail {

// Uniform in (0, 1], 53 random bits.
inline double uniformOpenZero(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
}

// Standard normal by Box-Muller (one draw per pair of uniforms; simple and exact enough).
inline double standardNormal(std::mt19937_64& rng) {
  double u1 = uniformOpenZero(rng);
  double u2 = uniformOpenZero(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Fills out with N(0, stddev^2) draws, in index order.
inline void fillNormal(std::span<float> out, double stddev, std::mt19937_64& rng) {
  for (float& v : out) v = static_cast<float>(stddev * standardNormal(rng));
}

}  // namespace groupsgd::kernels::detail
