// Shared helpers for the kernels tests: seeded random buffers.
// Thread rule: plain functions.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace groupsgd::kernels::testing {

inline std::vector<float> randomVector(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace groupsgd::kernels::testing
