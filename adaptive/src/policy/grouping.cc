#include "groupsgd/adaptive/policy/grouping.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "water_level.h"

namespace groupsgd::adaptive::policy {
namespace {

// Workers of similar speed planned as one unit (count copies of the same model).
struct SpeedClass {
  double a = 0, v = 0;  // mean overhead, mean throughput
  std::uint32_t count = 0;
};

// Step time of a group of classes sharing total batch B with water-filled batches
// (unrounded): the common finish time, or a member clamped above it.
double classStepMs(const SpeedClass* c, std::size_t n, double total, const BatchBounds& b) {
  const double bmin = b.min, bmax = b.max;
  auto filled = [&](double t) {
    double s = 0, slope = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double x = c[i].v * (t - c[i].a);
      if (x <= bmin) {
        s += c[i].count * bmin;
      } else if (x >= bmax) {
        s += c[i].count * bmax;
      } else {
        s += c[i].count * x;
        slope += c[i].count * c[i].v;
      }
    }
    return std::pair<double, double>(s, slope);
  };
  double hi = 1, sum_v = 0, sum_va = 0;
  for (std::size_t i = 0; i < n; ++i) {
    hi = std::max(hi, c[i].a + b.max / c[i].v);
    sum_v += c[i].count * c[i].v;
    sum_va += c[i].count * c[i].v * c[i].a;
  }
  // The search starts at the level no member's bounds would clamp (exact when none is):
  // sum of count v (t - a) = total. (Measured: fewer evaluations than starting from the
  // level of the group one class shorter.)
  const double unclamped = sum_v > 0 ? (total + sum_va) / sum_v : -1.0;
  double t = waterLevel(filled, total, 0.0, hi, 1e-7, 48, unclamped);
  for (std::size_t i = 0; i < n; ++i) t = std::max(t, c[i].a + b.min / c[i].v);  // clamped low
  return t;
}

void fillStaleness(GroupPlan* p, const PlanConfig& cfg) {
  const std::size_t g = p->step_ms.size();
  const double slowest = g ? *std::max_element(p->step_ms.begin(), p->step_ms.end()) : 0;
  std::vector<double> period(g);
  p->exchange_periods.assign(g, cfg.exchange_period);
  // Exchange periods (in ms) are evened out so no group is far staler than the others:
  // faster groups exchange every more steps, up to max_period_factor x K. When even that
  // cannot reach the slowest group's period (a straggler much slower than the rest, e.g. a
  // slow link), the slow groups exchange every fewer steps instead, down to 1 — otherwise
  // the plan that isolates the straggler exceeds the staleness bound and is refused.
  const double k_max = double(cfg.exchange_period) * cfg.max_period_factor;
  double target = cfg.exchange_period * slowest;
  for (std::size_t i = 0; i < g; ++i) target = std::min(target, k_max * p->step_ms[i]);
  for (std::size_t i = 0; i < g; ++i) {
    const double k = std::round(target / p->step_ms[i]);
    // Groups at least as fast as the target keep K as their floor; slower ones may go to 1.
    const double floor_k =
        target >= cfg.exchange_period * p->step_ms[i] ? cfg.exchange_period : 1.0;
    p->exchange_periods[i] = static_cast<std::uint32_t>(std::clamp(k, floor_k, k_max));
    period[i] = p->exchange_periods[i] * p->step_ms[i];
  }
  double inv_sum = 0;
  for (double t : period) inv_sum += 1.0 / t;
  p->staleness.assign(g, 0);
  double weighted = 0;
  p->max_staleness = 0;
  for (std::size_t i = 0; i < g; ++i) {
    p->staleness[i] = period[i] * (inv_sum - 1.0 / period[i]);
    weighted += p->staleness[i] / period[i];
    p->max_staleness = std::max(p->max_staleness, p->staleness[i]);
  }
  const double penalty = cfg.staleness_penalty;
  p->mean_staleness = inv_sum > 0 ? weighted / inv_sum : 0;
  p->useful = p->throughput / (1.0 + penalty * p->mean_staleness);
}

}  // namespace

std::string GroupPlan::describe() const {
  std::ostringstream os;
  os << "G=" << groups.size() << " [";
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (g) os << " | ";
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      if (i) os << ",";
      os << groups[g][i] << ":" << batches[g][i];
    }
    if (g < exchange_periods.size()) os << " K=" << exchange_periods[g];
  }
  os << "] " << static_cast<long long>(throughput) << " samples/s, E[tau] " << mean_staleness;
  return os.str();
}

