#include "session.h"

#include <unistd.h>

#include <thread>

#include "groupsgd/codec/compression_spec.h"
#include "groupsgd/common/log.h"
#include "groupsgd/worker/registration.h"
#include "groupsgd/worker/shared_device.h"

namespace groupsgd::python {
namespace {

// A request that got no answer at all, as opposed to a peer answering "retry".
bool noAnswer(const Status& s) {
  return s.code() == Code::kUnavailable && s.message().rfind("no answer from", 0) == 0;
}

}  // namespace

Session::Session(worker::WorkerOptions opts, client::Role role, client::ModelDescription model,
                 bool optimizer, std::span<float> mean_grad, std::span<float> correction)
    : opts_(std::move(opts)),
      role_(role),
      param_count_(model.param_count),
      buffer_count_(model.buffer_count),
      optimizer_(optimizer),
      mean_grad_(mean_grad),
      correction_(correction),
      coord_(ctx_, opts_.coordinator, opts_.job_id, std::chrono::milliseconds(opts_.timeout_ms),
             opts_.curve),
      heartbeat_(std::make_unique<HeartbeatThread>(ctx_, opts_)),
      rng_(opts_.seed != 0 ? opts_.seed : static_cast<std::uint64_t>(::getpid())) {
  coord_.describeModel(std::move(model));
  coord_.joinJob(opts_.job);
}

Session::~Session() {
  heartbeat_.reset();  // joins before the sockets and the context go
}

std::chrono::milliseconds Session::giveUp() const {
  return std::chrono::milliseconds(static_cast<std::int64_t>(opts_.give_up_s * 1000));
}

void Session::publish() { heartbeat_->publish(totals_); }

ScopedInterruptCheck Session::watchInterrupts() {
  interrupted_ = false;
  return ScopedInterruptCheck([this] {
    if (!interrupted_ && interrupt_check_ && interrupt_check_()) interrupted_ = true;
    if (interrupted_) return true;
    // Waiting on a group PS that may be dead: the coordinator's news (heard by the
    // heartbeat thread) must not wait for the request's deadline. A stop lets a live PS
    // answer first (within milliseconds, confirming the push): only a PS silent for a
    // heartbeat period after it ends the wait.
    if (!in_group_request_) return false;
    if (heartbeat_->reregisterRequested()) {
      left_group_wait_ = true;
      return true;
    }
    if (heartbeat_->stopRequested()) {
      stop_grace_.heard();
      if (stop_grace_.over(a_.heartbeat_ms)) {
        left_group_wait_ = true;
        return true;
      }
    }
    return false;
  });
}

Status Session::adopt(const client::Assignment& a) {
  if (a.param_count != param_count_) {
    return failedPrecondition("model size mismatch: the daemon trains " +
                              std::to_string(a.param_count) + " parameters, this model has " +
                              std::to_string(param_count_));
  }
  if (role_ == client::Role::kTrainer && a.optimizer_on_workers != optimizer_) {
    (void)coord_.leave(a, 0, 0);  // not a trainer the run waits for
    registered_ = false;
    return failedPrecondition(
        a.optimizer_on_workers
            ? "the daemon runs optimizer.placement workers: every trainer steps its own "
              "optimizer on the group's mean gradient; pass one: "
              "groupsgd.torch.Worker(model, optimizer=opt)"
            : "the daemon runs optimizer.placement server: the group PS steps its optimizer "
              "and this worker's optimizer would never be used; create the Worker without "
              "optimizer=, or run the daemon with optimizer.placement workers");
  }
  a_ = a;
  batch_ = a.batch_size;
  need_pull_ = true;
  attach_next_ = false;
  if (role_ == client::Role::kTrainer) {
    auto spec = parseCompressionSpec(opts_.compress.empty() ? a.compression : opts_.compress);
    if (!spec) return spec.status();
    if (buffer_count_ > 0 && (spec->encoding == kernels::Encoding::kTopK ||
                              spec->encoding == kernels::Encoding::kSign)) {
      // Top-k and sign keep a residual of what they did not send: buffer values would
      // arrive as fragments of themselves, and their mean would be meaningless.
      (void)coord_.leave(a, 0, 0);
      registered_ = false;
      return failedPrecondition(
          "gradient compression '" + spec->toString() +
          "' cannot carry the model's buffers (sync_buffers): use dense or fp16, or create "
          "the Worker with sync_buffers=False");
    }
    group_ = std::make_unique<client::GroupClient>(
        ctx_, a, coord_.jobId(), std::chrono::milliseconds(opts_.timeout_ms), *spec, opts_.curve);
    compression_ = spec->toString();
    if (optimizer_) group_->setMeanGradientTargets(mean_grad_, correction_);
    group_->setBufferCount(buffer_count_);
  } else if (!central_ || central_->endpoint() != a.central_endpoint) {
    MessageLimits limits;
    limits.job_id = coord_.jobId();
    central_ = std::make_unique<client::CentralModelClient>(
        ctx_, a.central_endpoint, a.param_count, limits, clientSocketOptions(opts_.curve));
  }
  log::setThreadTag((role_ == client::Role::kTrainer ? "worker-" : "evaluator-") +
                    std::to_string(a.worker_id));
  GSGD_INFO("assigned: group " << a.group_id << ", batch " << a.batch_size << ", shard "
                               << a.shard_index << "/" << a.shard_count << ", epoch " << a.epoch);
  registered_ = true;
  totals_.batch_size = batch_;
  publish();
  heartbeat_->follow(a_, coord_.redirected() ? coord_.endpoint() : "", coord_.jobId());
  if (device_) device_->setJobId(coord_.jobId());  // leases keyed by the job joined
  return Status::ok();
}

void Session::followCompression() {
  // --compress (compress=) overrides the coordinator's choice, as for groupsgd-worker.
  if (!opts_.compress.empty() || !group_) return;
  const std::string chosen = heartbeat_->chosenCompression();
  if (chosen.empty() || chosen == a_.compression) return;
  auto spec = parseCompressionSpec(chosen);
  if (!spec) {
    GSGD_WARN("ignoring the coordinator's compression: " << spec.status().message());
    return;
  }
  if (buffer_count_ > 0 &&
      (spec->encoding == kernels::Encoding::kTopK || spec->encoding == kernels::Encoding::kSign)) {
    // The same rule as at registration: the buffers' mean would be of fragments.
    GSGD_WARN("ignoring the coordinator's compression " << chosen
                                                        << ": it cannot carry the model's buffers");
    return;
  }
  GSGD_INFO("gradient compression " << a_.compression << " -> " << chosen
                                    << " (chosen by the coordinator)");
  group_->setCompression(*spec);
  a_.compression = chosen;
  compression_ = spec->toString();
}

// The head finished while this worker was away (or before it came): a clean stop, as
// the C++ trainer makes it, not an error raised into the training loop.
Status Session::runOver(const Status& why) {
  GSGD_INFO("the run is over (" << why.message() << "); stopping");
  stop_ = true;
  return Status::ok();
}

Status Session::register_(std::uint64_t keep_id) {
  heartbeat_->pause();
  if (keep_id == 0 && registered_) {
    // Close the old registration with its own counts so nothing is counted twice.
    (void)leave();
    totals_.samples_trained = 0;
    samples_unconfirmed_ = 0;
    totals_.steps = 0;
  }
  // The first registration waits --connect-timeout-ms, later ones (a restarted head)
  // --give-up-s.
  const auto patience =
      registrations_ > 0 ? giveUp() : std::chrono::milliseconds(opts_.connect_timeout_ms);
  auto assigned = keep_id != 0
                      ? coord_.registerAs(role_, opts_.name, keep_id, {}, a_.epoch)
                      : worker::registerWithRetry(coord_, role_, opts_, interrupted_, patience);
  if (!assigned) {
    if (assigned.status().code() == Code::kQuarantined) quarantined_ = true;
    if (assigned.status().code() == Code::kFinished) {
      if (keep_id != 0) (void)leave();  // our own head stopping (a regroup's move)
      return runOver(assigned.status());
    }
    return assigned.status();
  }
  ++registrations_;
  return adopt(*assigned);
}

Status Session::start(std::span<float> params) {
  if (params.size() != param_count_) {
    return invalidArgument("params has " + std::to_string(params.size()) + " values, the model " +
                           std::to_string(param_count_));
  }
  if (role_ == client::Role::kTrainer && !device_) {
    auto device = worker::SharedDevice::open(ctx_, opts_);
    if (!device)
      return Status(device.status().code(), "shared device: " + device.status().message());
    device_ = std::move(*device);
  }
  const auto watch = watchInterrupts();
  GSGD_RETURN_IF_ERROR(register_(0));
  if (role_ == client::Role::kTrainer) GSGD_RETURN_IF_ERROR(pullUntilReady(params));
  last_return_ = Clock::now();
  return Status::ok();
}

bool Session::follow(const client::StepAnswer& ans) {
  return worker::followDirective(ans, &batch_, &stop_, [this] {
    return register_(a_.worker_id) || (!quarantined_ && register_(0));
  });
}

Status Session::recover(const Status& why) {
  GSGD_WARN("group PS " << a_.group_endpoint << " silent (" << why.message()
                        << "); asking the coordinator");
  auto again = coord_.registerAs(role_, opts_.name, a_.worker_id, {}, a_.epoch);
  if (again) {
    if (again->group_endpoint != a_.group_endpoint || again->epoch != a_.epoch) {
      GSGD_INFO("reassigned after a failure of group " << a_.group_id);
      return adopt(*again);
    }
    return interruptibleSleep(backoffDelay(worker::backoffPolicy(opts_), 2, uniform_(rng_)));
  }
  if (again.status().code() == Code::kQuarantined) {
    quarantined_ = true;
    return again.status();
  }
  if (again.status().code() == Code::kFinished) {
    // Our head stopping while our group's PS is gone still counts on our final report
    // (a restarted head refuses a leave of an earlier incarnation's epoch at once).
    (void)leave();
    return runOver(again.status());
  }
  GSGD_WARN("the coordinator " << (noAnswer(again.status()) ? "is unreachable" : "does not know us")
                               << " (" << again.status().message() << "); registering again");
  return register_(0);
}

Status Session::onGroupFailure(const Status& why) {
  if (interrupted_) return interruptedStatus();
  if (left_group_wait_) {
    left_group_wait_ = false;
    if (shouldStop()) return Status::ok();  // the caller sees the stop
    GSGD_INFO("left the wait for group " << a_.group_id
                                         << ": the coordinator has a new assignment for us");
    return recover(unavailable("the coordinator has a new assignment for us"));
  }
  if (isInterrupted(why)) return interruptedStatus();
  if (why.code() == Code::kQuarantined) {
    quarantined_ = true;
    return why;
  }
  if (!failing_since_) failing_since_ = Clock::now();
  if (Clock::now() - *failing_since_ > giveUp()) {
    return unavailable("requests have failed for " + std::to_string(opts_.give_up_s) +
                       " s; giving up: " + why.message());
  }
  if (why.code() == Code::kFailedPrecondition || why.code() == Code::kPermissionDenied) {
    return register_(0);
  }
  if (noAnswer(why)) return recover(why);
  return interruptibleSleep(std::chrono::milliseconds(200));
}

// Pulls until a replica is in params (or the worker must stop).
Status Session::pullUntilReady(std::span<float> params) {
  while (need_pull_ && !shouldStop()) {
    if (interrupted_) return interruptedStatus();
    if (heartbeat_->reregisterRequested()) GSGD_RETURN_IF_ERROR(register_(0));
    auto pulled = groupRequest([&] { return group_->pull(params); });
    if (!pulled) {
      GSGD_WARN("pull failed: " << pulled.status().toString());
      GSGD_RETURN_IF_ERROR(onGroupFailure(pulled.status()));
      continue;
    }
    failing_since_.reset();
    if (!follow(*pulled)) continue;
    step_ = pulled->step;
    need_pull_ = false;
    params_loaded_ = true;
    attach_next_ = false;
  }
  return Status::ok();
}

Result<StepResult> Session::step(const Payload& grad, std::uint32_t batch, float loss,
                                 std::span<float> params, bool skipped) {
  if (role_ != client::Role::kTrainer || !group_) {
    return failedPrecondition("step() needs a started trainer");
  }
  if (!grad || grad->size() != param_count_ || params.size() != param_count_) {
    return invalidArgument("gradient and parameters must have " + std::to_string(param_count_) +
                           " values");
  }
  releaseDevice();  // the compute is over: the push, barrier and pull need no device
  const auto watch = watchInterrupts();
  StepResult out;
  if (skipped) batch = 0;  // no samples: nothing trained, nothing to confirm
  params_loaded_ = false;
  const double compute_ms =
      last_return_ ? std::chrono::duration<double, std::milli>(Clock::now() - *last_return_).count()
                   : 0.0;
  if (heartbeat_->reregisterRequested() && !shouldStop()) {
    GSGD_INFO("the coordinator does not know us; registering again");
    GSGD_RETURN_IF_ERROR(register_(0));
  }
  followCompression();
  if (!need_pull_ && !shouldStop()) {
    const auto t1 = Clock::now();
    auto ans = groupRequest([&] {
      return skipped
                 ? group_->pushSkipped(step_, static_cast<float>(compute_ms), params)
                 : group_->push(
                       step_, grad, batch, loss, static_cast<float>(compute_ms), params,
                       attach_next_ ? std::span<const float>(params) : std::span<const float>());
    });
    attach_next_ = false;  // the reply says whether the parameters are wanted again
    const double rtt_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
    if (!ans) {
      // Not counted as trained; reported as unconfirmed (its group may have counted it
      // if only the answer was late); fetch again.
      GSGD_WARN("push for step " << step_ << " failed: " << ans.status().toString());
      samples_unconfirmed_ += batch;
      need_pull_ = true;
      if (ranges_) ranges_->rewind();  // drawn again: not acknowledged as trained
      GSGD_RETURN_IF_ERROR(onGroupFailure(ans.status()));
    } else {
      failing_since_.reset();
      if (ranges_) ranges_->pushed();
      out.pushed = true;
      out.skipped = skipped;
      out.accepted = ans->accepted;
      out.model_version = ans->model_version;
      out.wait_ms = ans->wait_ms;
      out.mean_gradient = ans->mean_gradient;
      out.correction = ans->correction;
      out.reset_optimizer = ans->reset_optimizer;
      out.parameters_loaded = optimizer_ && !ans->mean_gradient;  // a replica (late, moved)
      attach_next_ = ans->attach_parameters;
      totals_.samples_trained += batch;
      ++totals_.steps;
      ++total_steps_;
      if (!skipped) totals_.last_loss = loss;
      totals_.compute_ms += compute_ms;
      totals_.comm_ms += std::max(0.0, rtt_ms - ans->wait_ms);
      totals_.wait_ms += ans->wait_ms;
      ++totals_.timed_steps;
      step_ = ans->step;
      follow(*ans);
    }
  }
  if (!shouldStop()) GSGD_RETURN_IF_ERROR(pullUntilReady(params));
  totals_.batch_size = batch_;
  publish();
  out.step = step_;
  out.parameters_loaded = out.parameters_loaded || params_loaded_;
  last_return_ = Clock::now();
  return out;
}

Result<std::uint64_t> Session::fetchCentral(std::span<float> params) {
  if (role_ != client::Role::kEvaluator || !central_) {
    return failedPrecondition("fetch_central() needs a started evaluator");
  }
  if (params.size() != param_count_) return invalidArgument("params has the wrong size");
  const auto watch = watchInterrupts();
  if (heartbeat_->reregisterRequested() && !shouldStop()) GSGD_RETURN_IF_ERROR(register_(0));
  return central_->fetch(coord_.jobId(), params, std::chrono::milliseconds(opts_.timeout_ms));
}

void Session::report(float accuracy, std::uint64_t version, float loss) {
  totals_.test_accuracy = accuracy;
  totals_.evaluated_version = version;
  totals_.test_loss = loss;
  publish();
  heartbeat_->sendSoon();
}

double Session::acquireDevice() {
  if (!device_ || device_held_) return 0;
  const auto watch = watchInterrupts();
  const double waited = device_->acquire(a_.worker_id, step_);
  device_held_ = true;
  if (interrupted_) releaseDevice();  // cut short: whatever it got goes back
  return waited;
}

void Session::releaseDevice() {
  if (!device_held_) return;
  device_->release();
  device_held_ = false;
}

Status Session::close() {
  releaseDevice();
  if (closed_) return Status::ok();
  const auto watch = watchInterrupts();  // a second Ctrl-C ends a leave nobody answers
  closed_ = true;
  heartbeat_->pause();
  return leave();
}

Result<std::vector<std::uint32_t>> Session::nextRangeBatch(std::uint64_t dataset_size,
                                                           std::uint32_t batch) {
  if (role_ != client::Role::kTrainer || !group_) {
    return failedPrecondition("sample ranges need a started trainer");
  }
  if (!a_.data_ranges) {
    return failedPrecondition("the daemon runs data_allocation shards: sample the shard");
  }
  if (dataset_size == 0 || dataset_size > (std::uint64_t{1} << 32)) {
    return invalidArgument("a training set of " + std::to_string(dataset_size) +
                           " samples cannot be sampled by ranges");
  }
  const auto watch = watchInterrupts();
  std::vector<std::uint32_t> out;
  while (!shouldStop()) {
    if (!ranges_ || ranges_of_ != a_.worker_id || ranges_incarnation_ != a_.epoch >> 32 ||
        ranges_->datasetSize() != dataset_size) {
      ranges_ = std::make_unique<dataset::RangeSampler>(dataset_size, a_.seed);
      ranges_of_ = a_.worker_id;
      ranges_incarnation_ = a_.epoch >> 32;
      pending_acks_.clear();
    }
    if (ranges_->available() >= batch) break;
    for (const auto& r : ranges_->takeTrained()) pending_acks_.push_back({r.epoch, r.begin, r.end});
    auto granted = coord_.claimData(a_, dataset_size, pending_acks_, false);
    if (!granted) {
      GSGD_WARN("data claim failed: " << granted.status().toString());
      GSGD_RETURN_IF_ERROR(onGroupFailure(granted.status()));  // may register anew
      continue;
    }
    failing_since_.reset();
    pending_acks_.clear();
    if (granted->empty()) return internalError("the coordinator granted no sample range");
    for (const auto& r : *granted) GSGD_RETURN_IF_ERROR(ranges_->add({r.epoch, r.begin, r.end}));
  }
  // Stopping: no batch (a short one would be stepped as a whole one).
  if (ranges_ && !shouldStop()) ranges_->next(batch, &out);
  return out;
}

void Session::returnRanges() {
  if (!ranges_ || ranges_of_ != a_.worker_id || ranges_incarnation_ != a_.epoch >> 32) return;
  for (const auto& r : ranges_->takeAllTrained())
    pending_acks_.push_back({r.epoch, r.begin, r.end});
  auto done = coord_.claimData(a_, ranges_->datasetSize(), pending_acks_, true);
  if (!done) GSGD_WARN("final data claim failed: " << done.status().toString());
  pending_acks_.clear();
  ranges_.reset();
}

Status Session::leave() {
  if (!registered_) return Status::ok();  // never registered, or already left
  returnRanges();
  registered_ = false;
  return coord_.leave(a_, totals_.samples_trained, totals_.steps, samples_unconfirmed_);
}

}  // namespace groupsgd::python
