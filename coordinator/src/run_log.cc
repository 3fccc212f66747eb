#include "groupsgd/coordinator/run_log.h"

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

}  // namespace groupsgd::coordinator
