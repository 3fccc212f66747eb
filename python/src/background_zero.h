// Zeroes a gradient buffer on a thread of its own: a CPU trainer computes its next
// gradient into the other of two buffers meanwhile, so zeroing 40 MB (13 ms at this
// machine's memory bandwidth, 8% of a 10M-parameter step) leaves the step's critical path.
// Thread rule: start() and await() are called by one owner thread; the buffer must not
// be read or written by anyone else between them.
#pragma once

#include <memory>
#include <thread>
#include <vector>

namespace groupsgd::python {

class BackgroundZero {
 public:
  BackgroundZero() = default;
  ~BackgroundZero() { await(); }
  BackgroundZero(const BackgroundZero&) = delete;
  BackgroundZero& operator=(const BackgroundZero&) = delete;
  // Starts zeroing `buf` (after the previous zeroing ended).
  void start(std::shared_ptr<std::vector<float>> buf);
  // Returns once the zeroing started last has ended (at once when none runs).
  void await();

 private:
  std::thread thread_;
};

}  // namespace groupsgd::python
