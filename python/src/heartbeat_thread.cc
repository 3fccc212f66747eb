#include "heartbeat_thread.h"

#include "groupsgd/common/interrupt.h"
#include "groupsgd/common/log.h"

namespace groupsgd::python {
namespace {

float meanSince(double now, double before, std::uint64_t steps) {
  return steps == 0 ? 0.f : static_cast<float>((now - before) / static_cast<double>(steps));
}

}  // namespace

HeartbeatThread::HeartbeatThread(zmq::context_t& ctx, const worker::WorkerOptions& opts)
    : coord_(ctx, opts.coordinator, opts.job_id, std::chrono::milliseconds(opts.timeout_ms),
             opts.curve) {
  thread_ = std::thread([this] { loop(); });
}

HeartbeatThread::~HeartbeatThread() {
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HeartbeatThread::follow(const client::Assignment& a, const std::string& job_endpoint,
                             std::uint64_t job_id) {
  {
    std::lock_guard lock(mu_);
    assignment_ = a;
    job_endpoint_ = job_endpoint;
    job_id_ = job_id;
    chosen_compression_.clear();  // another group's choice does not carry over
    ++generation_;                // the thread restarts its wait with this assignment's period
    reregister_.store(false);
  }
  wake_.notify_all();
}

void HeartbeatThread::pause() {
  std::lock_guard lock(mu_);
  assignment_.reset();
}

void HeartbeatThread::publish(const StepTotals& totals) {
  std::lock_guard lock(mu_);
  totals_ = totals;
}

void HeartbeatThread::sendSoon() {
  {
    std::lock_guard lock(mu_);
    urgent_ = true;
  }
  wake_.notify_all();
}

void HeartbeatThread::loop() {
  log::setThreadTag("heartbeat");
  // A heartbeat in flight to a silent coordinator (timeout_ms, possibly minutes) must not
  // hold up the destructor's join: it ends within kInterruptSlice of the shutdown.
  const ScopedInterruptCheck on_shutdown([this] { return shutdown_.load(); });
  std::unique_lock lock(mu_);
  while (!shutdown_) {
    const auto period = std::chrono::milliseconds(assignment_ ? assignment_->heartbeat_ms : 1000);
    const std::uint64_t generation = generation_;
    if (wake_.wait_for(lock, period,
                       [&] { return shutdown_ || generation_ != generation || urgent_; }) &&
        (shutdown_ || generation_ != generation)) {
      continue;  // shut down, or a new assignment: wait again with its period
    }
    urgent_ = false;
    if (!assignment_ || reregister_.load()) continue;
    const client::Assignment a = *assignment_;
    const StepTotals t = totals_;
    const std::uint64_t window = t.timed_steps - reported_.timed_steps;
    client::HeartbeatStats st{t.samples_trained,
                              t.steps,
                              t.last_loss,
                              meanSince(t.compute_ms, reported_.compute_ms, window),
                              meanSince(t.comm_ms, reported_.comm_ms, window),
                              t.test_accuracy,
                              t.evaluated_version,
                              t.batch_size,
                              meanSince(t.wait_ms, reported_.wait_ms, window),
                              {},
                              false,
                              0,
                              t.test_loss};
    reported_ = t;
    if (!job_endpoint_.empty()) coord_.useJobCoordinator(job_endpoint_, job_id_);
    lock.unlock();  // the request may take up to the timeout; publish() must not wait
    auto hb = coord_.heartbeat(a, st);
    lock.lock();
    ++sent_;
    if (!hb) {
      if (hb.status().code() == Code::kQuarantined) {
        GSGD_ERROR("quarantined by the coordinator: " << hb.status().message());
        quarantined_.store(true);
        stop_.store(true);
      } else {
        GSGD_WARN("heartbeat failed: " << hb.status().toString());
      }
    } else if (hb->stop) {
      measure_now_.store(false);
      GSGD_INFO("coordinator asks us to stop");
      stop_.store(true);
    } else if (hb->reregister && assignment_ && assignment_->epoch == a.epoch) {
      reregister_.store(true);  // the owner registers again and calls follow()
    }
    if (hb && !hb->stop) measure_now_.store(hb->measure_now);
    if (hb && !hb->compression.empty()) chosen_compression_ = hb->compression;
  }
}

std::string HeartbeatThread::chosenCompression() {
  std::lock_guard lock(mu_);
  return chosen_compression_;
}

}  // namespace groupsgd::python
