// The coordinator's state a standby head follows (docs/reliability.md, "Standby head"):
// today the epoch ledger of data_allocation ranges. The primary publishes it whenever a
// claim or a release changed it; the central PS's standby link sends the newest one at
// most every heartbeat period. A promoted standby's coordinator starts from the last one
// it received, as a restarted head does from its checkpoint's ledger record: what was
// acknowledged stays acknowledged, what the primary's trainers held is issued again and
// counted as duplicates. An older state than the primary's last only issues more again
// (positions acknowledged or cut after it are held or uncut in it); it never loses one.
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {
namespace {

constexpr std::uint64_t kStateFormat = 1;

}  // namespace

void Coordinator::publishState() {
  if (!deps_.standby_state || !cfg_.data_ranges) return;
  deps_.standby_state->publish(
      nlohmann::json{{"format", kStateFormat}, {"epoch_ledger", data_ledger_.state()}}.dump());
}

void Coordinator::resumeFromFollowedState() {
  if (deps_.followed_state.empty() || !cfg_.data_ranges) return;
  const auto state =
      nlohmann::json::parse(deps_.followed_state, nullptr, /*allow_exceptions=*/false);
  deps_.followed_state.clear();
  const bool readable =
      state.is_object() && state.contains("format") && state["format"].is_number_unsigned() &&
      state["format"].get<std::uint64_t>() == kStateFormat && state.contains("epoch_ledger");
  auto ledger = readable ? EpochLedger::fromState(state["epoch_ledger"], data_ledger_.chunk())
                         : Result<EpochLedger>(dataLoss(
                               "the followed coordinator state is not format " +
                               std::to_string(kStateFormat) + " JSON with an epoch_ledger"));
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
