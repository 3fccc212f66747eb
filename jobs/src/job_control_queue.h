// The control requests the host forwards to one job's coordinator.
// Thread rule: pushed by the host loop's thread, popped by the job's coordinator on its
// own; every method takes the lock.
#pragma once

#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "groupsgd/ops/control_server.h"

namespace groupsgd::jobs {

class JobControlQueue : public ops::ControlQueue {
 public:
  void push(ops::PendingRequest r);
  std::optional<ops::PendingRequest> tryPop() override;
  void setRefusing(std::optional<std::string> reason) override;

 private:
  std::mutex mu_;
  std::deque<ops::PendingRequest> queue_;
  std::optional<std::string> refusing_;
};

}  // namespace groupsgd::jobs
