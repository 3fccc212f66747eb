#include "groupsgd/ops/dashboard_board.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "groupsgd/ops/version.h"

namespace groupsgd::ops {

DashboardBoard::DashboardBoard(bool serve) : serve_(serve) {}

void DashboardBoard::publishJob(const std::string& job, std::string view_json) {
  std::lock_guard lock(mu_);
  jobs_[job] = std::move(view_json);
}

void DashboardBoard::removeJob(const std::string& job) {
  std::lock_guard lock(mu_);
  jobs_.erase(job);
}

void DashboardBoard::publishJobTable(std::string table_json) {
  std::lock_guard lock(mu_);
  job_table_ = std::move(table_json);
}

std::string DashboardBoard::stateJson() const {
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const nlohmann::json daemon = {{"version", buildVersion()},
                                 {"serve", serve_},
                                 {"pid", static_cast<long>(::getpid())},
                                 {"uptime_s", uptime}};
  std::string out = "{\"daemon\":" + daemon.dump() + ",\"job_table\":";
  std::lock_guard lock(mu_);
  out += job_table_;
  out += ",\"jobs\":{";
  bool first = true;
  for (const auto& [name, view] : jobs_) {
    if (!first) out += ',';
    first = false;
    out += nlohmann::json(name).dump();  // escaped like any JSON string
    out += ':';
    out += view;
  }
  out += "}}";
  return out;
}

}  // namespace groupsgd::ops
