// A half-open range [begin, end) of indices into a flat parameter vector, e.g. where a
// 1-D tensor (a bias) sits. Thread rule: plain values and pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace groupsgd::kernels {

struct ElementRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const ElementRange&) const = default;
};

// The parts of `ranges` inside [offset, offset + n), shifted to start at 0, sorted and
// merged (overlapping or touching ranges become one; empty ones are dropped). With
// offset 0 and n the vector's size this just normalises the list.
std::vector<ElementRange> clipRanges(std::span<const ElementRange> ranges, std::size_t offset,
                                     std::size_t n);

}  // namespace groupsgd::kernels
