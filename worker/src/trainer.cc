#include "groupsgd/worker/trainer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "groupsgd/common/log.h"
#include "groupsgd/dataset/batch.h"
#include "groupsgd/dataset/idx.h"
#include "groupsgd/dataset/range_sampler.h"
#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/model_device.h"
#include "groupsgd/worker/group_wait.h"
#include "groupsgd/worker/registration.h"
#include "groupsgd/worker/shared_device.h"
#include "groupsgd/worker/step_watch.h"
#include "startup_phases.h"

namespace groupsgd::worker {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
void sleepMs(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

// A request that got no answer at all (RpcClient's deadline), as opposed to a peer that
// answered "unavailable, retry" (a group PS without its model yet).
bool noAnswer(const Status& s) {
  return s.code() == Code::kUnavailable && s.message().rfind("no answer from", 0) == 0;
}

// Exit code of a trainer quarantined for repeated bad updates.
constexpr int kQuarantinedExit = 3;
// Steps a heartbeat carries one by one (Heartbeat.recentSteps); older ones only in means.
constexpr std::size_t kReportedSteps = 32;

// The newest kReportedSteps steps since the last heartbeat, in a fixed ring: a slow
// heartbeat costs no shifting of older entries.
class RecentSteps {
 public:
  void add(const client::StepTiming& step) {
    ring_[(first_ + count_) % ring_.size()] = step;
    if (count_ < ring_.size()) {
      ++count_;
    } else {
      first_ = (first_ + 1) % ring_.size();  // the oldest is overwritten
    }
  }
  // The steps, oldest first; the ring is empty afterwards.
  std::vector<client::StepTiming> take() {
    std::vector<client::StepTiming> out;
    out.reserve(count_);
    for (std::size_t i = 0; i < count_; ++i) out.push_back(ring_[(first_ + i) % ring_.size()]);
    first_ = count_ = 0;
    return out;
  }

 private:
  std::array<client::StepTiming, kReportedSteps> ring_{};
  std::size_t first_ = 0, count_ = 0;
};

// Per-heartbeat-window means of the step-time breakdown.
struct Window {
  double compute_ms = 0, comm_ms = 0, wait_ms = 0;
  int steps = 0;
  void add(double c, double m, double w) {
    compute_ms += c;
    comm_ms += m;
    wait_ms += w;
    ++steps;
  }
  float mean(double v) const { return steps ? static_cast<float>(v / steps) : 0.f; }
};

// One training process: its registration, data, model and counters.
class Trainer {
 public:
  Trainer(zmq::context_t& ctx, const WorkerOptions& opts, const std::atomic<bool>& interrupted,
          dataset::Dataset data, SpeedSchedule schedule, std::unique_ptr<SharedDevice> device,
          StartupPhases startup)
      : ctx_(ctx),
        opts_(opts),
        interrupted_(interrupted),
        data_(std::move(data)),
        schedule_(std::move(schedule)),
        device_(std::move(device)),
        startup_(startup),
        coord_(ctx, opts.coordinator, opts.job_id, std::chrono::milliseconds(opts.timeout_ms),
               opts.curve) {
    coord_.joinJob(opts.job);
  }

  int run();

 private:
  bool adopt(const client::Assignment& a);  // new group client, sampler, batch
  // Between steps: switch the gradient encoding the coordinator chose (compress auto).
  void followCompression(const std::string& chosen);
  bool register_(std::uint64_t keep_id);       // (re)register; keep_id 0 = as a new worker
  bool follow(const client::StepAnswer& ans);  // obey a directive; false = stop training
  // The group PS did not answer: ask the coordinator where to go (a failed group's
  // members are moved), or register again once a lost head is back. False = give up.
  bool recover(const Status& why);
  // Handles a refused or failed group request; false = leave the training loop.
  bool onGroupFailure(const Status& why);
  std::chrono::milliseconds giveUp() const {
    return std::chrono::milliseconds(static_cast<std::int64_t>(opts_.give_up_s * 1000));
  }
  int finish();

  // run()'s loop: its state between steps, and the steps. Next says how the loop goes on:
  // with this step, again from the top (the replica is fetched anew), or not at all.
  enum class Next { kGoOn, kRetry, kLeave };
  struct Loop {
    Window window;
    Clock::time_point started = Clock::now();
    Clock::time_point next_heartbeat;
    SpeedProfile speed;  // this step's emulated speed
    std::vector<float> x;
    std::vector<std::int32_t> y;
    std::vector<std::uint32_t> idx;
    float last_loss = 0;
  };
  Next pullReplica(Loop& loop);
  // data_allocation ranges: claims ranges (acknowledging those trained) until `batch`
  // samples are held.
  Next feedRanges(std::uint32_t batch);
  // Stopping or closing this registration: tells the coordinator what was trained of the
  // ranges held; the rest goes back untrained.
  void returnRanges();
  // The gradient of the next batch into the client's send buffer, emulated device time
  // and pauses included: its compute time in ms; nullopt when the model failed on its
  // device.
  std::optional<double> computeGradient(Loop& loop, std::uint32_t batch);
  // Pushes the gradient and counts the step; *early: its time says to heartbeat now.
  Next pushGradient(Loop& loop, std::uint32_t batch, double compute_ms, bool* early);
  Next heartbeat(Loop& loop, std::uint32_t batch, bool early);
  // The heartbeat's statistics since the last one; restarts the window and the period.
  client::HeartbeatStats takeStats(Loop& loop, std::uint32_t batch, bool early);
  // A group request's wait: heartbeats when due (GroupWait), on this thread.
  GroupWait::End heartbeatWhileWaiting(Loop& loop);
  // A group request that failed: a wait ended by `end` (GroupWait), or onGroupFailure.
  Next afterFailedRequest(const Status& why, GroupWait::End end);

  zmq::context_t& ctx_;
  const WorkerOptions& opts_;
  const std::atomic<bool>& interrupted_;
  dataset::Dataset data_;
  SpeedSchedule schedule_;
  std::unique_ptr<SharedDevice> device_;  // --shared-device (null: a device of its own)
  StartupPhases startup_;
  client::CoordinatorClient coord_;
  client::Assignment a_;
  std::unique_ptr<kernels::Model> model_;
  std::unique_ptr<client::GroupClient> group_;
  std::unique_ptr<dataset::ShardSampler> sampler_;
  std::unique_ptr<dataset::RangeSampler> ranges_;  // data_allocation ranges (else null)
  std::vector<client::DataRange> pending_acks_;    // trained, not acknowledged yet
  std::vector<float> params_;
  std::uint32_t batch_ = 0;
  std::uint32_t reference_batch_ = 0;  // --device-ms is given at this batch
  std::uint64_t step_ = 0;
  bool need_pull_ = true;
  bool stop_ = false;
  std::string pending_compression_;  // the coordinator's choice heard during a wait
  bool quarantined_ = false;
  bool run_over_ = false;  // a registration was refused because the run has ended
  int exit_code_ = 0;
  std::optional<Clock::time_point> failing_since_;  // first of a run of failed requests
  StopGrace stop_grace_;                            // a heartbeat said stop during a wait
  // samples_trained_/steps_ count this registration (reported to the coordinator);
  // total_steps_ counts the whole process life (schedule, --max-steps).
  std::uint64_t samples_trained_ = 0, steps_ = 0, total_steps_ = 0;
  // Samples of this registration's pushes without a positive answer: the group may still
  // have counted one whose answer came too late (Leave.samplesUnconfirmed).
  std::uint64_t samples_unconfirmed_ = 0;
  StepWatch watch_;     // when to heartbeat early
  RecentSteps recent_;  // steps since the last heartbeat
  std::mt19937_64 rng_{opts_.seed != 0 ? opts_.seed : static_cast<std::uint64_t>(::getpid())};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

bool Trainer::adopt(const client::Assignment& a) {
  if (a.optimizer_on_workers) {
    // The group PS hands out mean gradients for the trainers' own optimizers; this
    // trainer has none (a Python trainer with gt.Worker(model, optimizer=...) does).
    GSGD_ERROR(
        "the daemon runs optimizer.placement workers: every trainer steps its own "
        "optimizer, and groupsgd-worker has none; use a Python trainer "
        "(groupsgd.torch.Worker(model, optimizer=...)) or optimizer.placement server");
    (void)coord_.leave(a, 0, 0);  // not counted as a trainer the run waits for
    return false;
  }
  kernels::ModelKind kind;
  if (!kernels::parseModelKind(a.model, &kind)) {
    GSGD_ERROR("the daemon trains model '" << a.model << "', unknown to this worker");
    return false;
  }
  if (!model_ || model_->paramCount() != a.param_count) {
    model_.reset();
    const kernels::KernelStatus made =
        kernels::makeModelOn(opts_.device, kind, data_.featureDim(), 10, &model_);
    if (!made.ok()) {
      GSGD_ERROR("model '" << a.model << "' on " << kernels::modelDeviceName(opts_.device) << ": "
                           << made.message);
      return false;
    }
    if (opts_.device.backend != kernels::Backend::kCpu) {
      GSGD_INFO("model '" << a.model << "' runs on " << kernels::modelDeviceName(opts_.device));
    }
    if (model_->paramCount() != a.param_count) {
      GSGD_ERROR("model size mismatch: daemon says " << a.param_count << " parameters, this worker "
                                                     << model_->paramCount() << " (wrong --data?)");
      return false;
    }
    params_.assign(a.param_count, 0.0f);
  }
  const bool new_shard =
      !sampler_ || a.shard_index != a_.shard_index || a.shard_count != a_.shard_count;
  if (!a.data_ranges) {
    ranges_.reset();
  } else if (!ranges_ || a.worker_id != a_.worker_id || (a.epoch >> 32) != (a_.epoch >> 32)) {
    // Ranges belong to a registration (an id of one head incarnation).
    ranges_ = std::make_unique<dataset::RangeSampler>(data_.count, a.seed);
    pending_acks_.clear();
  }
  a_ = a;
  if (new_shard) {
    sampler_ = std::make_unique<dataset::ShardSampler>(data_.count, a.shard_index, a.shard_count,
                                                       a.seed + a.shard_index);
  }
  auto spec = parseCompressionSpec(opts_.compress.empty() ? a.compression : opts_.compress);
  if (!spec) {
    GSGD_ERROR("gradient compression: " << spec.status().message());
    return false;
  }
  if (device_) device_->setJobId(coord_.jobId());
  group_ = std::make_unique<client::GroupClient>(
      ctx_, a, coord_.jobId(), std::chrono::milliseconds(opts_.timeout_ms), *spec, opts_.curve);
  batch_ = a.batch_size;
  if (reference_batch_ == 0) reference_batch_ = a.batch_size;
  need_pull_ = true;
  log::setThreadTag("worker-" + std::to_string(a.worker_id));
  GSGD_INFO("assigned: group " << a.group_id << " at " << a.group_endpoint << ", batch "
                               << a.batch_size << ", "
                               << (a.data_ranges ? std::string("sample ranges")
                                                 : "shard " + std::to_string(a.shard_index) + "/" +
                                                       std::to_string(a.shard_count))
                               << ", epoch " << a.epoch);
  return true;
}

bool Trainer::register_(std::uint64_t keep_id) {
  if (keep_id == 0 && a_.worker_id != 0) {
    // Close the old registration with its own counts so nothing is counted twice.
    returnRanges();
    (void)coord_.leave(a_, samples_trained_, steps_, samples_unconfirmed_);
    samples_trained_ = 0;
    samples_unconfirmed_ = 0;
    steps_ = 0;
    watch_.restart();  // a new id: the coordinator measures it from scratch
  }
  // The first registration waits --connect-timeout-ms for the daemon, later ones (a
  // restarted head) --give-up-s.
  const auto patience =
      a_.worker_id == 0 ? std::chrono::milliseconds(opts_.connect_timeout_ms) : giveUp();
  auto assigned =
      keep_id != 0
          ? coord_.registerAs(client::Role::kTrainer, opts_.name, keep_id, {}, a_.epoch)
          : registerWithRetry(coord_, client::Role::kTrainer, opts_, interrupted_, patience);
  if (!assigned) {
    if (assigned.status().code() == Code::kQuarantined) quarantined_ = true;
    if (assigned.status().code() == Code::kFinished) {
      // The head finished while we were away (or before we came): a clean stop. Asked
      // under our id (a regroup's move), it is our own head stopping: it still counts on
      // our final report (a new registration's old one was closed above).
      GSGD_INFO("the run is over (" << assigned.status().message() << "); stopping");
      if (keep_id != 0) (void)coord_.leave(a_, samples_trained_, steps_, samples_unconfirmed_);
      run_over_ = true;
      stop_ = true;
      return false;
    }
    GSGD_ERROR("registration failed: " << assigned.status().toString());
    return false;
  }
  return adopt(*assigned);
}

bool Trainer::recover(const Status& why) {
  GSGD_WARN("group PS " << a_.group_endpoint << " silent (" << why.message()
                        << "); asking the coordinator");
  auto again = coord_.registerAs(client::Role::kTrainer, opts_.name, a_.worker_id, {}, a_.epoch);
  if (again) {
    if (again->group_endpoint != a_.group_endpoint || again->epoch != a_.epoch) {
      GSGD_INFO("reassigned after a failure of group " << a_.group_id);
      return adopt(*again);
    }
    // Same assignment: the group is slow, or not yet judged dead. Try it again later.
    std::this_thread::sleep_for(backoffDelay(backoffPolicy(opts_), 2, uniform_(rng_)));
    return true;
  }
  if (again.status().code() == Code::kQuarantined) {
    quarantined_ = true;
    return false;
  }
  if (again.status().code() == Code::kFinished) {
    // The run ended: a restarted head whose run ended while we were away (it says so once
    // per trainer and may be gone by our next try), or our own head stopping while our
    // group's PS is gone. The latter still counts on our final report, so leave now (a
    // restarted head refuses a leave of an earlier incarnation's epoch at once).
    GSGD_INFO("the run is over (" << again.status().message() << "); stopping");
    (void)coord_.leave(a_, samples_trained_, steps_, samples_unconfirmed_);
    run_over_ = true;
    stop_ = true;
    return false;
  }
  // The head is gone (no answer) or does not know us (a new incarnation, or we were
  // declared dead): register again as a new worker, with back-off, up to --give-up-s.
  GSGD_WARN("the coordinator " << (noAnswer(again.status()) ? "is unreachable" : "does not know us")
                               << " (" << again.status().message() << "); registering again");
  return register_(0);
}

bool Trainer::onGroupFailure(const Status& why) {
  const Code code = why.code();
  if (code == Code::kQuarantined) {
    GSGD_ERROR("quarantined by the group PS: " << why.message());
    quarantined_ = true;
    return false;
  }
  if (!failing_since_) failing_since_ = Clock::now();
  if (Clock::now() - *failing_since_ > giveUp()) {
    GSGD_ERROR("requests have failed for " << opts_.give_up_s << " s; giving up");
    exit_code_ = 1;
    return false;
  }
  bool ok = true;
  if (code == Code::kFailedPrecondition || code == Code::kPermissionDenied) {
    ok = register_(0);
  } else if (noAnswer(why)) {
    ok = recover(why);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!ok && !quarantined_ && !run_over_) exit_code_ = 1;
  return ok;
}

bool Trainer::follow(const client::StepAnswer& ans) {
  return followDirective(ans, &batch_, &stop_, [this] {
    return register_(a_.worker_id) || (!quarantined_ && !run_over_ && register_(0));
  });
}

int Trainer::run() {
  if (!register_(0)) return quarantined_ ? kQuarantinedExit : run_over_ ? 0 : 1;
  startup_.mark(StartupPhases::kRegistration);
  Loop loop;
  loop.next_heartbeat = Clock::now() + std::chrono::milliseconds(a_.heartbeat_ms);
  while (!interrupted_.load() && !stop_) {
    if (opts_.max_steps != 0 && total_steps_ >= opts_.max_steps) break;
    if (need_pull_) {
      const Next pulled = pullReplica(loop);
      if (pulled == Next::kLeave) break;
      if (pulled == Next::kRetry) continue;
      startup_.mark(StartupPhases::kFirstPull);
    }
    const std::uint32_t batch = batch_;
    if (ranges_) {
      const Next fed = feedRanges(batch);
      if (fed == Next::kLeave) break;
      if (fed == Next::kRetry) continue;
    }
    const std::optional<double> compute_ms = computeGradient(loop, batch);
    if (!compute_ms) return 1;
    bool early = false;
    const Next pushed = pushGradient(loop, batch, *compute_ms, &early);
    if (pushed == Next::kLeave) break;
    if (pushed == Next::kRetry) continue;
    startup_.mark(StartupPhases::kFirstStep);
    if (!stop_ && (early || Clock::now() >= loop.next_heartbeat)) {
      if (heartbeat(loop, batch, early) == Next::kLeave) break;
    }
    // A heartbeat answered during the push's wait (the usual case on a slow link).
    if (!pending_compression_.empty()) followCompression(std::exchange(pending_compression_, {}));
  }
  return finish();
}

Trainer::Next Trainer::pullReplica(Loop& loop) {
  // The wait's check is uninstalled before a failure is handled (recovery waits too).
  GroupWait::End ended = GroupWait::End::kNone;
  auto pulled = [&] {
    GroupWait wait(interrupted_, [&] { return heartbeatWhileWaiting(loop); });
    auto r = group_->pull(params_);
    ended = wait.ended();
    return r;
  }();
  if (!pulled) {
    if (ended == GroupWait::End::kNone) GSGD_WARN("pull failed: " << pulled.status().toString());
    return afterFailedRequest(pulled.status(), ended);
  }
  failing_since_.reset();
  if (!follow(*pulled)) return Next::kRetry;
  step_ = pulled->step;
  need_pull_ = false;
  return Next::kGoOn;
}

std::optional<double> Trainer::computeGradient(Loop& loop, std::uint32_t batch) {
  loop.speed = schedule_.at(opts_.speed, total_steps_, msSince(loop.started) / 1000.0);
  // A shared device is held for the whole compute, emulated device time included.
  // (The wait for it is neither compute nor communication; it is not reported.)
  if (device_) (void)device_->acquire(a_.worker_id, step_);
  const auto t0 = Clock::now();
  if (ranges_) {
    ranges_->next(batch, &loop.idx);
  } else {
    sampler_->next(batch, &loop.idx);
  }
  loop.x.resize(static_cast<std::size_t>(batch) * data_.featureDim());
  loop.y.resize(batch);
  dataset::gatherBatch(data_, loop.idx, loop.x.data(), loop.y.data());
  // Into the client's send buffer, so the push sends it without a copy.
  const std::span<float> grad = group_->gradientBuffer();
  loop.last_loss = model_->lossAndGrad(params_, loop.x.data(), loop.y.data(), batch, grad);
  if (kernels::KernelStatus dev = model_->deviceStatus(); !dev.ok()) {
    GSGD_ERROR("the model failed on " << kernels::modelDeviceName(opts_.device) << ": "
                                      << dev.message);
    return std::nullopt;
  }
  const double emulated_ms =
      emulatedSleepMs(loop.speed, msSince(t0),
                      static_cast<double>(batch) / std::max<std::uint32_t>(1, reference_batch_));
  if (device_) {
    device_->spend(emulated_ms);
    device_->release();
  } else {
    sleepMs(emulated_ms);
  }
  if (opts_.stall_prob > 0 && uniform_(rng_) < opts_.stall_prob) {
    sleepMs(std::exponential_distribution<double>(1.0 / std::max(1e-3, opts_.stall_ms))(rng_));
  }
  return msSince(t0);
}

Trainer::Next Trainer::pushGradient(Loop& loop, std::uint32_t batch, double compute_ms,
                                    bool* early) {
  const auto t1 = Clock::now();
  sleepMs(loop.speed.link_ms);  // a slow link delays every exchange
  GroupWait::End ended = GroupWait::End::kNone;
  auto ans = [&] {
    GroupWait wait(interrupted_, [&] { return heartbeatWhileWaiting(loop); });
    auto r = group_->push(step_, group_->gradientBuffer(), batch, loop.last_loss,
                          static_cast<float>(compute_ms), params_);
    ended = wait.ended();
    return r;
  }();
  const double rtt_ms = msSince(t1);
  if (!ans) {
    // Refused or unanswered: not counted as trained here, but reported as unconfirmed
    // (an answer that came too late may hide a push its group counted); the replica
    // is fetched again.
    if (ended == GroupWait::End::kNone) {
      GSGD_WARN("push for step " << step_ << " failed: " << ans.status().toString());
    } else {
      GSGD_INFO("push for step " << step_ << " left unanswered: " << groupWaitEndName(ended));
    }
    samples_unconfirmed_ += batch;
    need_pull_ = true;
    if (ranges_) ranges_->rewind();  // drawn again: not acknowledged as trained
    return afterFailedRequest(ans.status(), ended);
  }
  failing_since_.reset();
  if (ranges_) ranges_->pushed();
  samples_trained_ += batch;
  ++steps_;
  ++total_steps_;
  step_ = ans->step;
  const double own_comm_ms = std::max(0.0, rtt_ms - ans->wait_ms);
  loop.window.add(compute_ms, own_comm_ms, ans->wait_ms);
  // The first step of a registration (cold caches, the first pull) says little about
  // this worker's speed; the others go to the coordinator one by one.
  *early = false;
  if (steps_ > 1) {
    recent_.add({total_steps_, batch, static_cast<float>(compute_ms),
                 static_cast<float>(own_comm_ms), static_cast<float>(ans->wait_ms)});
    // The step's time at the reference batch, barrier wait left out: a shift in it is a
    // change of this worker's speed, not of its group's.
    *early = watch_.add(own_comm_ms + compute_ms * std::max<std::uint32_t>(1, reference_batch_) /
                                          std::max<std::uint32_t>(1, batch));
  }
  if (!ans->accepted) GSGD_DEBUG("gradient dropped: " << ans->reason);
  follow(*ans);
  return Next::kGoOn;
}

Trainer::Next Trainer::feedRanges(std::uint32_t batch) {
  while (ranges_->available() < batch) {
    for (const auto& r : ranges_->takeTrained()) pending_acks_.push_back({r.epoch, r.begin, r.end});
    auto granted = coord_.claimData(a_, data_.count, pending_acks_, false);
    if (!granted) {
      // Kept for the next claim (a lost answer: the coordinator may not have them).
      GSGD_WARN("data claim failed: " << granted.status().toString());
      return onGroupFailure(granted.status()) ? Next::kRetry : Next::kLeave;
    }
    pending_acks_.clear();
    if (granted->empty()) {
      GSGD_ERROR("the coordinator granted no sample range");
      exit_code_ = 1;
      return Next::kLeave;
    }
    for (const auto& r : *granted) {
      if (Status added = ranges_->add({r.epoch, r.begin, r.end}); !added) {
        GSGD_ERROR("granted " << added.message());
        exit_code_ = 1;
        return Next::kLeave;
      }
    }
  }
  return Next::kGoOn;
}

void Trainer::returnRanges() {
  if (!ranges_ || a_.worker_id == 0) return;
  for (const auto& r : ranges_->takeAllTrained())
    pending_acks_.push_back({r.epoch, r.begin, r.end});
  auto done = coord_.claimData(a_, data_.count, pending_acks_, true);
  if (!done) GSGD_WARN("final data claim failed: " << done.status().toString());
  pending_acks_.clear();
}

client::HeartbeatStats Trainer::takeStats(Loop& loop, std::uint32_t batch, bool early) {
  client::HeartbeatStats st{.samples_trained = samples_trained_,
                            .steps = steps_,
                            .last_loss = loop.last_loss,
                            .compute_ms = loop.window.mean(loop.window.compute_ms),
                            .comm_ms = loop.window.mean(loop.window.comm_ms),
                            .batch_size = batch,
                            .wait_ms = loop.window.mean(loop.window.wait_ms),
                            .recent = recent_.take(),
                            .speed_changed = early};
  watch_.reported();
  loop.window = Window{};
  loop.next_heartbeat = Clock::now() + std::chrono::milliseconds(a_.heartbeat_ms);
  return st;
}

GroupWait::End Trainer::heartbeatWhileWaiting(Loop& loop) {
  if (stop_grace_.over(a_.heartbeat_ms)) return GroupWait::End::kStop;  // its PS is silent
  if (Clock::now() < loop.next_heartbeat) return GroupWait::End::kNone;
  auto hb = coord_.heartbeat(a_, takeStats(loop, batch_, false));
  if (!hb) {
    if (hb.status().code() != Code::kQuarantined) return GroupWait::End::kNone;  // retried later
    GSGD_ERROR("quarantined by the coordinator: " << hb.status().message());
    quarantined_ = true;
    return GroupWait::End::kQuarantined;
  }
  if (hb->stop) {
    stop_grace_.heard();
    return GroupWait::End::kNone;
  }
  if (hb->reregister) return GroupWait::End::kReassigned;
  // Not while a request is in flight: the encoder changes between steps (run's loop).
  if (!hb->compression.empty()) pending_compression_ = hb->compression;
  return GroupWait::End::kNone;
}

Trainer::Next Trainer::afterFailedRequest(const Status& why, GroupWait::End end) {
  switch (end) {
    case GroupWait::End::kNone:
      return onGroupFailure(why) ? Next::kRetry : Next::kLeave;
    case GroupWait::End::kReassigned:
      // Our group failed and we were moved, or we were taken for dead: ask where to go.
      GSGD_INFO("left the wait for group " << a_.group_id << ": " << groupWaitEndName(end));
      if (recover(unavailable(groupWaitEndName(end)))) return Next::kRetry;
      if (!quarantined_ && !run_over_) exit_code_ = 1;
      return Next::kLeave;
    case GroupWait::End::kStop:
      GSGD_INFO("coordinator asks us to stop");
      stop_ = true;
      return Next::kLeave;
    case GroupWait::End::kInterrupted:
    case GroupWait::End::kQuarantined:
      return Next::kLeave;
  }
  return Next::kLeave;
}

Trainer::Next Trainer::heartbeat(Loop& loop, std::uint32_t batch, bool early) {
  auto hb = coord_.heartbeat(a_, takeStats(loop, batch, early));
  if (!hb && hb.status().code() == Code::kQuarantined) {
    GSGD_ERROR("quarantined by the coordinator: " << hb.status().message());
    quarantined_ = true;
    return Next::kLeave;
  }
  if (!hb) {
    GSGD_WARN("heartbeat failed: " << hb.status().toString());
  } else if (hb->stop) {
    GSGD_INFO("coordinator asks us to stop");
    return Next::kLeave;
  } else if (hb->reregister && !register_(0)) {
    if (!quarantined_ && !run_over_) exit_code_ = 1;
    return Next::kLeave;
  } else {
    followCompression(hb->compression);
  }
  return Next::kGoOn;
}

void Trainer::followCompression(const std::string& chosen) {
  // --compress overrides the daemon's choice; "" = keep the assignment's.
  if (chosen.empty() || !opts_.compress.empty() || chosen == a_.compression || !group_) return;
  auto spec = parseCompressionSpec(chosen);
  if (!spec) {
    GSGD_WARN("ignoring the coordinator's compression: " << spec.status().message());
    return;
  }
  GSGD_INFO("gradient compression " << a_.compression << " -> " << chosen
                                    << " (chosen by the coordinator)");
  group_->setCompression(*spec);
  a_.compression = chosen;
}

int Trainer::finish() {
  if (exit_code_ != 0 && !quarantined_) {
    GSGD_ERROR("stopping after failures: " << total_steps_ << " steps");
    return exit_code_;
  }
  if (run_over_) {
    // Our registration died with the previous head: nobody is left to tell.
    GSGD_INFO("done: " << total_steps_ << " steps (the run ended while we re-registered)");
    return 0;
  }
  returnRanges();
  Status left = coord_.leave(a_, samples_trained_, steps_, samples_unconfirmed_);
  if (!left) GSGD_WARN("leave was not acknowledged: " << left.toString());
  if (quarantined_) {
    GSGD_ERROR(
        "quarantined for repeated bad updates; an operator must clear it "
        "(groupsgdctl unquarantine) before this worker may train again");
    return kQuarantinedExit;
  }
  GSGD_INFO("done: " << total_steps_ << " steps, " << samples_trained_ << " samples");
  return 0;
}

}  // namespace

int runTrainer(zmq::context_t& ctx, const WorkerOptions& opts,
               const std::atomic<bool>& interrupted) {
  auto schedule = SpeedSchedule::parse(opts.schedule_text);
  if (!schedule) {
    GSGD_ERROR(schedule.status().message());
    return 2;
  }
  StartupPhases startup;
  const std::string dir = opts.data_dir.empty() ? dataset::kDefaultFashionMnistDir : opts.data_dir;
  auto data = dataset::loadMnistDir(dir, dataset::Split::kTrain);
  if (!data) {
    GSGD_ERROR("cannot load the training set: " << data.status().toString());
    return 2;
  }
  startup.mark(StartupPhases::kDataset);
  auto device = SharedDevice::open(ctx, opts);
  if (!device) {
    GSGD_ERROR("shared device: " << device.status().toString());
    return 2;
  }
  Trainer t(ctx, opts, interrupted, std::move(*data), std::move(*schedule), std::move(*device),
            startup);
  return t.run();
}

}  // namespace groupsgd::worker
