// A training (or evaluating) process driven step by step from outside, as the Python
// binding does: the same registration, recovery and directive handling as the reference
// trainer (worker/src/trainer.cc), but the caller computes the gradient between calls.
// Parameters and the gradient live in buffers the caller shares with the session: step()
// sends the gradient buffer without copying it and writes the next replica into params.
// Heartbeats run on their own thread (heartbeat_thread.h).
// Thread rule: one thread calls the methods (the binding releases the GIL around them).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>

#include <zmq.hpp>

#include "groupsgd/client/central_model_client.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/interrupt.h"
#include "groupsgd/dataset/range_sampler.h"
#include "groupsgd/worker/group_wait.h"
#include "groupsgd/worker/options.h"
#include "heartbeat_thread.h"

namespace groupsgd::worker {
class SharedDevice;  // groupsgd/worker/shared_device.h
}

namespace groupsgd::python {

struct StepResult {
  bool pushed = false;    // false: lost to a failure (params re-fetched) or stopping
  bool skipped = false;   // a skipped step (no gradient sent; the barrier counted it)
  bool accepted = false;  // the group PS used the gradient (false: late, dropped)
  std::uint64_t step = 0;
  std::uint64_t model_version = 0;
  double wait_ms = 0;
  // Optimizer on the workers (docs/pytorch.md): the gradient buffer holds the group's mean
  // gradient, to step the optimizer with; correction: add correctionBuffer() to the
  // parameters first; reset_optimizer: clear the optimizer's state first.
  bool mean_gradient = false;
  bool correction = false;
  bool reset_optimizer = false;
  // params were replaced by the group's (a pull: joining, moved, late, recovering):
  // restart the optimizer state and take no step with this call's gradient.
  bool parameters_loaded = false;
};

class Session {
 public:
  // opts as groupsgd-worker parses them (CURVE keys loaded); model: what the daemon must
  // match (param_count > 0), its initial values sent with new registrations.
  // optimizer: the caller steps its own optimizer (a trainer of an optimizer.placement
  // workers run); registering with the other placement than the caller's is an error.
  // mean_grad, correction: where mean gradient replies go (the caller's gradient buffer
  // and a correction buffer it owns; param_count values each, alive as long as *this).
  Session(worker::WorkerOptions opts, client::Role role, client::ModelDescription model,
          bool optimizer = false, std::span<float> mean_grad = {},
          std::span<float> correction = {});
  ~Session();

  // Registers (retrying up to the connect timeout) and, for a trainer, pulls the group
  // replica into params. params.size() must equal the model's parameter count.
  Status start(std::span<float> params);
  // Trainer: pushes grad (shared with the message, not copied), waits for the step to
  // close and writes the next replica into params; follows directives, re-registers and
  // recovers as the reference trainer does. A non-OK Status: the worker cannot go on.
  // skipped: the caller's gradient was not finite; grad is not sent, the group's barrier
  // counts this member for the step with no weight (GroupClient::pushSkipped).
  Result<StepResult> step(const Payload& grad, std::uint32_t batch, float loss,
                          std::span<float> params, bool skipped = false);
  // Trainer of a data_allocation ranges run: the sample indices of the next batch (none
  // once the worker should stop), drawn from the ranges the coordinator grants (claimed as needed;
  // each claim acknowledges the ranges the steps since have trained). Every batch drawn is expected
  // to be stepped: a step() that pushes marks it trained, one that fails draws it again.
  // dataset_size: the caller's training set (every trainer of the run must agree).
  Result<std::vector<std::uint32_t>> nextRangeBatch(std::uint64_t dataset_size,
                                                    std::uint32_t batch);
  // Evaluator: fetches the central model into params; returns its version.
  Result<std::uint64_t> fetchCentral(std::span<float> params);
  // Evaluator: the accuracy and validation loss (-1 = none) of `version`, sent with a
  // heartbeat at once.
  void report(float accuracy, std::uint64_t version, float loss = -1);
  // Leaves with this registration's counts and stops heartbeats. Idempotent. Interruptible
  // (setInterruptCheck) like the waits above.
  Status close();
  // --shared-device: blocks until this worker may compute on it (the arbiter's lease, if
  // --arbiter is given, then the device lock); returns the milliseconds waited. A no-op
  // (0) without a shared device or when already held. step() and close() release it.
  double acquireDevice();
  void releaseDevice();
  bool sharesDevice() const { return device_ != nullptr; }
  bool holdsDevice() const { return device_held_; }

