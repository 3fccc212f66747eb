#include "groupsgd/adaptive/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "groupsgd/adaptive/adaptive_controller.h"
#include "groupsgd/adaptive/policy/batch_allocation.h"
#include "groupsgd/adaptive/policy/grouping.h"

namespace groupsgd::adaptive {
namespace {

struct TrueSpeed {
  double a = 1.0;  // ms per step, fixed
  double v = 4.0;  // samples per ms
};

// The true speed of worker i in window w under the scenario.
TrueSpeed trueSpeed(const SimConfig& c, std::uint32_t i, std::uint32_t w, double lognormal) {
  TrueSpeed s;
  s.v *= lognormal;
  const bool affected = i < c.stragglers;
  const std::uint32_t start = c.windows / 4, end = (3 * c.windows) / 4;
  if (!affected) return s;
  if (c.scenario == "straggler") {
    if (w >= start) s.v /= c.slowdown;
  } else if (c.scenario == "link") {
    if (w >= start) s.a += c.link_ms;
  } else if (c.scenario == "recover") {
    if (w >= start && w < end) s.v /= c.slowdown;
  } else if (c.scenario == "alternate") {
    // slowdown x for `dwell` windows, 1x for `dwell` windows, and so on.
    if ((w / c.dwell_windows) % 2 == 1) s.v /= c.slowdown;
  } else if (c.scenario == "drift") {
    // Slows linearly to the full slowdown by mid-run, then recovers linearly.
    const double mid = c.windows / 2.0;
    const double x = 1.0 - std::fabs(static_cast<double>(w) - mid) / mid;
    s.v /= 1.0 + (c.slowdown - 1.0) * std::max(0.0, x);
  }
  return s;
}

}  // namespace

nlohmann::json SimResult::summary() const {
  return {{"throughput_ratio", throughput_ratio},
          {"mean_staleness", mean_staleness},
          {"regroups", regroups},
          {"final_groups", final_groups},
          {"decision_ms_mean", decision_ms_mean},
          {"decision_ms_max", decision_ms_max}};
}

namespace {

Status checkSimConfig(const SimConfig& c) {
  static const char* kScenarios[] = {"steady", "straggler", "link",     "recover",
                                     "drift",  "lognormal", "alternate"};
  if (std::find(std::begin(kScenarios), std::end(kScenarios), c.scenario) == std::end(kScenarios)) {
    return invalidArgument("unknown scenario '" + c.scenario +
                           "' (steady, straggler, link, recover, drift, lognormal, alternate)");
  }
  if (c.workers == 0 || c.windows == 0) return invalidArgument("workers and windows must be > 0");
  return Status::ok();
}

// Every worker in group 0 with the base batch, as a run starts.
Registry startingRegistry(const SimConfig& c) {
  Registry reg;
  for (std::uint32_t i = 0; i < c.workers; ++i) {
    WorkerRecord w;
    w.id = i + 1;
    w.batch_size = c.base_batch;
    w.group = 0;
    reg.add(w);
  }
  return reg;
}

// What the grouping in force achieves in one window with the true speeds.
struct WindowOutcome {
  double achieved = 0;          // samples/s of all groups
  double ideal = 0;             // samples/s if every worker ran alone, never waiting
  double mean_staleness = 0;    // central updates between a group's pull and push
  std::vector<double> step_ms;  // per group slot (0: empty)
};

WindowOutcome measureWindow(const SimConfig& c, const Registry& reg, const AdaptiveController& ctl,
                            const std::vector<policy::WorkerSpeed>& truth, std::uint32_t slots) {
  WindowOutcome o;
  for (const auto& t : truth) {
    o.ideal += 1000.0 * c.base_batch / (t.overhead_ms + c.base_batch / t.samples_per_ms);
  }
  std::vector<std::vector<std::uint64_t>> groups(slots);
  std::vector<std::vector<std::uint32_t>> batches(slots);
  for (const auto& [id, rec] : reg.all()) {
    groups[rec.group].push_back(id);
    batches[rec.group].push_back(rec.batch_size);
  }
  o.step_ms.assign(slots, 0);
  std::vector<double> period(slots, 0);
  for (std::uint32_t g = 0; g < slots; ++g) {
    if (groups[g].empty()) continue;
    std::vector<policy::WorkerSpeed> ms;
    std::uint32_t total = 0;
    for (auto id : groups[g]) ms.push_back(truth[id - 1]);
    for (auto b : batches[g]) total += b;
    o.step_ms[g] = policy::groupStepMs(ms, batches[g]);
    period[g] = o.step_ms[g] * ctl.periodOf(g);
    o.achieved += 1000.0 * total / o.step_ms[g];
  }
  // A group's staleness: the other groups' updates during its period, weighted by how
  // often it updates.
  double inv = 0, tau_w = 0;
  for (std::uint32_t g = 0; g < slots; ++g)
    if (period[g] > 0) inv += 1.0 / period[g];
  for (std::uint32_t g = 0; g < slots; ++g) {
    if (period[g] > 0) tau_w += (period[g] * (inv - 1.0 / period[g])) / period[g];
  }
  o.mean_staleness = inv > 0 ? tau_w / inv : 0;
  return o;
}

// The controller's observations of the window: each worker's steps and step times, noisy.
void observeWindow(const SimConfig& c, Registry& reg, AdaptiveController& ctl,
                   const std::vector<policy::WorkerSpeed>& truth, const WindowOutcome& o,
                   std::uint64_t samples, std::normal_distribution<double>& noise,
                   std::mt19937_64& rng) {
  for (std::uint32_t i = 0; i < c.workers; ++i) {
    WorkerRecord* rec = reg.find(i + 1);
    const double gstep = o.step_ms[rec->group];
    const auto steps = static_cast<std::uint64_t>(c.window_ms / std::max(1.0, gstep));
    rec->steps += steps;
    rec->samples_trained += steps * rec->batch_size;
    rec->last_loss = static_cast<float>(0.3 + 2.0 * std::exp(-static_cast<double>(samples) / 2e5));
    const double compute = rec->batch_size / truth[i].samples_per_ms * std::max(0.5, noise(rng));
    const double comm = truth[i].overhead_ms * std::max(0.5, noise(rng));
    ctl.observe(rec->id, {rec->batch_size, compute, comm});
  }
}

void applyActions(Registry& reg, const ControlActions& act) {
  if (act.regroup) {
    for (const auto& [id, place] : act.placement) {
      WorkerRecord* rec = reg.find(id);
      rec->group = place.slot;
      rec->batch_size = place.batch;
    }
  }
  for (const auto& [id, b] : act.rebatch) reg.find(id)->batch_size = b;
}

}  // namespace

Result<SimResult> simulate(const SimConfig& c) {
  GSGD_RETURN_IF_ERROR(checkSimConfig(c));
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<double> noise(1.0, c.noise);
  std::lognormal_distribution<double> spread(0.0, c.scenario == "lognormal" ? 0.4 : 0.0);
  std::vector<double> base_speed(c.workers);
  for (auto& b : base_speed) b = spread(rng);

  const std::uint32_t slots = std::min(c.workers, std::max({1u, c.adaptive.stages.coarse_max_groups,
                                                            c.adaptive.stages.fine_max_groups}));
  AdaptiveController ctl(c.adaptive, c.base_batch, slots);
  Registry reg = startingRegistry(c);
  SimResult r;
  double achieved_sum = 0, ideal_sum = 0, staleness_sum = 0, decision_sum = 0;
  std::uint64_t samples = 0;
  for (std::uint32_t w = 0; w < c.windows; ++w) {
    std::vector<policy::WorkerSpeed> truth(c.workers);
    for (std::uint32_t i = 0; i < c.workers; ++i) {
      const TrueSpeed t = trueSpeed(c, i, w, base_speed[i]);
      truth[i] = {i + 1, t.a, t.v};
    }
    const WindowOutcome o = measureWindow(c, reg, ctl, truth, slots);
    achieved_sum += o.achieved;
    ideal_sum += o.ideal;
    staleness_sum += o.mean_staleness;
    samples += static_cast<std::uint64_t>(o.achieved * c.window_ms / 1000.0);
    observeWindow(c, reg, ctl, truth, o, samples, noise, rng);

    const auto t0 = std::chrono::steady_clock::now();
    const auto at = std::chrono::steady_clock::time_point{} +
                    std::chrono::milliseconds(static_cast<long long>(w * c.window_ms));
    ControlActions act = ctl.window(reg, at, samples, 0);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    decision_sum += ms;
    r.decision_ms_max = std::max(r.decision_ms_max, ms);
    if (act.regroup) ++r.regroups;
    applyActions(reg, act);
    if (c.per_window) {
      r.windows.push_back({{"window", w},
                           {"throughput", o.achieved},
                           {"ideal", o.ideal},
                           {"staleness", o.mean_staleness},
                           {"stage", policy::stageName(ctl.stage())},
                           {"regroup", act.regroup ? act.regroup->plan.describe() : ""},
                           {"decision_ms", ms}});
    }
  }
  std::vector<bool> used(slots, false);
  for (const auto& [id, rec] : reg.all()) used[rec.group] = true;
  r.final_groups = static_cast<std::uint32_t>(std::count(used.begin(), used.end(), true));
  r.throughput_ratio = ideal_sum > 0 ? achieved_sum / ideal_sum : 0;
  r.mean_staleness = staleness_sum / c.windows;
  r.decision_ms_mean = decision_sum / c.windows;
  return r;
}

}  // namespace groupsgd::adaptive
