// Shuffling that is identical on every standard library (shards and epoch permutations
// must agree between processes). Private to the dataset library.
#pragma once

#include <cstdint>
#include <random>

namespace groupsgd::dataset::detail {

// Uniform in [0, n) by rejection; std::uniform_int_distribution's algorithm differs between
// standard libraries.
inline std::uint64_t uniformBelow(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
  std::uint64_t x;
  do {
    x = rng();
  } while (x < reject_below);
  return x % n;
}

// Decorrelates shuffles that share a seed (splitmix64 of seed and salt).
inline std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t salt) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace groupsgd::dataset::detail
