#include "groupsgd/adaptive/adaptive_controller.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "groupsgd/common/log.h"

namespace groupsgd::adaptive {

AdaptiveController::AdaptiveController(const AdaptiveConfig& cfg, std::uint32_t base_batch,
                                       std::uint32_t slots)
    : cfg_(cfg),
      base_batch_(base_batch),
      slots_(std::max<std::uint32_t>(1, slots)),
      detector_(cfg.straggler),
      stages_(cfg.stages),
      decider_({cfg.min_gain, std::chrono::milliseconds(cfg.min_regroup_interval_ms)}),
      periods_(slots_, cfg.stages.fine_period) {}

void AdaptiveController::setConfig(const AdaptiveConfig& cfg) {
  cfg_ = cfg;
  detector_.setConfig(cfg.straggler);
  decider_.setConfig({cfg.min_gain, std::chrono::milliseconds(cfg.min_regroup_interval_ms)});
}

void AdaptiveController::observe(std::uint64_t worker, const policy::StepSample& sample,
                                 std::uint64_t step) {
  auto it = estimators_.find(worker);
  if (it == estimators_.end()) {
    it = estimators_.emplace(worker, policy::SpeedEstimator(cfg_.estimator_window)).first;
  }
  it->second.add(sample);
  if (sample.batch > 0 && sample.compute_ms > 0) {
    // The step time at the nominal batch, without the barrier wait: what this worker
    // would cost a group of equal batches.
    detector_.addStep(worker, sample.comm_ms + sample.compute_ms * base_batch_ / sample.batch,
                      step);
  }
}

void AdaptiveController::forget(std::uint64_t worker) {
  estimators_.erase(worker);
  detector_.forget(worker);
  undamped_.erase(worker);
}

void AdaptiveController::membershipChanged(const std::string& why) { membership_change_ = why; }

std::uint32_t AdaptiveController::periodOf(std::uint32_t slot) const {
  return slot < periods_.size() ? periods_[slot] : stages_.exchangePeriod();
}

policy::PlanConfig AdaptiveController::planConfig() const {
  policy::PlanConfig p;
  p.max_groups = std::min(stages_.maxGroups(), slots_);
  p.base_batch = base_batch_;
  p.bounds = {cfg_.min_batch, cfg_.max_batch};
  p.staleness_penalty = cfg_.staleness_penalty;
  p.staleness_bound = cfg_.staleness_bound;
  p.max_period_factor = cfg_.max_period_factor;
  p.exchange_period = stages_.exchangePeriod();
  return p;
}

std::optional<policy::WorkerSpeed> AdaptiveController::speedOf(std::uint64_t worker) const {
  auto it = estimators_.find(worker);
  if (it == estimators_.end() || !it->second.ready(cfg_.min_samples)) return std::nullopt;
  return it->second.estimate(worker);
}

std::vector<policy::WorkerSpeed> AdaptiveController::speeds(const Registry& registry,
                                                            bool* complete) const {
  std::vector<policy::WorkerSpeed> out;
  *complete = true;
  for (const auto& [id, w] : registry.all()) {
    if (w.role != WorkerRole::kTrainer || w.state != WorkerState::kActive || w.draining) continue;
    auto it = estimators_.find(id);
    // Past its warm-up: a process's first steps beside nine starting others are slow,
    // and a plan built on them splits groups for nothing.
    if (it == estimators_.end() || !it->second.ready(cfg_.min_samples) || !detector_.warmedUp(id)) {
      *complete = false;
      continue;
    }
    out.push_back(it->second.estimate(id));
  }
  return out;
}

std::vector<std::vector<std::uint64_t>> AdaptiveController::currentGroups(
    const Registry& registry) const {
  std::vector<std::vector<std::uint64_t>> groups(slots_);
  for (const auto& [id, w] : registry.all()) {
    if (w.role == WorkerRole::kTrainer && w.state == WorkerState::kActive && !w.draining &&
        w.group < slots_) {
      groups[w.group].push_back(id);
    }
  }
  groups.erase(
      std::remove_if(groups.begin(), groups.end(), [](const auto& g) { return g.empty(); }),
      groups.end());
  return groups;
}

std::map<std::uint64_t, SlotAssignment> AdaptiveController::place(
    const Registry& registry, const policy::GroupPlan& plan,
    std::vector<std::uint32_t>* periods) const {
  // Largest plan groups choose first, each taking the free slot on the host of most of its
  // members (with slot hosts), then the one it overlaps most.
  const bool by_host = slot_hosts_.size() == slots_;
  std::vector<std::size_t> order(plan.groups.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return plan.groups[a].size() > plan.groups[b].size();
  });
  std::vector<bool> used(slots_, false);
  std::map<std::uint64_t, SlotAssignment> out;
  periods->assign(slots_, stages_.exchangePeriod());
  for (std::size_t gi : order) {
    std::vector<std::size_t> overlap(slots_, 0), local(slots_, 0);
    for (auto id : plan.groups[gi]) {
      const auto& all = registry.all();
      auto it = all.find(id);
      if (it == all.end()) continue;
      if (it->second.group < slots_) ++overlap[it->second.group];
      for (std::uint32_t s = 0; by_host && s < slots_; ++s) {
        local[s] += !it->second.host.empty() && it->second.host == slot_hosts_[s];
      }
    }
    std::uint32_t best = 0;
    bool found = false;
    for (std::uint32_t s = 0; s < slots_; ++s) {
      if (used[s]) continue;
      if (!found || local[s] > local[best] ||
          (local[s] == local[best] && overlap[s] > overlap[best])) {
        best = s;
        found = true;
      }
    }
    used[best] = true;
    (*periods)[best] =
        gi < plan.exchange_periods.size() ? plan.exchange_periods[gi] : stages_.exchangePeriod();
    for (std::size_t k = 0; k < plan.groups[gi].size(); ++k) {
      out[plan.groups[gi][k]] = {best, plan.batches[gi][k]};
    }
  }
  return out;
}

