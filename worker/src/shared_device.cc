#include <thread>

#include "arbitrated_device.h"
#include "groupsgd/common/interrupt.h"
#include "groupsgd/common/log.h"

namespace groupsgd::worker {
namespace {

using Clock = std::chrono::steady_clock;
// After a failure the arbiter is asked again this much later (one deadline's wait each time).
constexpr auto kRetryArbiterAfter = std::chrono::seconds(30);

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

Result<std::unique_ptr<SharedDevice>> SharedDevice::open(zmq::context_t& ctx,
                                                         const WorkerOptions& opts) {
  if (opts.shared_device.empty()) return std::unique_ptr<SharedDevice>();
  const std::string dir =
      opts.device_lock_dir.empty() ? arbiter::defaultDeviceLockDir() : opts.device_lock_dir;
  std::optional<arbiter::DeviceLock> lock;
  std::optional<arbiter::TimeSlicedDevice> sliced;
  if (opts.device_sharing == "timeslice") {
    auto opened = arbiter::TimeSlicedDevice::open(dir, opts.shared_device);
    if (!opened) return opened.status();
    sliced.emplace(std::move(*opened));
  } else {
    auto opened = arbiter::DeviceLock::open(dir, opts.shared_device);
    if (!opened) return opened.status();
    lock.emplace(std::move(*opened));
  }
  std::unique_ptr<arbiter::LeaseClient> lease;
  std::optional<arbiter::DeviceLock> handoff_lock;
  if (!opts.arbiter.empty()) {
    if (!lock && opts.arbiter_handoff) {  // timeslice: a lease granted ahead waits for the holder
                                          // on this lock
      auto opened = arbiter::DeviceLock::open(dir, opts.shared_device);
      if (!opened) return opened.status();
      handoff_lock.emplace(std::move(*opened));
    }
    arbiter::LeaseClientOptions lo;
    lo.answer_timeout = std::chrono::milliseconds(opts.arbiter_timeout_ms);
    lo.curve = opts.curve;
    lease = std::make_unique<arbiter::LeaseClient>(ctx, opts.arbiter, opts.job_id, lo);
  }
  return std::unique_ptr<SharedDevice>(new ArbitratedDevice(
      opts, std::move(lock), std::move(sliced), std::move(lease), std::move(handoff_lock)));
}

ArbitratedDevice::ArbitratedDevice(const WorkerOptions& opts,
                                   std::optional<arbiter::DeviceLock> lock,
                                   std::optional<arbiter::TimeSlicedDevice> sliced,
                                   std::unique_ptr<arbiter::LeaseClient> lease,
                                   std::optional<arbiter::DeviceLock> handoff_lock)
    : opts_(opts),
      lock_(std::move(lock)),
      handoff_lock_(std::move(handoff_lock)),
      sliced_(std::move(sliced)),
      lease_(std::move(lease)) {}

double ArbitratedDevice::acquire(std::uint64_t worker_id, std::uint64_t step) {
  const auto t0 = Clock::now();
  worker_id_ = worker_id;
  if (lease_ && (!arbiter_down_ || t0 >= retry_at_)) {
    bool locked = false;
    Status got =
        lease_->acquire(worker_id, opts_.shared_device, step, opts_.arbiter_handoff, &locked);
    if (isInterrupted(got)) return msSince(t0);  // the caller was interrupted (interrupt.h)
    if (got) {
      leased_ = true;
      if (locked && handoff_lock_) {
        if (Status s = handoff_lock_->lock(); s) {
          handoff_held_ = true;
        } else {
          GSGD_WARN("device lock " << handoff_lock_->path() << ": " << s.message());
        }
      }
      if (arbiter_down_) GSGD_INFO("the arbiter at " << lease_->endpoint() << " answers again");
      arbiter_down_ = false;
    } else {
      if (!arbiter_down_) {
        GSGD_WARN("the arbiter at " << lease_->endpoint() << " failed (" << got.message()
                                    << "); computing on " << opts_.shared_device
                                    << " unarbitrated until it answers again");
      }
      arbiter_down_ = true;
      retry_at_ = Clock::now() + kRetryArbiterAfter;
    }
  }
  if (lock_) {
    if (Status s = lock_->lock(); isInterrupted(s)) {
      return msSince(t0);
    } else if (!s) {
      GSGD_WARN("device lock " << lock_->path() << ": " << s.message() << "; computing without it");
    }
  }
  since_ = Clock::now();
  return msSince(t0);
}

void ArbitratedDevice::spend(double device_ms) {
  if (sliced_) {
    sliced_->spend(device_ms);
  } else if (device_ms > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(device_ms));
  }
}

void ArbitratedDevice::release() {
  if (lock_) lock_->unlock();
  if (handoff_held_) {
    handoff_lock_->unlock();
    handoff_held_ = false;
  }
  if (leased_) {
    (void)lease_->release(worker_id_, opts_.shared_device, msSince(since_));
    leased_ = false;
  }
}

}  // namespace groupsgd::worker
