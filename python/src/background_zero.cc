#include "background_zero.h"

#include <algorithm>

namespace groupsgd::python {

void BackgroundZero::start(std::shared_ptr<std::vector<float>> buf) {
  await();
  thread_ = std::thread([buf = std::move(buf)] { std::fill(buf->begin(), buf->end(), 0.0f); });
}

void BackgroundZero::await() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace groupsgd::python
