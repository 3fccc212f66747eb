// The coordinator's metrics (docs/operations.md, "Metrics"): gauges set to the values of
// the moment, counters advanced to the running totals the coordinator and the central PS
// keep (a total only ever moves a counter forward). Every counter is exported from the
// first update on, at 0 if nothing happened yet: Prometheus's increase() sees a series'
// first sample as its start, so a counter born at 1 would never show that first event.
// The coordinator gathers the values; this class knows the series' names, help texts
// and labels.
// Thread rule: the coordinator thread; the registry it writes to has its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "groupsgd/adaptive/registry.h"
#include "groupsgd/centralps/central_stats.h"
#include "groupsgd/ops/metrics.h"

namespace groupsgd::coordinator {

// Names this room takes from the adaptive and ops libraries.
using adaptive::Registry;
using ops::MetricsRegistry;

// The coordinator's own running totals.
struct CoordinatorTotals {
  std::uint64_t samples_trained = 0;
  std::uint64_t regroups = 0;
  std::uint64_t stale_heartbeats = 0;
  std::uint64_t identity_refused = 0;
  std::optional<std::uint64_t> curve_clients_refused;  // with CURVE only
};

class MetricsExporter {
 public:
  explicit MetricsExporter(MetricsRegistry* metrics) : metrics_(metrics) {}

  // Trainers by state, and each active trainer's step times, batch and straggler flag
  // (1 while `stragglers` holds its id); a trainer no longer active loses its series.
  void exportWorkers(const Registry& registry, const std::set<std::uint64_t>& stragglers);
  // One more worker quarantined for repeated bad updates.
  void countQuarantine();
  // Groups in use and the members of each group slot (index = slot).
  void exportGroups(std::size_t in_use, const std::vector<std::size_t>& members);
  void exportAccuracy(double accuracy);
  void exportLoss(double loss);  // an evaluator that reports a validation loss
  void exportTotals(const CoordinatorTotals& totals);
  void exportCentral(const centralps::CentralStats& central);

 private:
  // Advances counter `name` to `value` (never back).
  void counterTo(const char* name, const char* help, double value);

  MetricsRegistry* metrics_;                // borrowed: the job's view of the registry
  std::map<std::string, double> exported_;  // counter values already exported
};

}  // namespace groupsgd::coordinator
