// The device a trainer shares with other jobs' workers (--shared-device): a step's compute
// is bracketed by acquire() and release(), so steps of different jobs take turns on it
// (docs/arbiter.md). The arbiter and lock-file machinery stays private to the worker
// library (src/arbitrated_device.h); the trainer and the Python binding see this only.
// Thread rule: the trainer's thread only.
#pragma once

#include <cstdint>
#include <memory>

#include <zmq.hpp>

#include "groupsgd/common/status.h"
#include "groupsgd/worker/options.h"

namespace groupsgd::worker {

class SharedDevice {
 public:
  virtual ~SharedDevice() = default;
  // nullptr when no --shared-device is given; an error when the lock file
  // cannot be opened.
  static Result<std::unique_ptr<SharedDevice>> open(zmq::context_t& ctx, const WorkerOptions& opts);

  // Blocks until this worker may compute; returns the milliseconds it waited.
  virtual double acquire(std::uint64_t worker_id, std::uint64_t step) = 0;
  // Spends the step's emulated device time (between acquire and release).
  virtual void spend(double device_ms) = 0;
  // Gives the device (and the lease) back.
  virtual void release() = 0;
  // The job id leases are keyed by: the one the daemon assigned (a job of a multi-job
  // daemon has its own id, whatever --job-id says).
  virtual void setJobId(std::uint64_t job_id) = 0;
};

}  // namespace groupsgd::worker
