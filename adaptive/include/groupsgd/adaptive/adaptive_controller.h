// The adaptive coordinator's brain, separate from its sockets: it turns heartbeat
// statistics into decisions once per control window — stage changes, regroups (with the
// new member -> group slot mapping, batches and exchange periods) and batch rebalancing
// inside groups. The Coordinator carries the decisions out. Deterministic for a given
// input sequence, so it is tested without a network.
// Thread rule: owned by the coordinator thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "groupsgd/adaptive/adaptive_config.h"
#include "groupsgd/adaptive/policy/grouping.h"
#include "groupsgd/adaptive/policy/regroup_decider.h"
#include "groupsgd/adaptive/policy/speed_model.h"
#include "groupsgd/adaptive/policy/stage_controller.h"
#include "groupsgd/adaptive/policy/straggler_detector.h"
#include "groupsgd/adaptive/registry.h"

namespace groupsgd::adaptive {

struct SlotAssignment {
  std::uint32_t slot = 0;  // group PS index
  std::uint32_t batch = 0;
};

// A straggler's onset or recovery as the detector saw it, and what the window did about it.
struct StragglerEvent {
  std::uint64_t worker = 0;
  bool straggler = false;    // true: onset; false: recovery
  std::uint64_t step = 0;    // the worker's own step count when it was decided
  double ratio = 1;          // its step time / the reference (median of its last steps)
  std::uint32_t steps = 0;   // consecutive steps beyond the threshold that decided it
  bool erratic = false;      // decided on the mean of a window of `steps` steps
  std::uint32_t spikes = 0;  // erratic onset: that window's steps beyond the threshold
  std::string action;        // "batch 32 -> 9", "regroup", "none: ..."
  std::string text;          // one line for the event log
};

struct ControlActions {
  std::vector<StragglerEvent> detections;
  std::optional<policy::StageChange> stage_change;
  // A regroup: where every active trainer goes, each slot's K, and why.
  std::optional<policy::RegroupDecision> regroup;
  std::map<std::uint64_t, SlotAssignment> placement;
  // Without a regroup: new batches of members of groups whose batches changed.
  std::map<std::uint64_t, std::uint32_t> rebatch;
  // Exchange period per slot (always filled; the coordinator sends changes).
  std::vector<std::uint32_t> periods;
  std::string current_plan;  // describe() of the plan in force, for logs and status
};

class AdaptiveController {
 public:
  using Clock = std::chrono::steady_clock;
  AdaptiveController(const AdaptiveConfig& cfg, std::uint32_t base_batch, std::uint32_t slots);

  // One step of a trainer (or the means of a heartbeat's steps from a trainer that does
  // not report single steps); step = the trainer's step count after it (0 = unknown).
  void observe(std::uint64_t worker, const policy::StepSample& sample, std::uint64_t step = 0);
  void forget(std::uint64_t worker);
  // A trainer joined, left or died: the next window re-plans without the gain margin.
  void membershipChanged(const std::string& why);
  // An operator asked for a regroup: the best plan now, without the gain margin or the
  // interval. apply=false is a preview and changes nothing here.
  std::optional<ControlActions> operatorRegroup(const Registry& registry, bool apply);

  ControlActions window(const Registry& registry, Clock::time_point now, std::uint64_t samples,
                        std::uint64_t sample_budget);

  policy::Stage stage() const { return stages_.stage(); }
  // A promoted standby head goes on from the primary's controller (coordinator_state.cc):
  // its stage and whether a plan had split the trainers, and each straggler it had
  // flagged (under the trainer's new id). Speed estimates start again.
  void resumeAt(policy::Stage stage, bool regrouped) {
    stages_.resumeAt(stage);
    regrouped_ = regrouped;
  }
  void markStraggler(std::uint64_t worker) { detector_.markStraggler(worker); }
  bool regrouped() const { return regrouped_; }
  // True until a plan has split the trainers: new trainers join group 0 meanwhile.
  bool oneGroup() const { return stages_.stage() == policy::Stage::kProfiling || !regrouped_; }
  std::uint32_t periodOf(std::uint32_t slot) const;
  std::size_t stragglers() const { return detector_.stragglers(); }
  bool isStraggler(std::uint64_t worker) const { return detector_.isStraggler(worker); }
  // A trainer's fitted speed once its estimate has min_samples steps (the dashboard).
  std::optional<policy::WorkerSpeed> speedOf(std::uint64_t worker) const;
  void setConfig(const AdaptiveConfig& cfg);
  // The host each slot's group PS runs on (ps_placement = hosts): a plan group then takes
  // the free slot on the host of most of its members before the one it overlaps most.
  // Empty (the default): slots are chosen by overlap alone.
  void setSlotHosts(std::vector<std::string> hosts) { slot_hosts_ = std::move(hosts); }
  const AdaptiveConfig& config() const { return cfg_; }