std::optional<ControlActions> AdaptiveController::operatorRegroup(const Registry& registry,
                                                                  bool apply) {
  bool complete = false;
  auto s = speeds(registry, &complete);
  if (s.empty() || !complete) return std::nullopt;
  policy::RegroupDecider once({-1e9, std::chrono::milliseconds(0)});
  auto d =
      once.decide(s, currentGroups(registry), planConfig(), "operator request", true, Clock::now());
  if (!d) return std::nullopt;
  ControlActions act;
  std::vector<std::uint32_t> periods = periods_;
  act.placement = place(registry, d->plan, &periods);
  act.periods = periods;
  act.current_plan = d->plan.describe();
  act.regroup = std::move(d);
  if (apply) {
    periods_ = periods;
    decider_.applied(Clock::now());
  }
  return act;
}

bool AdaptiveController::mixedGroup(const std::vector<std::vector<std::uint64_t>>& groups) const {
  for (const auto& members : groups) {
    std::size_t flagged = 0;
    for (auto id : members) flagged += detector_.isStraggler(id);
    if (flagged > 0 && flagged < members.size()) return true;
  }
  return false;
}

std::vector<StragglerEvent> AdaptiveController::detect(Clock::time_point now) {
  std::vector<StragglerEvent> out;
  for (const auto& c : detector_.evaluate()) {
    if (auto it = estimators_.find(c.worker); it != estimators_.end()) {
      // An erratic worker's speed is its mean with the pauses; a run-rule change means
      // the worker changed speed, and older samples describe one that no longer exists.
      it->second.countStalls(c.erratic && c.straggler);
      if (!c.erratic) it->second.keepLast(std::max<std::size_t>(c.steps, cfg_.min_samples));
    }
    undamped_.insert(c.worker);
    out.push_back({c.worker, c.straggler, c.step, c.ratio, c.steps, c.erratic, c.spikes, "", ""});
  }
  if (!out.empty()) {
    // Only an onset waits before it may split a group; a recovery may merge at once, but
    // never cuts short the wait of a recent onset, its own (its estimate then holds a few
    // steps at the cut batch, which look slow) or another worker's (a load spike slows
    // several at once and some recover first: judged then, the others would be split).
    for (const auto& e : out) {
      if (e.straggler) last_change_ = now;
    }
    std::ostringstream os;
    os << "stragglers changed (now " << detector_.stragglers() << ")";
    straggler_change_ = os.str();
  }
  return out;
}

ControlActions AdaptiveController::window(const Registry& registry, Clock::time_point now,
                                          std::uint64_t samples, std::uint64_t sample_budget) {
  auto detections = detect(now);
  ControlActions act = plan(registry, now, samples, sample_budget);
  if (act.regroup) regrouped_ = true;
  describe(&detections, act, registry);
  act.detections = std::move(detections);
  return act;
}

