#include "groupsgd/common/tensor_view.h"

#include <algorithm>
#include <cstring>

namespace groupsgd {

void TensorView::copyRange(std::size_t offset, std::span<float> out) const {
  std::size_t part_start = 0;
  std::size_t done = 0;
  for (const auto& p : parts) {
    if (done == out.size()) break;
    const std::size_t part_end = part_start + p.size();
    const std::size_t want = offset + done;
    if (want < part_end) {
      const std::size_t from = want - part_start;
      const std::size_t n = std::min(p.size() - from, out.size() - done);
      std::memcpy(out.data() + done, p.data() + from, n * sizeof(float));
      done += n;
    }
    part_start = part_end;
  }
}

void TensorView::rangePieces(std::size_t offset, std::size_t n,
                             std::vector<std::span<const float>>* out) const {
  std::size_t part_start = 0;
  std::size_t done = 0;
  for (const auto& p : parts) {
    if (done == n) break;
    const std::size_t part_end = part_start + p.size();
    const std::size_t want = offset + done;
    if (want < part_end) {
      const std::size_t from = want - part_start;
      const std::size_t take = std::min(p.size() - from, n - done);
      out->push_back(p.subspan(from, take));
      done += take;
    }
    part_start = part_end;
  }
}

}  // namespace groupsgd
