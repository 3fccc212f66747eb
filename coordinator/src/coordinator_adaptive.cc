// The coordinator's side of the adaptive controller: trainers' step timings in, and each
// control window's actions out (batch sizes, exchange periods, a regroup).
#include <algorithm>
#include <sstream>

#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

void Coordinator::observeSteps(WorkerRecord& w, const InMessage& msg) {
  auto hb = msg.header().getBody().getHeartbeat();
  // The heartbeat's means cover the steps since the previous one (a new registration
  // starts its count again).
  const std::uint64_t steps = hb.getSteps();
  const double n = static_cast<double>(steps >= w.steps ? steps - w.steps : steps);
  w.total_compute_ms += n * hb.getComputeMs();
  w.total_comm_ms += n * hb.getCommMs();
  w.total_wait_ms += n * hb.getWaitMs();
  if (!adaptive_) return;
  auto recent = hb.getRecentSteps();
  if (recent.size() > 0) {
    for (auto st : recent) {
      adaptive_->observe(w.id, {st.getBatch(), st.getComputeMs(), st.getCommMs()}, st.getStep());
    }
  } else if (hb.getBatchSize() > 0 && hb.getComputeMs() > 0) {
    // A trainer that reports means only (the Python binding): one sample per heartbeat.
    adaptive_->observe(w.id, {hb.getBatchSize(), hb.getComputeMs(), hb.getCommMs()}, steps);
  }
  // Its first steps or a shift in its step times: judge now, not at the next window.
  if (hb.getSpeedChanged()) schedule_.control = std::min(schedule_.control, Clock::now());
}

void Coordinator::controlWindow() {
  if (stopping()) return;
  adaptive_->setSlotHosts(slotHosts());
  const ControlActions act =
      adaptive_->window(registry_, Clock::now(), registry_.samplesTrained(), cfg_.max_samples);
  for (const auto& d : act.detections) {
    event("straggler", d.text)
        .update({{"worker", d.worker},
                 {"onset", d.straggler},
                 {"step", d.step},
                 {"ratio", d.ratio},
                 {"steps", d.steps},
                 {"erratic", d.erratic},
                 {"action", d.action}});
  }
  if (act.stage_change) {
    event("stage", std::string("-> ") + policy::stageName(act.stage_change->to) + " (" +
                       act.stage_change->cause + ")");
  }
  chooseCompressions();
  if (act.regroup) return applyRegroup(act);
  std::vector<bool> touched(fleet_->slots(), false);
  for (std::uint32_t g = 0; g < fleet_->slots() && g < act.periods.size(); ++g) {
    if (fleet_->period(g) != act.periods[g]) {
      fleet_->setPeriod(g, act.periods[g]);
      touched[g] = true;
    }
  }
  for (const auto& [id, batch] : act.rebatch) {
    WorkerRecord* w = registry_.find(id);
    if (w == nullptr || w->batch_size == batch) continue;
    w->batch_size = batch;
    touched[w->group] = true;
  }
  for (std::uint32_t g = 0; g < touched.size(); ++g) {
    if (touched[g]) configureGroup(g);
  }
}

void Coordinator::applyRegroup(const ControlActions& act) {
  // 1. Record where everybody goes; a worker that changes group gets a new epoch and
  //    stays listed (leaving) in its old group until it has been told.
  std::vector<bool> gains(fleet_->slots(), false), affected(fleet_->slots(), false);
  std::size_t moved = 0;
  for (const auto& [id, place] : act.placement) {
    WorkerRecord* w = registry_.find(id);
    if (w == nullptr || w->state != WorkerState::kActive || groupFailed(place.slot)) continue;
    w->batch_size = place.batch;
    affected[place.slot] = true;
    if (w->group != place.slot) {
      affected[w->group] = true;
      gains[place.slot] = true;
      w->moving_from = w->group;
      w->moving_epoch = w->epoch;
      w->group = place.slot;
      w->epoch = ++epoch_;
      ++moved;
    }
  }
  for (std::uint32_t g = 0; g < fleet_->slots() && g < act.periods.size(); ++g) {
    if (fleet_->period(g) != act.periods[g]) affected[g] = true;
    fleet_->setPeriod(g, act.periods[g]);
  }
  run_log_.countRegroup();
  std::ostringstream os;
  os << act.regroup->plan.describe() << "; " << moved
     << " worker(s) move; cause: " << act.regroup->cause << "; predicted gain "
     << static_cast<int>(act.regroup->predicted_gain * 100) << "%";
  event("regroup", os.str(), act.regroup->predicted_gain);
  // 2. Groups that receive workers learn about them first (so a moved worker is
  //    expected when it arrives), then the others, after them; every affected group
  //    flushes its delta to the central PS so the new grouping starts from the central
  //    model.
  std::vector<std::uint32_t> gaining;
  for (std::uint32_t g = 0; g < affected.size(); ++g) {
    if (affected[g] && gains[g]) gaining.push_back(g);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t g = 0; g < affected.size(); ++g) {
      if (!affected[g] || gains[g] != (pass == 0)) continue;
      configureGroup(
          g, /*flush=*/true,
          [g](const Status& s) {
            if (!s) GSGD_WARN("could not reconfigure group " << g << ": " << s.toString());
          },
          pass == 0 ? std::vector<std::uint32_t>{} : gaining);
    }
  }
}

}  // namespace groupsgd::coordinator