void AdaptiveController::describe(std::vector<StragglerEvent>* detections,
                                  const ControlActions& act, const Registry& registry) const {
  const auto& all = registry.all();
  for (auto& d : *detections) {
    auto it = all.find(d.worker);
    const std::uint32_t batch = it != all.end() ? it->second.batch_size : 0;
    std::ostringstream a;
    if (auto p = act.placement.find(d.worker); act.regroup && p != act.placement.end()) {
      a << "regroup (" << act.regroup->plan.describe() << "), batch " << batch << " -> "
        << p->second.batch;
    } else if (auto r = act.rebatch.find(d.worker); r != act.rebatch.end() && r->second != batch) {
      a << "batch " << batch << " -> " << r->second;
    } else if (stages_.stage() == policy::Stage::kProfiling) {
      a << "none yet (profiling stage)";
    } else {
      a << "none (batch " << batch << " kept: on target, or its group's estimates are"
        << " incomplete)";
    }
    d.action = a.str();
    const policy::StragglerConfig& c = detector_.config();
    std::ostringstream t;
    t << "worker " << d.worker;
    if (it != all.end() && !it->second.name.empty()) t << " (" << it->second.name << ")";
    t << (d.straggler ? " is a straggler" : " recovered") << " at its step " << d.step << ": "
      << static_cast<double>(std::lround(d.ratio * 100)) / 100 << "x the reference step time (";
    if (d.erratic && d.straggler) {
      const bool early = d.steps == c.erratic_early_window && d.steps != c.erratic_window;
      t << "erratic: mean of " << d.steps
        << " steps >= " << (early ? c.erratic_early_ratio : c.enter_ratio) << "x, " << d.spikes
        << " of them >= " << c.enter_ratio << "x";
    } else if (d.erratic) {
      t << "erratic: " << d.steps << " steps all < " << c.enter_ratio
        << "x, mean <= " << c.exit_ratio << "x";
    } else {
      t << d.steps << " steps " << (d.straggler ? ">= " : "<= ")
        << (d.straggler ? c.enter_ratio : c.exit_ratio) << "x";
    }
    t << "); action: " << d.action;
    d.text = t.str();
  }
}

namespace {

// Every active trainer's fewest steps and the mean training loss of the window (what the
// stage controller judges).
struct TrainingProgress {
  std::uint64_t min_steps = 0;
  double mean_loss = 0;
};

TrainingProgress trainingProgress(const Registry& registry) {
  std::uint64_t min_steps = ~0ull;
  double loss = 0;
  std::size_t n = 0;
  for (const auto& [id, w] : registry.all()) {
    if (w.role != WorkerRole::kTrainer || w.state != WorkerState::kActive) continue;
    min_steps = std::min(min_steps, w.steps);
    if (w.steps > 0) {
      loss += w.last_loss;
      ++n;
    }
  }
  if (n == 0) return {};
  return {min_steps, loss / static_cast<double>(n)};
}

std::string joined(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + ", " + b;
}

}  // namespace

ControlActions AdaptiveController::plan(const Registry& registry, Clock::time_point now,
                                        std::uint64_t samples, std::uint64_t sample_budget) {
  ControlActions act;
  bool complete = false;
  auto s = speeds(registry, &complete);
  const TrainingProgress progress = trainingProgress(registry);
  if (stages_.stage() != policy::Stage::kProfiling || complete) {
    act.stage_change =
        stages_.update(progress.min_steps, progress.mean_loss, samples, sample_budget);
  }
  if (stages_.stage() == policy::Stage::kProfiling || s.empty()) {
    act.periods = periods_;
    return act;
  }
  for (const auto& w : s) {
    GSGD_DEBUG("worker " << w.id << ": overhead " << w.overhead_ms << " ms, " << w.samples_per_ms
                         << " samples/ms, t(b0) " << w.stepMs(base_batch_) << " ms"
                         << (detector_.isStraggler(w.id) ? " [straggler]" : ""));
  }
  const auto current = currentGroups(registry);
  const RegroupQuestion q = regroupQuestion(act, current, complete, now);
  if (!q.trigger.empty() && complete) {
    if (tryRegroup(registry, s, current, q, now, &act)) return act;
    if (q.forced || act.stage_change) adoptStagePeriods(registry, s, current);
  }
  if (q.judge_stragglers) straggler_change_.reset();
  rebatch(registry, s, current, &act);
  if (complete) batched_once_ = true;
  act.periods = periods_;
  return act;
}