namespace {

// The plan of these groups of workers (pointers into the speeds), batches water-filled.
GroupPlan evaluateMembers(const std::vector<std::vector<const WorkerSpeed*>>& groups,
                          const PlanConfig& cfg) {
  GroupPlan p;
  std::vector<WorkerSpeed> members;
  for (const auto& group : groups) {
    if (group.empty()) continue;
    members.clear();
    members.reserve(group.size());
    std::vector<std::uint64_t> kept;
    kept.reserve(group.size());
    for (const WorkerSpeed* w : group) {
      members.push_back(*w);
      kept.push_back(w->id);
    }
    const auto total = static_cast<std::uint32_t>(members.size() * cfg.base_batch);
    auto b = allocateBatches(members, total, cfg.bounds);
    const double t = groupStepMs(members, b);
    p.groups.push_back(std::move(kept));
    p.batches.push_back(std::move(b));
    p.step_ms.push_back(t);
    p.throughput += 1000.0 * total / t;
  }
  fillStaleness(&p, cfg);
  return p;
}

}  // namespace

GroupPlan evaluatePlan(std::span<const WorkerSpeed> speeds,
                       const std::vector<std::vector<std::uint64_t>>& groups,
                       const PlanConfig& cfg) {
  // id -> worker through a sorted array (one allocation, not a node per worker).
  std::vector<const WorkerSpeed*> by_id(speeds.size());
  for (std::size_t i = 0; i < speeds.size(); ++i) by_id[i] = &speeds[i];
  auto by_id_order = [](const WorkerSpeed* x, const WorkerSpeed* y) { return x->id < y->id; };
  if (!std::is_sorted(by_id.begin(), by_id.end(), by_id_order)) {  // usually they are
    std::sort(by_id.begin(), by_id.end(), by_id_order);
  }
  std::vector<std::vector<const WorkerSpeed*>> members(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    members[g].reserve(groups[g].size());
    for (auto id : groups[g]) {
      auto it = std::lower_bound(by_id.begin(), by_id.end(), id,
                                 [](const WorkerSpeed* w, std::uint64_t v) { return w->id < v; });
      if (it != by_id.end() && (*it)->id == id) members[g].push_back(*it);
    }
  }
  return evaluateMembers(members, cfg);
}

