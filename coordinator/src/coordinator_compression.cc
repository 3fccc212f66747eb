// compress_gradients auto: the adaptive controller's choice of gradient encoding per group
// from its members' measured links (docs/adaptive.md, "Compression chosen per group").
// The members learn it in their heartbeat replies and switch between two steps.
#include <string>
#include <vector>

#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

namespace {
bool autoCompression(const DaemonConfig& cfg) { return gradientCompressionChosenPerGroup(cfg); }
}  // namespace

void Coordinator::chooseCompressions() {
  if (!autoCompression(cfg_)) return;
  const double params = static_cast<double>(topo_.param_count);
  const adaptive::policy::CompressionTuning tuning{.threshold_mbit = cfg_.compression_auto_mbit};
  for (std::uint32_t g = 0; g < fleet_->slots(); ++g) {
    GroupCompression& c = compression_[g];
    // A step moves the pushed gradient in its current encoding and a float32 reply.
    const double bytes = params * ((c.state.fp16() ? 2.0 : 4.0) + 4.0);
    std::vector<adaptive::policy::LinkSample> links;
    for (const auto* m : registry_.groupMembers(g)) {
      links.push_back({.worker = m->id,
                       .steps = m->steps,
                       .total_comm_ms = m->total_comm_ms,
                       .bytes_per_step = bytes});
    }
    const bool was_fp16 = c.state.fp16();
    auto why = adaptive::policy::stepCompression(c.state, links, tuning);
    if (!why) continue;
    if (c.state.fp16() != was_fp16) ++c.switches;
    event("compression", "group " + std::to_string(g) + ": " + *why)
        .update({{"group", g},
                 {"phase", adaptive::policy::compressionPhaseName(c.state.phase)},
                 {"slowest_mbit", c.state.slowest_mbit}});
  }
}

std::string Coordinator::gradientCompressionFor(std::uint32_t group) const {
  if (!autoCompression(cfg_)) return fixedGradientCompression(cfg_);
  auto it = compression_.find(group);
  return it != compression_.end() && it->second.state.fp16() ? "fp16" : "dense";
}

nlohmann::json Coordinator::compressionJson(std::uint32_t group) const {
  nlohmann::json j = {{"compression", gradientCompressionFor(group)}};
  if (!autoCompression(cfg_)) return j;
  auto it = compression_.find(group);
  const bool measured = it != compression_.end() && it->second.state.slowest_mbit > 0;
  j["compression_phase"] = adaptive::policy::compressionPhaseName(
      it != compression_.end() ? it->second.state.phase
                               : adaptive::policy::GroupCompressionState::Phase::kDense);
  j["link_mbit"] = measured ? nlohmann::json(it->second.state.slowest_mbit) : nlohmann::json();
  j["compression_switches"] = it != compression_.end() ? it->second.switches : 0;
  return j;
}

nlohmann::json Coordinator::compressionSummaryJson() const {
  nlohmann::json groups = nlohmann::json::array();
  for (std::uint32_t g = 0; g < fleet_->slots(); ++g) {
    nlohmann::json row = compressionJson(g);
    row["group"] = g;
    groups.push_back(std::move(row));
  }
  return {{"mode", autoCompression(cfg_) ? "auto" : fixedGradientCompression(cfg_)},
          {"threshold_mbit", cfg_.compression_auto_mbit},
          {"groups", std::move(groups)}};
}

}  // namespace groupsgd::coordinator