AdaptiveController::RegroupQuestion AdaptiveController::regroupQuestion(
    const ControlActions& act, const std::vector<std::vector<std::uint64_t>>& current,
    bool complete, Clock::time_point now) {
  RegroupQuestion q;
  if (act.stage_change) {
    q.trigger = std::string("stage ") + policy::stageName(act.stage_change->to);
    // New K and G_max: re-planned, but a regroup (a flush of every group) only when the
    // grouping in force has more groups than the new stage allows or the gain pays for
    // it; otherwise only the exchange periods change, which costs no step.
    q.forced = current.size() > planConfig().max_groups;
  }
  if (membership_change_ && complete) {
    q.trigger = joined(q.trigger, *membership_change_);
    // While everybody still shares group 0 a join needs no placing: the plan must pay
    // for a split (the gain margin), so a few noisy first steps split nobody.
    q.forced = q.forced || !oneGroup();
    membership_change_.reset();
  }
  // The straggler change is judged once the decider may act on it; until then it waits.
  // A straggler still sharing a group with non-stragglers stays a question every window:
  // the window that flagged it often mixes its old and new step times, so the first
  // estimate of the gain is low; the gain margin and the regroup interval stop thrash.
  std::optional<std::string> straggler_question = straggler_change_;
  if (!straggler_question && mixedGroup(current)) straggler_question = "straggler shares a group";
  const bool settled =
      !last_change_ || now - *last_change_ >= 2 * std::chrono::milliseconds(cfg_.control_ms);
  q.judge_stragglers = straggler_question && complete && settled && !decider_.coolingDown(now);
  if (q.judge_stragglers) q.trigger = joined(q.trigger, *straggler_question);
  return q;
}

bool AdaptiveController::tryRegroup(const Registry& registry,
                                    const std::vector<policy::WorkerSpeed>& s,
                                    const std::vector<std::vector<std::uint64_t>>& current,
                                    const RegroupQuestion& q, Clock::time_point now,
                                    ControlActions* act) {
  if (auto d = decider_.decide(s, current, planConfig(), q.trigger, q.forced, now)) {
    act->placement = place(registry, d->plan, &periods_);
    act->current_plan = d->plan.describe();
    act->regroup = std::move(d);
    decider_.applied(now);
    act->periods = periods_;
    straggler_change_.reset();
    return true;
  }
  if (q.forced || (q.judge_stragglers && straggler_change_)) {
    GSGD_INFO("regroup considered (" << q.trigger << "): the current grouping stays; current "
                                     << policy::evaluatePlan(s, current, planConfig()).describe()
                                     << ", best "
                                     << policy::planGroups(s, planConfig()).describe());
  }
  return false;
}

void AdaptiveController::adoptStagePeriods(const Registry& registry,
                                           const std::vector<policy::WorkerSpeed>& s,
                                           const std::vector<std::vector<std::uint64_t>>& current) {
  // The same grouping is still best: keep it, with the stage's exchange periods.
  auto eval = policy::evaluatePlan(s, current, planConfig());
  const auto& all = registry.all();
  for (std::size_t gi = 0; gi < current.size(); ++gi) {
    auto it = all.find(current[gi].front());
    if (it != all.end() && it->second.group < slots_ && gi < eval.exchange_periods.size()) {
      periods_[it->second.group] = eval.exchange_periods[gi];
    }
  }
}

void AdaptiveController::rebatch(const Registry& registry,
                                 const std::vector<policy::WorkerSpeed>& s,
                                 const std::vector<std::vector<std::uint64_t>>& current,
                                 ControlActions* act) {
  // No regroup: move each group's batches toward the water-filled target, damped.
  std::map<std::uint64_t, const policy::WorkerSpeed*> by_id;
  for (const auto& w : s) by_id[w.id] = &w;
  const auto& all = registry.all();
  for (const auto& members : current) {
    std::vector<policy::WorkerSpeed> ms;
    std::vector<std::uint32_t> cur;
    for (auto id : members) {
      auto it = by_id.find(id);
      if (it == by_id.end()) break;
      ms.push_back(*it->second);
      cur.push_back(all.at(id).batch_size);
    }
    if (ms.size() != members.size()) continue;  // someone without an estimate yet
    std::uint32_t total = 0;
    for (auto b : cur) total += b;
    auto target = policy::allocateBatches(ms, total, {cfg_.min_batch, cfg_.max_batch});
    // A fresh estimate (the first one, or one restarted by a detected change) is trusted
    // at once; otherwise the damped controller keeps noise from moving batches.
    bool undamped = !batched_once_;
    for (auto id : members) undamped = undamped || undamped_.count(id) > 0;
    auto next =
        undamped ? target : policy::dampedUpdate(cur, target, {cfg_.min_batch, cfg_.max_batch}, {});
    for (auto id : members) undamped_.erase(id);
    if (next != cur) {
      for (std::size_t i = 0; i < members.size(); ++i) act->rebatch[members[i]] = next[i];
    }
  }
}

}  // namespace groupsgd::adaptive