namespace {

constexpr double kNone = -std::numeric_limits<double>::infinity();

// Worker indices sorted by step time at the nominal batch (ties by id), with those times.
struct NominalOrder {
  std::vector<std::size_t> order;
  std::vector<double> ms;  // by worker index, computed once, not in every comparison
};

NominalOrder sortByNominalStep(std::span<const WorkerSpeed> speeds, const PlanConfig& cfg) {
  const std::size_t n = speeds.size();
  NominalOrder o;
  o.order.resize(n);
  std::iota(o.order.begin(), o.order.end(), 0);
  o.ms.resize(n);
  for (std::size_t i = 0; i < n; ++i) o.ms[i] = speeds[i].stepMs(cfg.base_batch);
  std::sort(o.order.begin(), o.order.end(), [&](std::size_t x, std::size_t y) {
    return o.ms[x] < o.ms[y] || (o.ms[x] == o.ms[y] && speeds[x].id < speeds[y].id);
  });
  return o;
}

// Where each class starts in the sorted list: cut at the largest gaps (log step time), so
// outliers stay on their own while thousands of similar workers cost one class.
std::vector<std::size_t> classCuts(const NominalOrder& o, std::size_t max_classes) {
  const std::size_t n = o.order.size();
  std::vector<std::size_t> cuts;
  if (n <= max_classes) {
    for (std::size_t i = 0; i < n; ++i) cuts.push_back(i);
    return cuts;
  }
  std::vector<std::pair<double, std::size_t>> gaps;
  for (std::size_t i = 1; i < n; ++i) {
    gaps.push_back({std::log(o.ms[o.order[i]]) - std::log(o.ms[o.order[i - 1]]), i});
  }
  const std::size_t keep = max_classes - 1;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(keep), gaps.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  cuts.push_back(0);
  for (std::size_t k = 0; k < keep; ++k) cuts.push_back(gaps[k].second);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

std::size_t classEnd(const std::vector<std::size_t>& cuts, std::size_t c, std::size_t n) {
  return c + 1 < cuts.size() ? cuts[c + 1] : n;
}

// Each class's mean speed and size.
std::vector<SpeedClass> makeClasses(std::span<const WorkerSpeed> speeds, const NominalOrder& o,
                                    const std::vector<std::size_t>& cuts) {
  std::vector<SpeedClass> classes(cuts.size());
  for (std::size_t c = 0; c < cuts.size(); ++c) {
    const std::size_t end = classEnd(cuts, c, speeds.size());
    for (std::size_t i = cuts[c]; i < end; ++i) {
      classes[c].a += speeds[o.order[i]].overhead_ms;
      classes[c].v += speeds[o.order[i]].samples_per_ms;
    }
    classes[c].count = static_cast<std::uint32_t>(end - cuts[c]);
    classes[c].a /= classes[c].count;
    classes[c].v /= classes[c].count;
  }
  return classes;
}

// seg[i][j]: throughput of one group made of classes [i, j).
using Table = std::vector<std::vector<double>>;
Table segmentThroughput(const std::vector<SpeedClass>& classes, const PlanConfig& cfg) {
  const std::size_t q = classes.size();
  Table seg(q + 1, std::vector<double>(q + 1, 0));
  for (std::size_t i = 0; i < q; ++i) {
    std::uint32_t workers = 0;
    for (std::size_t j = i + 1; j <= q; ++j) {
      workers += classes[j - 1].count;
      const double total = double(workers) * cfg.base_batch;
      seg[i][j] = 1000.0 * total / classStepMs(&classes[i], j - i, total, cfg.bounds);
    }
  }
  return seg;
}

// best[g][j]: best throughput of classes [0, j) in g contiguous groups; from[g][j]: where
// its last group starts.
struct Partitions {
  Table best;
  std::vector<std::vector<std::size_t>> from;
};

Partitions bestPartitions(const Table& seg, std::size_t q, std::size_t gmax) {
  Partitions p{Table(gmax + 1, std::vector<double>(q + 1, kNone)),
               std::vector<std::vector<std::size_t>>(gmax + 1, std::vector<std::size_t>(q + 1, 0))};
  p.best[0][0] = 0;
  for (std::size_t g = 1; g <= gmax; ++g) {
    for (std::size_t j = g; j <= q; ++j) {
      for (std::size_t i = g - 1; i < j; ++i) {
        if (p.best[g - 1][i] == kNone) continue;
        const double v = p.best[g - 1][i] + seg[i][j];
        if (v > p.best[g][j]) {
          p.best[g][j] = v;
          p.from[g][j] = i;
        }
      }
    }
  }
  return p;
}

// The number of groups with the most useful throughput within the staleness bound, on
// the class-level figures (cheap); 0 when none fits.
std::size_t chooseGroupCount(const Partitions& p, const Table& seg,
                             const std::vector<SpeedClass>& classes, const PlanConfig& cfg) {
  const std::size_t q = classes.size();
  std::size_t chosen_g = 0;
  double chosen_useful = kNone;
  for (std::size_t g = 1; g < p.best.size(); ++g) {
    if (p.best[g][q] == kNone) continue;
    GroupPlan approx;
    std::size_t j = q;
    for (std::size_t k = g; k > 0; --k) {
      const std::size_t i = p.from[k][j];
      double workers = 0;
      for (std::size_t c = i; c < j; ++c) workers += classes[c].count;
      approx.step_ms.push_back(1000.0 * workers * cfg.base_batch / seg[i][j]);
      approx.throughput += seg[i][j];
      j = i;
    }
    fillStaleness(&approx, cfg);
    if (g > 1 && approx.max_staleness > cfg.staleness_bound) continue;
    if (approx.useful > chosen_useful) {
      chosen_useful = approx.useful;
      chosen_g = g;
    }
  }
  return chosen_g;
}

}  // namespace

GroupPlan planGroups(std::span<const WorkerSpeed> speeds, const PlanConfig& cfg) {
  const std::size_t n = speeds.size();
  if (n == 0) return {};
  const NominalOrder order = sortByNominalStep(speeds, cfg);
  const std::vector<std::size_t> cuts = classCuts(order, cfg.max_classes);
  std::vector<SpeedClass> classes = makeClasses(speeds, order, cuts);
  const std::size_t q = classes.size();
  const Table seg = segmentThroughput(classes, cfg);
  const std::size_t gmax = std::min<std::size_t>(std::max<std::uint32_t>(1, cfg.max_groups), q);
  const Partitions parts = bestPartitions(seg, q, gmax);
  const std::size_t chosen_g = chooseGroupCount(parts, seg, classes, cfg);
  if (chosen_g == 0) return {};
  // That partition's workers, evaluated exactly once.
  std::vector<std::vector<const WorkerSpeed*>> groups(chosen_g);
  std::size_t j = q;
  for (std::size_t k = chosen_g; k > 0; --k) {
    const std::size_t i = parts.from[k][j];
    for (std::size_t c = i; c < j; ++c) {
      for (std::size_t w = cuts[c]; w < classEnd(cuts, c, n); ++w) {
        groups[k - 1].push_back(&speeds[order.order[w]]);
      }
    }
    j = i;
  }
  return evaluateMembers(groups, cfg);  // the members are known: no id lookup
}

}  // namespace groupsgd::adaptive::policy
