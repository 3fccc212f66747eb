// The coordinator's view for the dashboard page (docs/operations.md "Watching a run"):
// gathered from what the control methods status/workers/groups answer, the run's events
// and the evaluator's reports, serialized here on the coordinator thread twice a second
// and handed to the board the metrics endpoint serves. No key material goes in.
#include <time.h>

#include <cmath>
#include <limits>

#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::chrono::milliseconds kPublishPeriod{500};  // the page polls as often
constexpr std::size_t kEventsShown = 200;                 // the newest events

ojson orNull(bool known, double v) { return known && std::isfinite(v) ? ojson(v) : ojson(); }

double threadCpuS() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

ojson Coordinator::dashboardWorkersJson() const {
  const auto now = Clock::now();
  ojson rows = ojson::array();
  for (const auto& [id, w] : registry_.all()) {
    const bool trainer = w.role == WorkerRole::kTrainer;
    const double step_ms = static_cast<double>(w.compute_ms) + w.comm_ms + w.wait_ms;
    // The controller's fitted speed where it has one; otherwise the last reported steps.
    double speed = -1;
    if (trainer && adaptive_) {
      if (auto s = adaptive_->speedOf(id); s && w.batch_size > 0) {
        speed = 1000.0 * w.batch_size / s->stepMs(w.batch_size);
      }
    }
    if (trainer && speed < 0 && step_ms > 0) speed = 1000.0 * w.batch_size / step_ms;
    ojson straggler;  // null: never flagged
    if (const StragglerMark* m = dashboard_->straggler(id)) {
      straggler = {
          {"state", m->flagged ? "flagged" : "recovered"}, {"reason", m->reason}, {"t_s", m->t_s}};
    }
    const bool live = w.state == WorkerState::kActive;
    rows.push_back(
        {{"id", id},
         {"name", w.name.empty() ? std::to_string(id) : w.name},
         {"role", workerRoleName(w.role)},
         {"host", w.host},
         {"state", w.draining && live ? "draining" : workerStateName(w.state)},
         // Fields that do not apply to an evaluator or a node daemon are null ("-").
         {"group", trainer ? ojson(w.group) : ojson()},
         {"batch", trainer ? ojson(w.batch_size) : ojson()},
         {"step_ms", orNull(trainer && w.steps > 0, step_ms)},
         {"compute_ms", orNull(trainer && w.steps > 0, w.compute_ms)},
         {"comm_ms", orNull(trainer && w.steps > 0, w.comm_ms)},
         {"wait_ms", orNull(trainer && w.steps > 0, w.wait_ms)},
         {"speed_sps", orNull(speed >= 0, speed)},
         {"straggler", straggler},
         {"samples_trained", trainer ? ojson(w.samples_trained) : ojson()},
         {"steps", trainer ? ojson(w.steps) : ojson()},
         {"test_acc",
          orNull(w.role == WorkerRole::kEvaluator && w.test_accuracy >= 0, w.test_accuracy)},
         {"last_heartbeat_s", std::chrono::duration<double>(now - w.last_seen).count()}});
  }
  return rows;
}

void Coordinator::publishDashboard() {
  const double cpu_start = threadCpuS();
  schedule_.dashboard = Clock::now() + kPublishPeriod;
  dashboard_->readEvents(run_log_.events());
  const double t = run_log_.trainingS();
  std::map<std::string, std::uint32_t> membership;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role == WorkerRole::kTrainer && w.state == WorkerState::kActive) {
      membership[w.name.empty() ? std::to_string(id) : w.name] = w.group;
    }
  }
  if (run_log_.training()) {
    dashboard_->noteMembership(t, membership);
    const Accuracy acc = latestAccuracy();
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    dashboard_->sample({.t_s = t,
                        .samples = static_cast<double>(registry_.samplesTrained()),
                        .test_acc = acc.value >= 0 ? acc.value : kNaN,
                        .test_loss = acc.loss >= 0 ? acc.loss : kNaN,
                        .groups = static_cast<double>(groupsInUse()),
                        .central_version = static_cast<double>(head_.versionSeen())});
  }
  const nlohmann::json& all = run_log_.events();
  ojson events = ojson::array();
  for (std::size_t i = all.size() > kEventsShown ? all.size() - kEventsShown : 0; i < all.size();
       ++i) {
    events.push_back({{"t_s", all[i].value("t_s", 0.0)},
                      {"kind", all[i].value("kind", "")},
                      {"text", all[i].value("text", "")}});
  }
  ojson view;
  view["job"] = cfg_.job_name;
  view["t_s"] = t;
  view["target_acc"] = cfg_.target_acc > 0 ? ojson(cfg_.target_acc) : ojson();
  view["status"] = statusJson();
  view["workers"] = dashboardWorkersJson();
  view["groups"] = groupsJson();
  view["history"] = dashboard_->historyJson();
  view["membership"] = dashboard_->membershipJson();
  view["events"] = std::move(events);
  // What the page costs this thread, up to the previous view (docs/benchmarks.md).
  view["publish_cpu_s"] = dashboard_cpu_s_;
  deps_.dashboard->publishJob(cfg_.job_name, view.dump());
  dashboard_cpu_s_ += threadCpuS() - cpu_start;
}

}  // namespace groupsgd::coordinator
