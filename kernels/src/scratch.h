// A float buffer that only grows, so per-step scratch is allocated once per model.
// Thread rule: owned by one model instance.
#pragma once

#include <cstddef>
#include <vector>

namespace groupsgd::kernels::detail {

class Scratch {
 public:
  float* get(std::size_t n) {
    if (buf_.size() < n) buf_.resize(n);
    return buf_.data();
  }
  float* data() { return buf_.data(); }

 private:
  std::vector<float> buf_;
};

}  // namespace groupsgd::kernels::detail
