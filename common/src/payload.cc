#include "groupsgd/common/payload.h"

#include <atomic>

namespace groupsgd {

std::shared_ptr<std::vector<float>> PayloadPool::acquire(std::size_t n) {
  for (auto& b : buffers_) {
    // use_count()==1: no message in flight still holds it, so reuse avoids a fresh
    // allocation (and the page faults of a large mmap'd buffer) per step.
    if (b.use_count() == 1) {
      // Pairs with the release in the I/O thread's final reference drop.
      std::atomic_thread_fence(std::memory_order_acquire);
      b->resize(n);
      return b;
    }
  }
  buffers_.push_back(std::make_shared<std::vector<float>>(n));
  return buffers_.back();
}

}  // namespace groupsgd
