#include "groupsgd/coordinator/incarnation.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "groupsgd/common/atomic_file.h"

namespace groupsgd::coordinator {

Result<HeadStart> startIncarnation(const std::string& checkpoint_dir, std::uint64_t at_least) {
  HeadStart h;
  if (checkpoint_dir.empty()) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    h.incarnation =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(now).count()) &
        0x7fffffffu;
    if (at_least > 0) h.incarnation = at_least;  // a promoted standby: its primary's + 1
    return h;
  }
  h.state_file = checkpoint_dir + "/head.json";
  std::uint64_t previous = 0;
  std::error_code ec;
  if (std::filesystem::exists(h.state_file, ec)) {
    std::ifstream f(h.state_file);
    std::stringstream text;
    text << f.rdbuf();
    try {
      const auto j = nlohmann::json::parse(text.str());
      previous = j.at("incarnation").get<std::uint64_t>();
      if (j.contains("central_version_seen")) {
        h.previous_version_seen = j["central_version_seen"].get<std::uint64_t>();
      }
    } catch (const std::exception& e) {
      return dataLoss("head state " + h.state_file + " is unreadable (" + e.what() +
                      "); remove it to start over");
    }
  }
  if (previous >= 0x7fffffffu)
    return dataLoss("head incarnation " + std::to_string(previous) + " is out of range");
  h.incarnation = std::max(previous + 1, at_least);
  nlohmann::json j = {{"incarnation", h.incarnation}};
  if (h.previous_version_seen) j["central_version_seen"] = *h.previous_version_seen;
  GSGD_RETURN_IF_ERROR(writeFileAtomically(h.state_file, j.dump() + "\n"));
  return h;
}

}  // namespace groupsgd::coordinator
