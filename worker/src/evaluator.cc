#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "groupsgd/client/central_model_client.h"
#include "groupsgd/common/log.h"
#include "groupsgd/dataset/batch.h"
#include "groupsgd/dataset/idx.h"
#include "groupsgd/kernels/model.h"
#include "groupsgd/worker/registration.h"
#include "groupsgd/worker/trainer.h"

namespace groupsgd::worker {

// Test accuracy of params over the whole set, in slices to bound memory.
static double testAccuracy(kernels::Model& model, const dataset::Dataset& test,
                           std::span<const float> params) {
  constexpr std::size_t kSlice = 1000;
  std::vector<float> x(kSlice * test.featureDim());
  std::vector<std::int32_t> y(kSlice), pred(kSlice);
  std::vector<std::uint32_t> idx;
  std::size_t correct = 0;
  for (std::size_t start = 0; start < test.count; start += kSlice) {
    const std::size_t n = std::min(kSlice, test.count - start);
    idx.resize(n);
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(start + i);
    dataset::gatherBatch(test, idx, x.data(), y.data());
    model.predict(params, x.data(), n, pred.data());
    for (std::size_t i = 0; i < n; ++i) correct += pred[i] == y[i];
  }
  return test.count == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(test.count);
}

int runEvaluator(zmq::context_t& ctx, const WorkerOptions& opts,
                 const std::atomic<bool>& interrupted) {
  const std::string dir = opts.data_dir.empty() ? dataset::kDefaultFashionMnistDir : opts.data_dir;
  auto test = dataset::loadMnistDir(dir, dataset::Split::kTest);
  if (!test) {
    GSGD_ERROR("cannot load the test set: " << test.status().toString());
    return 2;
  }
  const auto timeout = std::chrono::milliseconds(opts.timeout_ms);
  client::CoordinatorClient coord(ctx, opts.coordinator, opts.job_id, timeout, opts.curve);
  coord.joinJob(opts.job);
  auto assigned = registerWithRetry(coord, client::Role::kEvaluator, opts, interrupted,
                                    std::chrono::milliseconds(opts.connect_timeout_ms));
  if (!assigned) {
    if (assigned.status().code() == Code::kFinished) return 0;  // came after the end
    GSGD_ERROR(assigned.status().toString());
    return 1;
  }
  client::Assignment a = *assigned;
  log::setThreadTag("evaluator");
  kernels::ModelKind kind;
  if (!kernels::parseModelKind(a.model, &kind)) {
    GSGD_ERROR("unknown model '" << a.model << "'");
    return 2;
  }
  auto model = kernels::makeModel(kind, test->featureDim());
  if (!model || model->paramCount() != a.param_count) {
    GSGD_ERROR("model size mismatch: daemon " << a.param_count << ", evaluator "
                                              << model->paramCount());
    return 2;
  }
  MessageLimits limits;
  limits.job_id = coord.jobId();
  auto central = std::make_unique<client::CentralModelClient>(
      ctx, a.central_endpoint, a.param_count, limits, clientSocketOptions(opts.curve));
  std::vector<float> params(a.param_count);
  client::HeartbeatStats st;
  std::uint64_t evaluated = ~0ull;
  int failures = 0;
  // It measures every --eval-interval-ms and heartbeats every heartbeat period between, so
  // it hears "measure now" (the run is over; its final model waits for this reading: it
  // is measured at once, once) and "stop" within a heartbeat period, not an interval.
  auto next_eval = std::chrono::steady_clock::now();
  bool measure_now = false, hurried = false;
  while (!interrupted.load()) {
    const auto t0 = std::chrono::steady_clock::now();
    if (t0 >= next_eval || measure_now) {
      next_eval = t0 + std::chrono::milliseconds(opts.eval_interval_ms);
      measure_now = false;
      auto version = central->fetch(coord.jobId(), params, timeout);
      if (!version) {
        GSGD_WARN("cannot fetch the central model: " << version.status().toString());
        if (++failures > 20) return 1;
      } else {
        failures = 0;
      }
      if (version && *version != evaluated) {
        evaluated = *version;
        st.test_accuracy = static_cast<float>(testAccuracy(*model, *test, params));
        st.evaluated_version = evaluated;
        GSGD_DEBUG("central version " << evaluated << ": test accuracy " << st.test_accuracy);
      }
    }
    auto hb = coord.heartbeat(a, st);
    if (hb && hb->stop) break;
    if (hb && hb->reregister) {
      auto again = registerWithRetry(
          coord, client::Role::kEvaluator, opts, interrupted,
          std::chrono::milliseconds(static_cast<std::int64_t>(opts.give_up_s * 1000)));
      if (!again) return again.status().code() == Code::kFinished ? 0 : 1;
      a = *again;
      // A restarted head has its central PS on a new endpoint.
      if (a.central_endpoint != central->endpoint()) {
        central = std::make_unique<client::CentralModelClient>(
            ctx, a.central_endpoint, a.param_count, limits, clientSocketOptions(opts.curve));
      }
    }
    if (hb && hb->measure_now && !hurried) {
      hurried = true;
      measure_now = true;
      continue;
    }
    const auto next_heartbeat =
        t0 + std::chrono::milliseconds(std::max<std::uint32_t>(a.heartbeat_ms, 10));
    std::this_thread::sleep_until(std::min(next_eval, next_heartbeat));
  }
  (void)coord.leave(a, 0, 0);
  return 0;
}

}  // namespace groupsgd::worker
