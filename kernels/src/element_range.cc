#include "groupsgd/kernels/element_range.h"

#include <algorithm>

namespace groupsgd::kernels {

std::vector<ElementRange> clipRanges(std::span<const ElementRange> ranges, std::size_t offset,
                                     std::size_t n) {
  std::vector<ElementRange> out;
  for (const ElementRange& r : ranges) {
    const std::size_t b = std::max(r.begin, offset), e = std::min(r.end, offset + n);
    if (b < e) out.push_back({b - offset, e - offset});
  }
  std::sort(out.begin(), out.end(),
            [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  std::vector<ElementRange> merged;
  for (const ElementRange& r : out) {
    if (!merged.empty() && r.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace groupsgd::kernels
