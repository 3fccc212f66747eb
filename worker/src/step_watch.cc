#include "groupsgd/worker/step_watch.h"

#include <algorithm>

namespace groupsgd::worker {
namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

bool StepWatch::add(double step_ms) {
  if (!(step_ms > 0)) return false;
  recent_.push_back(step_ms);
  while (recent_.size() > steps_) recent_.pop_front();
  since_report_.push_back(step_ms);
  ++count_;
  ++since_early_;
  if (recent_.size() < steps_) return false;
  if (!first_sent_) {
    first_sent_ = true;
    since_early_ = 0;
    reference_ = median({recent_.begin(), recent_.end()});
    return true;
  }
  if (reference_ <= 0 || since_early_ < steps_) return false;
  const bool slower = std::all_of(recent_.begin(), recent_.end(),
                                  [&](double t) { return t >= ratio_ * reference_; });
  const bool faster = std::all_of(recent_.begin(), recent_.end(),
                                  [&](double t) { return t * ratio_ <= reference_; });
  if (!slower && !faster) return false;
  since_early_ = 0;
  reference_ = median({recent_.begin(), recent_.end()});
  return true;
}

void StepWatch::reported() {
  // The reference follows what was reported, so a slow drift is reported by the regular
  // heartbeats and never piles up into a false shift.
  if (since_report_.size() >= steps_) reference_ = median(since_report_);
  since_report_.clear();
}

void StepWatch::restart() {
  recent_.clear();
  since_report_.clear();
  count_ = 0;
  since_early_ = 0;
  first_sent_ = false;
}

}  // namespace groupsgd::worker
