// Positions [begin, end) of one epoch's permutation of the training set: what the
// coordinator's epoch ledger grants (data_allocation ranges) and a trainer's range
// sampler draws from. Thread rule: a value type.
#pragma once

#include <compare>
#include <cstdint>

namespace groupsgd {

struct SampleRange {
  std::uint64_t epoch = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t size() const { return end - begin; }
  auto operator<=>(const SampleRange&) const = default;
};

}  // namespace groupsgd
