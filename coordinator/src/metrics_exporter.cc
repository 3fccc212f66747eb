#include "groupsgd/coordinator/metrics_exporter.h"

#include <algorithm>

namespace groupsgd::coordinator {

using adaptive::WorkerRole;
using adaptive::WorkerState;
using ops::Counter;
using ops::MetricLabels;

namespace {

constexpr const char* kQuarantinedName = "workers_quarantined_total";
constexpr const char* kQuarantinedHelp = "workers quarantined for repeated bad updates";

// The series each active trainer has (removed when it is no longer active).
constexpr const char* kPerWorker[] = {"worker_compute_seconds", "worker_comm_seconds",
                                      "worker_wait_seconds", "worker_batch", "worker_straggler"};

}  // namespace

void MetricsExporter::counterTo(const char* name, const char* help, double value) {
  double& last = exported_[name];
  Counter& counter = metrics_->counter(name, help);  // created at 0 on the first call
  if (value > last) counter.inc(value - last);
  last = std::max(last, value);
}

void MetricsExporter::countQuarantine() {
  metrics_->counter(kQuarantinedName, kQuarantinedHelp).inc();
}

void MetricsExporter::exportWorkers(const Registry& registry,
                                    const std::set<std::uint64_t>& stragglers) {
  std::map<std::string, int> counts = {
      {"active", 0}, {"draining", 0}, {"left", 0}, {"dead", 0}, {"quarantined", 0}};
  for (const auto& [id, w] : registry.all()) {
    if (w.role != WorkerRole::kTrainer) continue;
    counts[w.draining && w.state == WorkerState::kActive ? "draining" : workerStateName(w.state)]++;
    const MetricLabels l = {{"worker", std::to_string(id)}};
    if (w.state != WorkerState::kActive) {
      // Gone: a dead worker's last step time or straggler flag would be read as current.
      for (const char* name : kPerWorker) metrics_->remove(name, l);
      continue;
    }
    metrics_->gauge("worker_compute_seconds", "mean compute time per step", l)
        .set(w.compute_ms / 1e3);
    metrics_->gauge("worker_comm_seconds", "mean communication time per step", l)
        .set(w.comm_ms / 1e3);
    metrics_->gauge("worker_wait_seconds", "mean barrier wait per step", l).set(w.wait_ms / 1e3);
    metrics_->gauge("worker_batch", "assigned batch size", l).set(w.batch_size);
    metrics_
        ->gauge("worker_straggler", "1 while the straggler detector flags the worker, else 0", l)
        .set(stragglers.count(id) > 0 ? 1 : 0);
  }
  for (const auto& [state, n] : counts) {
    metrics_->gauge("workers", "trainers by state", {{"state", state}}).set(n);
  }
  metrics_->counter(kQuarantinedName, kQuarantinedHelp);  // at 0 until the first one
}

void MetricsExporter::exportGroups(std::size_t in_use, const std::vector<std::size_t>& members) {
  metrics_->gauge("groups", "groups in use").set(static_cast<double>(in_use));
  for (std::size_t g = 0; g < members.size(); ++g) {
    metrics_->gauge("group_size", "members per group", {{"group", std::to_string(g)}})
        .set(static_cast<double>(members[g]));
  }
}

void MetricsExporter::exportAccuracy(double accuracy) {
  metrics_->gauge("test_accuracy", "evaluator's latest test accuracy").set(accuracy);
}

void MetricsExporter::exportLoss(double loss) {
  metrics_->gauge("test_loss", "evaluator's latest validation loss").set(loss);
}

void MetricsExporter::exportTotals(const CoordinatorTotals& t) {
  counterTo("samples_trained_total", "samples trained by workers",
            static_cast<double>(t.samples_trained));
  counterTo("regroups_total", "regroups carried out", static_cast<double>(t.regroups));
  counterTo("stale_heartbeats_total", "heartbeats refused (unknown or old epoch)",
            static_cast<double>(t.stale_heartbeats));
  counterTo("identity_refused_total", "requests under a worker id bound to another CURVE key",
            static_cast<double>(t.identity_refused));
  if (t.curve_clients_refused) {  // with CURVE only
    counterTo("curve_clients_refused_total", "CURVE handshakes the ZAP handler refused",
              static_cast<double>(*t.curve_clients_refused));
  }
}

void MetricsExporter::exportCentral(const centralps::CentralStats& c) {
  metrics_->gauge("central_version", "central model version").set(static_cast<double>(c.version));
  counterTo("updates_applied_total", "deltas merged by the central PS",
            static_cast<double>(c.updates_applied));
  counterTo("updates_refused_total", "deltas refused by the central PS",
            static_cast<double>(c.updates_refused));
  counterTo("samples_applied_total", "samples in merged deltas",
            static_cast<double>(c.samples_applied));
  metrics_->gauge("staleness_mean", "mean staleness of merged deltas").set(c.mean_staleness);
  metrics_->gauge("staleness_max", "largest staleness of a merged delta")
      .set(static_cast<double>(c.max_staleness));
  metrics_->gauge("checkpoint_last_version", "newest durable checkpoint")
      .set(static_cast<double>(c.checkpoint_version));
  counterTo("checkpoint_failures_total", "checkpoint writes that failed",
            static_cast<double>(c.checkpoint_failures));
}

}  // namespace groupsgd::coordinator
