#include "job_control_queue.h"

namespace groupsgd::jobs {

using ops::ControlError;
using ops::PendingRequest;

void JobControlQueue::push(PendingRequest r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (refusing_) return r.fail(ControlError::kRefused, *refusing_);
  queue_.push_back(std::move(r));
}

std::optional<PendingRequest> JobControlQueue::tryPop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  PendingRequest r = std::move(queue_.front());
  queue_.pop_front();
  return r;
}

void JobControlQueue::setRefusing(std::optional<std::string> reason) {
  std::lock_guard<std::mutex> lock(mu_);
  refusing_ = std::move(reason);
  if (!refusing_) return;
  for (auto& r : queue_) r.fail(ControlError::kRefused, *refusing_);
  queue_.clear();
}

}  // namespace groupsgd::jobs
