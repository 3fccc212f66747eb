// MetricsExporter: what a scrape of the coordinator's series shows — counters from 0,
// the straggler flag, and no per-worker series for a trainer that is gone.
#include "groupsgd/coordinator/metrics_exporter.h"

#include <doctest/doctest.h>

#include <string>

using groupsgd::adaptive::Registry;
using groupsgd::adaptive::WorkerRecord;
using groupsgd::adaptive::WorkerRole;
using groupsgd::adaptive::WorkerState;
using groupsgd::coordinator::MetricsExporter;
using groupsgd::ops::MetricsRegistry;

namespace {

bool has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

WorkerRecord trainer(std::uint64_t id, float compute_ms) {
  WorkerRecord w;
  w.id = id;
  w.role = WorkerRole::kTrainer;
  w.batch_size = 32;
  w.compute_ms = compute_ms;
  return w;
}

}  // namespace

TEST_CASE("metrics exporter: counters are exported at 0 before their first event") {
  MetricsRegistry metrics;
  MetricsExporter exporter(&metrics);
  exporter.exportTotals({});
  exporter.exportCentral({});
  exporter.exportWorkers(Registry{}, {});
  const std::string text = metrics.render();
  for (const char* name :
       {"samples_trained_total", "regroups_total", "stale_heartbeats_total",
        "identity_refused_total", "updates_applied_total", "updates_refused_total",
        "samples_applied_total", "checkpoint_failures_total", "workers_quarantined_total"}) {
    CHECK_MESSAGE(has(text, std::string("groupsgd_") + name + " 0"), name);
  }
  CHECK(text.find("curve_clients_refused_total") == std::string::npos);  // CURVE off
  exporter.exportTotals({.samples_trained = 50, .regroups = 2});
  exporter.exportTotals({.samples_trained = 40, .regroups = 3});  // never backwards
  exporter.countQuarantine();
  const std::string later = metrics.render();
  CHECK(has(later, "groupsgd_samples_trained_total 50"));
  CHECK(has(later, "groupsgd_regroups_total 3"));
  CHECK(has(later, "groupsgd_workers_quarantined_total 1"));
}

TEST_CASE("metrics exporter: straggler flags, and a trainer that died loses its series") {
  MetricsRegistry metrics;
  MetricsExporter exporter(&metrics);
  Registry registry;
  registry.add(trainer(1, 10));
  registry.add(trainer(2, 40));
  WorkerRecord evaluator = trainer(3, 0);
  evaluator.role = WorkerRole::kEvaluator;
  registry.add(evaluator);
  exporter.exportWorkers(registry, {2});
  std::string text = metrics.render();
  CHECK(has(text, R"(groupsgd_worker_straggler{worker="1"} 0)"));
  CHECK(has(text, R"(groupsgd_worker_straggler{worker="2"} 1)"));
  CHECK(has(text, R"(groupsgd_worker_compute_seconds{worker="2"} 0.04)"));
  CHECK(text.find(R"(worker="3")") == std::string::npos);  // evaluators are not trainers
  CHECK(has(text, R"(groupsgd_workers{state="active"} 2)"));

  registry.find(2)->state = WorkerState::kDead;
  exporter.exportWorkers(registry, {2});
  text = metrics.render();
  CHECK(has(text, R"(groupsgd_workers{state="active"} 1)"));
  CHECK(has(text, R"(groupsgd_workers{state="dead"} 1)"));
  CHECK(text.find(R"(worker="2")") == std::string::npos);
  CHECK(has(text, R"(groupsgd_worker_batch{worker="1"} 32)"));
}