  // Polled (every kInterruptSlice) by every wait of start(), step(), fetchCentral() and
  // acquireDevice(): true ends the wait and the call with interruptedStatus() (the
  // binding's check runs Python's signal handlers: Ctrl-C).
  void setInterruptCheck(std::function<bool()> check) { interrupt_check_ = std::move(check); }
  // The last call was cut short by the interrupt check.
  bool interrupted() const { return interrupted_; }
  // Optimizer on the workers: whether the next step() sends the parameters (the caller's
  // buffer must hold them then).
  bool wantsParameters() const { return attach_next_; }
  // The group step the next push is for (the group's count, shared by its members).
  std::uint64_t groupStep() const { return step_; }

  bool shouldStop() const { return stop_ || heartbeat_->stopRequested(); }
  // An evaluator: the final model waits for its reading; measure without waiting.
  bool measureNow() const { return heartbeat_->measureNowRequested(); }
  bool quarantined() const { return quarantined_ || heartbeat_->quarantined(); }
  const client::Assignment& assignment() const { return a_; }
  std::uint32_t batchSize() const { return batch_; }
  // How this trainer encodes its gradients now: --compress, else the coordinator's choice
  // for its group (the assignment's, then what heartbeats said: compress_gradients auto).
  const std::string& compression() const { return compression_; }
  std::uint64_t totalSteps() const { return total_steps_; }
  std::uint64_t heartbeatsSent() const { return heartbeat_->sent(); }
  std::uint64_t registrations() const { return registrations_; }

 private:
  using Clock = std::chrono::steady_clock;
  Status register_(std::uint64_t keep_id);
  Status adopt(const client::Assignment& a);
  bool follow(const client::StepAnswer& ans);
  Status runOver(const Status& why);
  // Leave with this registration's counts, once (registered_ guards it; adopt() sets it).
  Status leave();
  Status pullUntilReady(std::span<float> params);
  Status onGroupFailure(const Status& why);
  // Runs one request to the group PS (push or pull) with in_group_request_ set.
  template <typename Request>
  auto groupRequest(Request request) {
    in_group_request_ = true;
    left_group_wait_ = false;
    auto r = request();
    in_group_request_ = false;
    return r;
  }
  Status recover(const Status& why);
  // Between steps: switches the gradient encoding to the coordinator's latest choice.
  void followCompression();
  // Before a leave: tells the coordinator what was trained of the ranges held (the rest
  // goes back untrained).
  void returnRanges();
  void publish();
  std::chrono::milliseconds giveUp() const;
  // Installs the interrupt check for one call (clearing interrupted_ first).
  ScopedInterruptCheck watchInterrupts();

  worker::WorkerOptions opts_;
  client::Role role_;
  std::uint64_t param_count_;
  std::uint64_t buffer_count_ = 0;  // the last values of params are the model's buffers
  bool optimizer_ = false;
  std::span<float> mean_grad_;
  std::span<float> correction_;
  bool attach_next_ = false;    // the last reply asked for the parameters with the next push
  bool params_loaded_ = false;  // a pull wrote params during this step()
  zmq::context_t ctx_{1};
  std::atomic<bool> interrupted_{false};  // registerWithRetry polls it too
  // A group request in flight (groupRequest): the heartbeat thread's news (moved after a
  // group failure, taken for dead, stop) ends its wait, which then sets left_group_wait_.
  bool in_group_request_ = false;
  bool left_group_wait_ = false;
  worker::StopGrace stop_grace_;  // a stop heard during a group wait (the worker lib's rule)
  std::function<bool()> interrupt_check_;
  client::CoordinatorClient coord_;
  std::unique_ptr<HeartbeatThread> heartbeat_;
  std::unique_ptr<worker::SharedDevice> device_;  // --shared-device, else null
  bool device_held_ = false;
  client::Assignment a_;
  std::unique_ptr<client::GroupClient> group_;
  std::unique_ptr<client::CentralModelClient> central_;  // evaluator (every shard)
  std::uint32_t batch_ = 0;
  std::string compression_;  // the encoding in use (spec text), set by adopt()
  std::uint64_t step_ = 0;
  bool need_pull_ = true;
  bool stop_ = false;
  bool quarantined_ = false;
  bool closed_ = false;
  bool registered_ = false;
  std::optional<Clock::time_point> failing_since_;
  std::optional<Clock::time_point> last_return_;  // compute time = time between steps
  StepTotals totals_;
  std::uint64_t samples_unconfirmed_ = 0;  // pushes without a positive answer (Leave)
  // data_allocation ranges: the sampler of this registration's ranges (ranges_of_: its id)
  // and the trained ranges not acknowledged yet.
  std::unique_ptr<dataset::RangeSampler> ranges_;
  std::uint64_t ranges_of_ = 0;           // worker id
  std::uint64_t ranges_incarnation_ = 0;  // high 32 bits of the epoch
  std::vector<client::DataRange> pending_acks_;
  std::uint64_t total_steps_ = 0, registrations_ = 0;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace groupsgd::python
