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
