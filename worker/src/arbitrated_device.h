// SharedDevice (groupsgd/worker/shared_device.h) with an arbiter and lock files:
// before each step's compute it takes a lease from the arbiter (--arbiter,
// unless none is given or it has failed), then the device's file lock, which
// keeps two steps from overlapping on one emulated device with or without an
// arbiter (docs/arbiter.md). An arbiter that is silent for
// --arbiter-timeout-ms, or refuses, never holds a step up: the worker computes
// unarbitrated, says so once, and asks the arbiter again after a while.
// Leases are asked with handoff: under an exclusive policy the arbiter may grant the
// next worker ahead, while the holder still computes; that worker then waits on the
// device's lock file (in timeslice mode too), so the holder's unlock hands the device
// over at once instead of after a round trip through the arbiter.
// Thread rule: the trainer's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include <zmq.hpp>

#include "groupsgd/arbiter/device_lock.h"
#include "groupsgd/arbiter/lease_client.h"
#include "groupsgd/arbiter/time_sliced_device.h"
#include "groupsgd/common/status.h"
#include "groupsgd/worker/options.h"
#include "groupsgd/worker/shared_device.h"

namespace groupsgd::worker {

class ArbitratedDevice final : public SharedDevice {
 public:
  ArbitratedDevice(const WorkerOptions& opts, std::optional<arbiter::DeviceLock> lock,
                   std::optional<arbiter::TimeSlicedDevice> sliced,
                   std::unique_ptr<arbiter::LeaseClient> lease,
                   std::optional<arbiter::DeviceLock> handoff_lock);

  double acquire(std::uint64_t worker_id, std::uint64_t step) override;
  void spend(double device_ms) override;
  void release() override;
  void setJobId(std::uint64_t job_id) override {
    if (lease_) lease_->setJobId(job_id);
  }

 private:
  const WorkerOptions& opts_;
  std::optional<arbiter::DeviceLock> lock_;          // exclusive
  std::optional<arbiter::DeviceLock> handoff_lock_;  // timeslice with an arbiter
  bool handoff_held_ = false;
  std::optional<arbiter::TimeSlicedDevice> sliced_;  // timeslice
  std::unique_ptr<arbiter::LeaseClient> lease_;      // null without --arbiter
  bool arbiter_down_ = false;
  std::chrono::steady_clock::time_point retry_at_;
  bool leased_ = false;
  std::uint64_t worker_id_ = 0;
  std::chrono::steady_clock::time_point since_;
};

}  // namespace groupsgd::worker
