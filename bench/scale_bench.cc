// groupsgd-bench-scale: how the grouping policy scales. For 100, 1,000 and 10,000
// workers (lognormal speeds, 2% of them stragglers on a slow link), the time of one
// regroup decision (plan + evaluation of the current grouping, median of repeats), the
// predicted throughput of the plan against the ideal (every worker busy all the time)
// and against one synchronous group; then the simulator's per-window controller time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_cli.h"
#include "groupsgd/adaptive/policy/grouping.h"
#include "groupsgd/adaptive/policy/regroup_decider.h"
#include "groupsgd/adaptive/simulator.h"

using namespace groupsgd::adaptive;
using nlohmann::json;

int main(int argc, char** argv) {
  bool quick = false;
  std::uint32_t decision_workers = 0;
  auto app = groupsgd::bench::benchApp(
      "groupsgd-bench-scale", "the adaptive policy's decision time for 100 to 10,000 workers");
  app->add_flag("--quick", quick, "3 repeats instead of 11 (CI smoke test)");
  // Exactly one decision for N workers and nothing else, for counting its instructions
  // (valgrind --tool=callgrind, docs/benchmarks.md "scale").
  app->add_option("--decision-only", decision_workers, "one decision for N workers, nothing else")
      ->check(groupsgd::bench::kPositive);
  if (auto rc = groupsgd::bench::parseCommandLine(*app, argc, argv)) return *rc;
  const bool decision_only = decision_workers > 0;
  const int repeats = decision_only ? 1 : quick ? 3 : 11;
  json summary = {{"bench", "scale"}};
  std::vector<std::uint32_t> sizes = {100u, 1000u, 10000u};
  if (decision_only) sizes = {decision_workers};
  for (std::uint32_t n : sizes) {
    std::mt19937_64 rng(n);
    std::lognormal_distribution<double> spread(0.0, 0.3);
    std::vector<policy::WorkerSpeed> speeds;
    for (std::uint32_t i = 0; i < n; ++i) speeds.push_back({i + 1, 1.0, 4.0 * spread(rng)});
    for (std::uint32_t i = 0; i < n / 50; ++i) speeds[std::size_t{i} * 50].overhead_ms += 40.0;
    policy::PlanConfig cfg;
    cfg.max_groups = 4;
    const std::vector<std::vector<std::uint64_t>> one = [&] {
      std::vector<std::uint64_t> ids;
      ids.reserve(speeds.size());
      for (const auto& s : speeds) ids.push_back(s.id);
      return std::vector<std::vector<std::uint64_t>>{ids};
    }();
    std::vector<double> times;
    std::optional<policy::RegroupDecision> decision;
    for (int r = 0; r < repeats; ++r) {
      policy::RegroupDecider decider({0.0, std::chrono::milliseconds(0)});
      const auto t0 = std::chrono::steady_clock::now();
      decision = decider.decide(speeds, one, cfg, "bench", true, std::chrono::steady_clock::now());
      times.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    double ideal = 0;
    for (const auto& s : speeds) ideal += 1000.0 * cfg.base_batch / s.stepMs(cfg.base_batch);
    const auto sync = policy::evaluatePlan(speeds, one, cfg);
    const auto& plan = decision ? decision->plan : sync;
    json m = {{"workers", n},
              {"decision_ms_median", times[times.size() / 2]},
              {"decision_ms_max", times.back()},
              {"groups", plan.groups.size()},
              {"plan_throughput_vs_ideal", plan.throughput / ideal},
              {"plan_useful_vs_ideal", plan.useful / ideal},
              {"sync_throughput_vs_ideal", sync.throughput / ideal},
              {"plan_mean_staleness", plan.mean_staleness}};
    std::printf("%s\n", m.dump().c_str());
    summary["decision_ms_" + std::to_string(n)] = times[times.size() / 2];
    summary["plan_vs_ideal_" + std::to_string(n)] = plan.throughput / ideal;
  }
  if (decision_only) return 0;
  for (std::uint32_t n : {8u, 1000u, 10000u}) {
    SimConfig c;
    c.workers = n;
    c.windows = quick ? 20 : 60;
    c.scenario = "recover";
    c.stragglers = std::max(1u, n / 50);
    auto r = simulate(c);
    if (!r) return 1;
    json m = r->summary();
    m["sim_workers"] = n;
    std::printf("%s\n", m.dump().c_str());
    summary["sim_window_ms_mean_" + std::to_string(n)] = r->decision_ms_mean;
  }
  summary["decision_ms_10000_within_target"] = summary["decision_ms_10000"].get<double>() <= 5.0;
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}
