// Splits a long elementwise loop across std::threads; short loops run inline.
// Thread rule: fn is called concurrently on disjoint [begin, end) ranges.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace groupsgd::kernels::detail {

// Below this many floats a thread spawn costs more than it saves.
inline constexpr std::size_t kParallelThreshold = std::size_t{1} << 22;
inline constexpr std::size_t kMinChunk = std::size_t{1} << 20;
// Work is handed out in pieces of about this many floats, so that a thread the OS
// deschedules (other processes share the cores) does not hold the others up: whoever runs
// takes the next piece.
inline constexpr std::size_t kPieceFloats = std::size_t{1} << 18;

// Calls fn(begin, end) over [0, n), pieces aligned to `align` indices. Each index stands
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
  const std::size_t per_piece = std::max<std::size_t>(1, kPieceFloats / unit);
  const std::size_t piece = (per_piece + align - 1) / align * align;
  const std::size_t pieces = (n + piece - 1) / piece;
  std::atomic<std::size_t> next{0};
  auto run = [&] {
    for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed); i < pieces;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(i * piece, std::min(n, (i + 1) * piece));
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  for (std::size_t w = 0; w + 1 < workers; ++w) threads.emplace_back(run);
  run();  // the caller works too
  for (auto& t : threads) t.join();
}

}  // namespace groupsgd::kernels::detail
