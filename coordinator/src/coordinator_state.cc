// The coordinator's state a standby head follows (docs/reliability.md, "Standby head"):
// the epoch ledger of data_allocation ranges and the run log (training clock, regroups,
// events). The primary publishes it whenever the ledger (a claim or a release) or the run
// log changed; the central PS's standby link sends the newest one at most every heartbeat
// period. A promoted standby's coordinator starts from the last one it received, as a
// restarted head does from its checkpoint's ledger record: what was acknowledged stays
// acknowledged, what the primary's trainers held is issued again and counted as
// duplicates. An older state than the primary's last only issues more again (positions
// acknowledged or cut after it are held or uncut in it); it never loses one.
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {
namespace {

constexpr std::uint64_t kStateFormat = 1;

}  // namespace

void Coordinator::publishState() {
  if (!deps_.standby_state) return;
  nlohmann::json state = {{"format", kStateFormat}, {"run_log", run_log_.state()}};
  if (cfg_.data_ranges) state["epoch_ledger"] = data_ledger_.state();
  if (adaptive_) {
    nlohmann::json trainers = nlohmann::json::array();
    for (const auto& [id, w] : registry_.all()) {
      if (w.role != WorkerRole::kTrainer || w.state != WorkerState::kActive) continue;
      trainers.push_back({{"name", w.name},
                          {"host", w.host},
                          {"pid", w.pid},
                          {"group", w.group},
                          {"batch", w.batch_size},
                          {"straggler", adaptive_->isStraggler(id)}});
    }
    state["adaptive"] = {{"stage", static_cast<std::uint32_t>(adaptive_->stage())},
                         {"regrouped", adaptive_->regrouped()},
                         {"trainers", trainers}};
  }
  published_log_changes_ = run_log_.changes();
  deps_.standby_state->publish(state.dump());
}

void Coordinator::publishStateIfLogChanged() {
  if (deps_.standby_state && run_log_.changes() != published_log_changes_) publishState();
}

void Coordinator::resumeFromFollowedState() {
  if (deps_.followed_state.empty()) return;
  const auto state =
      nlohmann::json::parse(deps_.followed_state, nullptr, /*allow_exceptions=*/false);
  deps_.followed_state.clear();
  if (state.is_object() && state.contains("adaptive")) followed_adaptive_ = state["adaptive"];
  const bool readable = state.is_object() && state.contains("format") &&
                        state["format"].is_number_unsigned() &&
                        state["format"].get<std::uint64_t>() == kStateFormat;
  const Status unreadable = dataLoss("the followed coordinator state is not format " +
                                     std::to_string(kStateFormat) + " JSON");
  if (cfg_.data_ranges) resumeLedgerFrom(readable ? state : nlohmann::json(), unreadable);
  if (!readable || !state.contains("run_log")) {
    GSGD_WARN("run log not taken from the standby's copy: it starts with this head");
    return;
  }
  const double age_s = static_cast<double>(deps_.followed_state_age_ms) / 1000.0;
  if (Status s = run_log_.resume(state["run_log"], age_s); !s) {
    GSGD_WARN("run log not taken from the standby's copy (" << s.toString()
                                                            << "): it starts with this head");
    return;
  }
  event("takeover", "promoted standby (incarnation " + std::to_string(head_.start().incarnation) +
                        "): the primary's " + std::to_string(run_log_.events().size()) +
                        " events and " + std::to_string(run_log_.regroups()) +
                        " regroups kept, its training clock goes on");
}

namespace {

std::string trainerKey(const std::string& name, const std::string& host, std::uint64_t pid) {
  return name + "\n" + host + "\n" + std::to_string(pid);
}

}  // namespace

void Coordinator::resumeAdaptive() {
  const nlohmann::json a = std::move(followed_adaptive_);
  followed_adaptive_ = nlohmann::json();
  if (!adaptive_ || !a.is_object()) return;
  const auto stage = a.value("stage", nlohmann::json());
  const auto regrouped = a.value("regrouped", nlohmann::json());
  const auto trainers = a.value("trainers", nlohmann::json());
  if (!stage.is_number_unsigned() || stage.get<int>() > static_cast<int>(policy::Stage::kFine) ||
      !regrouped.is_boolean() || !trainers.is_array()) {
    GSGD_WARN(
        "adaptive state not taken from the standby's copy (malformed): the controller "
        "starts again");
    return;
  }
  for (const auto& t : trainers) {
    if (!t.is_object() || !t.value("name", nlohmann::json()).is_string() ||
        !t.value("host", nlohmann::json()).is_string() ||
        !t.value("pid", nlohmann::json()).is_number_unsigned() ||
        !t.value("group", nlohmann::json()).is_number_unsigned() ||
        !t.value("batch", nlohmann::json()).is_number_unsigned() ||
        !t.value("straggler", nlohmann::json()).is_boolean()) {
      continue;  // one bad row: that trainer joins as a new one
    }
    followed_trainers_[trainerKey(t["name"], t["host"], t["pid"].get<std::uint64_t>())] = {
        t["group"].get<std::uint32_t>(), t["batch"].get<std::uint32_t>(), t["straggler"]};
  }
  adaptive_->resumeAt(static_cast<policy::Stage>(stage.get<int>()), regrouped.get<bool>());
  GSGD_INFO("adaptive controller taken over from the primary's: stage "
            << policy::stageName(adaptive_->stage()) << ", " << followed_trainers_.size()
            << " trainers' groups kept for their re-registration");
}

void Coordinator::placeAsFollowed(WorkerRecord& w) {
  if (!adaptive_ || followed_trainers_.empty()) return;
  auto it = followed_trainers_.find(trainerKey(w.name, w.host, w.pid));
  if (it == followed_trainers_.end()) return;
  const FollowedTrainer t = it->second;
  followed_trainers_.erase(it);  // one registration each
  if (t.group >= cfg_.groupCount() || groupFailed(t.group)) return;
  w.group = t.group;
  if (t.batch > 0) w.batch_size = t.batch;
  if (t.straggler) adaptive_->markStraggler(w.id);
  GSGD_INFO("trainer " << w.id << " (" << w.name << ") back in group " << w.group << ", batch "
                       << w.batch_size << (t.straggler ? ", a straggler" : "")
                       << ", as under the primary");
}

void Coordinator::resumeLedgerFrom(const nlohmann::json& state, const Status& unreadable) {
  auto ledger = !state.is_object() ? Result<EpochLedger>(unreadable)
                : !state.contains("epoch_ledger")
                    ? Result<EpochLedger>(dataLoss("the followed state has no epoch_ledger"))
                    : EpochLedger::fromState(state["epoch_ledger"], data_ledger_.chunk());
  if (!ledger) {
    // Not the state this build sends: the epochs start over, loudly, as without one.
    GSGD_WARN("epoch ledger not taken from the standby's copy (" << ledger.status().toString()
                                                                 << "): epochs start again from 0");
    ledger_resumed_ = {{"from", "standby"}, {"error", ledger.status().toString()}};
    return;
  }
  std::uint64_t acknowledged = 0, held = 0;
  for (const auto& e : ledger->epochs()) acknowledged += e.acknowledged;
  for (const auto& h : state["epoch_ledger"]["held"])
    held += h[2].get<std::uint64_t>() - h[1].get<std::uint64_t>();
  data_ledger_ = std::move(*ledger);
  ledger_resumed_ = {{"from", "standby"}, {"acknowledged", acknowledged}, {"held_reissued", held}};
  GSGD_INFO("epoch ledger taken over from the primary's (followed by this standby): "
            << acknowledged << " positions acknowledged, " << held
            << " held by the primary's trainers issued again");
}

}  // namespace groupsgd::coordinator
