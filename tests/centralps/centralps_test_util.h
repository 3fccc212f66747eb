// Shared helpers for the central PS tests: random vectors from a caller's generator, and
// bit-for-bit comparison of parameter vectors.
// Thread rule: plain functions.
#pragma once

#include <cstring>
#include <random>
#include <vector>

namespace groupsgd::centralps::testing {

// n values drawn uniformly from [-scale, scale) with rng.
inline std::vector<float> randomVector(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline bool bitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace groupsgd::centralps::testing
