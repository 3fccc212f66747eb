#include "groupsgd/coordinator/run_log.h"

#include <algorithm>
#include <cstdio>

#include "groupsgd/common/log.h"

namespace groupsgd::coordinator {

nlohmann::json& RunLog::event(const std::string& kind, const std::string& text,
                              double predicted_gain) {
  const double t = trainingS();
  nlohmann::json e = {{"t_s", t}, {"kind", kind}, {"text", text}};
  if (kind == "regroup") e["predicted_gain"] = predicted_gain;
  events_.push_back(std::move(e));
  GSGD_INFO(kind << ": " << text);
  if (print_) {
    std::printf("[%7.1fs] %s: %s\n", t, kind.c_str(), text.c_str());
    std::fflush(stdout);
  }
  return events_.back();
}

nlohmann::json RunLog::state() const {
  return {{"training_s", training() ? nlohmann::json(trainingS()) : nlohmann::json()},
          {"regroups", regroups_},
          {"events", events_}};
}

Status RunLog::resume(const nlohmann::json& s, double age_s) {
  if (!s.is_object() || !s.contains("regroups") || !s["regroups"].is_number_unsigned() ||
      !s.contains("events") || !s["events"].is_array() || !s.contains("training_s") ||
      !(s["training_s"].is_null() || s["training_s"].is_number())) {
    return dataLoss("run log state: not {training_s, regroups, events}");
  }
  for (const auto& e : s["events"]) {
    if (!e.is_object() || !e.contains("kind") || !e.contains("t_s")) {
      return dataLoss("run log state: an event is not {t_s, kind, ...}");
    }
  }
  if (s["training_s"].is_number()) {
    const double began_s = s["training_s"].get<double>() + std::max(0.0, age_s);
    training_started_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(began_s));
  }
  regroups_ = s["regroups"].get<std::uint64_t>();
  events_ = s["events"];
  return Status::ok();
}

}  // namespace groupsgd::coordinator
