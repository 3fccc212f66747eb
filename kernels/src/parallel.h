// Splits a long elementwise loop across std::threads; short loops run inline.
// Thread rule: fn is called concurrently on disjoint [begin, end) ranges.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace groupsgd::kernels::detail {

// Below this many floats a thread spawn costs more than it saves.
inline constexpr std::size_t kParallelThreshold = std::size_t{1} << 22;
inline constexpr std::size_t kMinChunk = std::size_t{1} << 20;

// Calls fn(begin, end) over [0, n), chunks aligned to `align` indices. Each index stands
// for `unit` floats of work (unit > 1 when the indices are blocks).
template <typename Fn>
void parallelFor(std::size_t n, Fn&& fn, std::size_t align = 64, std::size_t unit = 1) {
  std::size_t work = n * unit;
  std::size_t workers = work < kParallelThreshold ? 1 : std::thread::hardware_concurrency();
  workers = std::clamp<std::size_t>(std::min({workers, work / kMinChunk, n}), 1, 64);
  if (workers == 1) {
    fn(std::size_t{0}, n);
    return;
  }
  std::size_t chunk = (n / workers + align - 1) / align * align;
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  std::size_t begin = 0;
  for (std::size_t w = 0; w + 1 < workers && begin + chunk < n; ++w, begin += chunk) {
    threads.emplace_back([&fn, begin, chunk] { fn(begin, begin + chunk); });
  }
  fn(begin, n);  // the caller takes the last chunk
  for (auto& t : threads) t.join();
}

}  // namespace groupsgd::kernels::detail