 private:
  policy::PlanConfig planConfig() const;
  // The detector's changes of this window; a changed worker's estimate restarts.
  std::vector<StragglerEvent> detect(Clock::time_point now);
  ControlActions plan(const Registry& registry, Clock::time_point now, std::uint64_t samples,
                      std::uint64_t sample_budget);
  void describe(std::vector<StragglerEvent>* detections, const ControlActions& act,
                const Registry& registry) const;
  std::vector<policy::WorkerSpeed> speeds(const Registry& registry, bool* complete) const;
  std::vector<std::vector<std::uint64_t>> currentGroups(const Registry& registry) const;
  // Maps plan groups onto slots keeping as many workers beside their PS (slot hosts) and
  // then as many in place as possible.
  std::map<std::uint64_t, SlotAssignment> place(const Registry& registry,
                                                const policy::GroupPlan& plan,
                                                std::vector<std::uint32_t>* periods) const;

  AdaptiveConfig cfg_;
  std::uint32_t base_batch_;
  std::uint32_t slots_;
  std::map<std::uint64_t, policy::SpeedEstimator> estimators_;
  policy::StragglerDetector detector_;
  policy::StageController stages_;
  policy::RegroupDecider decider_;
  std::vector<std::uint32_t> periods_;
  std::vector<std::string> slot_hosts_;
  std::optional<std::string> membership_change_;
  // A straggler-set change waits here until a complete, non-cooling-down window has
  // judged it: a change seen while an estimate was missing or inside the regroup interval
  // must not be forgotten (the detector reports each change once).
  std::optional<std::string> straggler_change_;
  // Workers whose next batch goes straight to its target (undamped): their speed estimate
  // just restarted after a detected change, or they have not been batched yet.
  std::set<std::uint64_t> undamped_;
  bool batched_once_ = false;
  bool regrouped_ = false;
  // When a straggler was last flagged: a straggler change is judged (a regroup) only
  // once the newest onset has lasted 2 control windows (batches act at once; a load spike
  // on a shared machine makes a worker look slow for a second, which must not split a
  // group). Recoveries leave it as it is.
  std::optional<Clock::time_point> last_change_;
  // True if some group holds both a flagged straggler and a worker that is not one.
  bool mixedGroup(const std::vector<std::vector<std::uint64_t>>& groups) const;

  // plan()'s steps. Why this window may regroup (empty trigger: no reason), whether the
  // grouping must change (forced), and whether a straggler change is judged now.
  struct RegroupQuestion {
    std::string trigger;
    bool forced = false;
    bool judge_stragglers = false;
  };
  using Groups = std::vector<std::vector<std::uint64_t>>;
  RegroupQuestion regroupQuestion(const ControlActions& act, const Groups& current, bool complete,
                                  Clock::time_point now);
  // A regroup the decider pays for, filled into act (true), or nothing (false).
  bool tryRegroup(const Registry& registry, const std::vector<policy::WorkerSpeed>& s,
                  const Groups& current, const RegroupQuestion& q, Clock::time_point now,
                  ControlActions* act);
  // The grouping stays: the exchange periods of the stage in force for its groups.
  void adoptStagePeriods(const Registry& registry, const std::vector<policy::WorkerSpeed>& s,
                         const Groups& current);
  // Each group's batches toward their water-filled target (damped unless fresh).
  void rebatch(const Registry& registry, const std::vector<policy::WorkerSpeed>& s,
               const Groups& current, ControlActions* act);
};

}  // namespace groupsgd::adaptive
