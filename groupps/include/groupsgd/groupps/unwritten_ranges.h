// The parts of a step's sum buffer nothing was written into yet. The group PS never
// clears the buffer whole between steps: a gradient part landing in an unwritten range is
// stored (y = b*g, no read of y), one landing where something was written is added, and
// what is still unwritten when the step closes is zeroed then. That saves a write pass
// over the model per step, and the first member's read of the sum.
// Thread rule: not thread-safe; owned by one StepBarrier (the group PS's thread).
#pragma once

#include <cstddef>
#include <iterator>
#include <map>

namespace groupsgd::groupps {

class UnwrittenRanges {
 public:
  // All of [0, size) unwritten.
  void reset(std::size_t size) {
    free_.clear();
    if (size > 0) free_[0] = size;
  }

  // Marks [b, e) written. True when all of it was unwritten (the caller stores into it);
  // otherwise zero(lo, hi) was called first for each unwritten piece inside it (the caller
  // adds into it).
  template <class Zero>
  bool take(std::size_t b, std::size_t e, Zero&& zero) {
    if (b >= e) return false;
    auto it = free_.upper_bound(b);
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->second > b) it = prev;  // the range holding b
    }
    if (it != free_.end() && it->first <= b && it->second >= e) {
      const std::size_t lo = it->first;
      const std::size_t hi = it->second;
      free_.erase(it);
      if (lo < b) free_[lo] = b;
      if (e < hi) free_[e] = hi;
      return true;
    }
    while (it != free_.end() && it->first < e) {
      const std::size_t lo = it->first;
      const std::size_t hi = it->second;
      it = free_.erase(it);
      const std::size_t zlo = lo < b ? b : lo;
      const std::size_t zhi = hi > e ? e : hi;
      zero(zlo, zhi);
      if (lo < b) free_[lo] = b;
      if (e < hi) free_[e] = hi;
    }
    return false;
  }

  // Marks everything written, calling zero(lo, hi) for each unwritten piece first.
  template <class Zero>
  void takeAll(Zero&& zero) {
    for (const auto& [lo, hi] : free_) zero(lo, hi);
    free_.clear();
  }

 private:
  std::map<std::size_t, std::size_t> free_;  // begin -> end, disjoint, not adjacent-merged
};

}  // namespace groupsgd::groupps
