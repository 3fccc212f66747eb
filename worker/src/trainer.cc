#include "groupsgd/worker/trainer.h"

#include <chrono>
#include <thread>

#include "groupsgd/common/log.h"
#include "groupsgd/dataset/batch.h"
#include "groupsgd/dataset/idx.h"
#include "groupsgd/kernels/model.h"
#include "registration.h"

namespace groupsgd::worker {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Per-heartbeat-window means of the step-time breakdown.
struct Window {
  double compute_ms = 0, comm_ms = 0;
  int steps = 0;
  void add(double c, double m) { compute_ms += c; comm_ms += m; ++steps; }
  float meanCompute() const { return steps ? static_cast<float>(compute_ms / steps) : 0.f; }
  float meanComm() const { return steps ? static_cast<float>(comm_ms / steps) : 0.f; }
};

}  // namespace

int runTrainer(zmq::context_t& ctx, const WorkerOptions& opts, const std::atomic<bool>& interrupted) {
  auto schedule = SpeedSchedule::parse(opts.schedule_text);
  if (!schedule) {
    GSGD_ERROR(schedule.status().message());
    return 2;
  }
  const std::string dir = opts.data_dir.empty() ? dataset::kDefaultFashionMnistDir : opts.data_dir;
  auto data = dataset::loadMnistDir(dir, dataset::Split::kTrain);
  if (!data) {
    GSGD_ERROR("cannot load the training set: " << data.status().toString());
    return 2;
  }
  CoordinatorClient coord(ctx, opts.coordinator, opts.job_id, std::chrono::milliseconds(opts.timeout_ms));
  auto assigned = registerWithRetry(coord, Role::kTrainer, opts, interrupted);
  if (!assigned) {
    GSGD_ERROR(assigned.status().toString());
    return 1;
  }
  Assignment a = *assigned;
  log::setThreadTag("worker-" + std::to_string(a.worker_id));
  kernels::ModelKind kind;
  if (!kernels::parseModelKind(a.model, &kind)) {
    GSGD_ERROR("the daemon trains model '" << a.model << "', unknown to this worker");
    return 2;
  }
  auto model = kernels::makeModel(kind, data->featureDim());
  if (model->paramCount() != a.param_count) {
    GSGD_ERROR("model size mismatch: daemon says " << a.param_count << " parameters, this worker "
                                                    << model->paramCount() << " (wrong --data?)");
    return 2;
  }
  GSGD_INFO("registered: group " << a.group_id << " at " << a.group_endpoint << ", batch "
                                 << a.batch_size << ", shard " << a.shard_index << "/"
                                 << a.shard_count);

  std::vector<float> params(a.param_count), grad(a.param_count);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::vector<std::uint32_t> idx;
  auto group = std::make_unique<GroupClient>(ctx, a, opts.job_id, std::chrono::milliseconds(opts.timeout_ms));
  auto makeSampler = [&] {
    return std::make_unique<dataset::ShardSampler>(data->count, a.shard_index, a.shard_count,
                                                   a.seed + a.shard_index);
  };
  auto sampler = makeSampler();

  // samples_trained / steps count this registration (reported to the coordinator);
  // total_steps counts the whole process life (schedule, --max-steps).
  std::uint64_t samples_trained = 0, steps = 0, total_steps = 0, step = 0;
  bool need_pull = true;
  float last_loss = 0;
  Window window;
  const auto started = Clock::now();
  auto next_heartbeat = Clock::now() + std::chrono::milliseconds(a.heartbeat_ms);
  int consecutive_failures = 0;

  auto reassign = [&]() -> bool {
    // Close the old registration with its own counts so nothing is counted twice.
    (void)coord.leave(a, samples_trained, steps);
    samples_trained = 0;
    steps = 0;
    auto again = registerWithRetry(coord, Role::kTrainer, opts, interrupted);
    if (!again) return false;
    a = *again;
    sampler = makeSampler();  // the new registration may have a different shard
    group = std::make_unique<GroupClient>(ctx, a, opts.job_id, std::chrono::milliseconds(opts.timeout_ms));
    need_pull = true;
    GSGD_INFO("re-registered as worker " << a.worker_id << " in group " << a.group_id);
    return true;
  };

  while (!interrupted.load()) {
    if (opts.max_steps != 0 && total_steps >= opts.max_steps) break;
    if (need_pull) {
      auto pulled = group->pull(params);
      if (!pulled) {
        GSGD_WARN("pull failed: " << pulled.status().toString());
        if (pulled.status().code() == Code::kFailedPrecondition ||
            pulled.status().code() == Code::kPermissionDenied) {
          if (!reassign()) return 1;
          continue;
        }
        if (++consecutive_failures > 20) return 1;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      step = pulled->step;
      need_pull = false;
    }
    // Compute a gradient on the next batch of this worker's shard.
    const SpeedProfile speed = schedule->at(opts.speed, total_steps, msSince(started) / 1000.0);
    const std::uint32_t batch = a.batch_size;
    const auto t0 = Clock::now();
    sampler->next(batch, &idx);
    x.resize(static_cast<std::size_t>(batch) * data->featureDim());
    y.resize(batch);
    dataset::gatherBatch(*data, idx, x.data(), y.data());
    last_loss = model->lossAndGrad(params, x.data(), y.data(), batch, grad);
    const double real_ms = msSince(t0);
    const double sleep_ms = emulatedSleepMs(speed, real_ms);
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
    const double compute_ms = msSince(t0);

    const auto t1 = Clock::now();
    auto ans = group->push(step, grad, batch, last_loss, static_cast<float>(compute_ms), params);
    const double comm_ms = msSince(t1);
    if (!ans) {
      // The gradient was refused or lost: it is not counted as trained (the group PS did
      // not count it either), and the replica is fetched again.
      GSGD_WARN("push for step " << step << " failed: " << ans.status().toString());
      if (ans.status().code() == Code::kFailedPrecondition ||
          ans.status().code() == Code::kPermissionDenied) {
        if (!reassign()) return 1;
      } else if (++consecutive_failures > 20) {
        return 1;
      }
      need_pull = true;
      continue;
    }
    consecutive_failures = 0;
    samples_trained += batch;
    ++steps;
    ++total_steps;
    step = ans->step;
    window.add(compute_ms, comm_ms);
    if (!ans->accepted) GSGD_DEBUG("gradient dropped: " << ans->reason);

    if (Clock::now() >= next_heartbeat) {
      HeartbeatStats st{samples_trained, steps, last_loss, window.meanCompute(), window.meanComm(),
                        -1.0f, 0, batch};
      window = Window{};
      next_heartbeat = Clock::now() + std::chrono::milliseconds(a.heartbeat_ms);
      auto hb = coord.heartbeat(a, st);
      if (!hb) {
        GSGD_WARN("heartbeat failed: " << hb.status().toString());
      } else if (hb->stop) {
        GSGD_INFO("coordinator asks us to stop");
        break;
      } else if (hb->reregister) {
        if (!reassign()) return 1;
      }
    }
  }
  Status left = coord.leave(a, samples_trained, steps);
  if (!left) GSGD_WARN("leave was not acknowledged: " << left.toString());
  GSGD_INFO("done: " << steps << " steps, " << samples_trained << " samples");
  return 0;
}

}  // namespace groupsgd::worker
