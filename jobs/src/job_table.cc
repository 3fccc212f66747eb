#include "groupsgd/jobs/job_table.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "groupsgd/base/enum_names.h"
#include "groupsgd/common/atomic_file.h"

namespace groupsgd::jobs {

using nlohmann::json;

constexpr std::array<base::EnumName<JobState>, 4> kJobStateNames{{
    {JobState::kRunning, "running"},
    {JobState::kFinished, "finished"},
    {JobState::kStopped, "stopped"},
    {JobState::kFailed, "failed"},
}};

const char* jobStateName(JobState s) { return base::nameOf(kJobStateNames, s); }

bool parseJobState(const std::string& text, JobState* out) {
  return base::parseInto(kJobStateNames, text, out);
}

JobRecord* JobTable::find(const std::string& name) {
  for (auto& r : jobs_) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

json JobTable::toJson() const {
  json jobs = json::array();
  for (const auto& r : jobs_) {
    jobs.push_back({{"name", r.name},
                    {"id", r.id},
                    {"state", jobStateName(r.state)},
                    {"config", r.config},
                    {"summary", r.summary},
                    {"error", r.error},
                    {"submitted_unix", r.submitted_unix},
                    {"ended_unix", r.ended_unix},
                    {"starts", r.starts}});
  }
  return {{"format", 1}, {"next_id", next_id_}, {"jobs", jobs}};
}

Result<JobTable> JobTable::fromJson(const json& j, std::string path) {
  JobTable t;
  t.path_ = std::move(path);
  try {
    if (j.at("format").get<int>() != 1) {
      return dataLoss("job table " + t.path_ + ": format " + j.at("format").dump() + " is not 1");
    }
    t.next_id_ = j.at("next_id").get<std::uint64_t>();
    for (const auto& e : j.at("jobs")) {
      JobRecord r;
      r.name = e.at("name").get<std::string>();
      r.id = e.at("id").get<std::uint64_t>();
      if (!parseJobState(e.at("state").get<std::string>(), &r.state)) {
        return dataLoss("job table " + t.path_ + ": job '" + r.name + "' has state " +
                        e.at("state").dump());
      }
      r.config = e.at("config");
      r.summary = e.value("summary", json());
      r.error = e.value("error", "");
      r.submitted_unix = e.value("submitted_unix", std::int64_t{0});
      r.ended_unix = e.value("ended_unix", std::int64_t{0});
      r.starts = e.value("starts", 0u);
      if (r.id >= t.next_id_ || t.find(r.name) != nullptr) {
        return dataLoss("job table " + t.path_ + ": job '" + r.name + "' (id " +
                        std::to_string(r.id) + ") is a duplicate or above next_id");
      }
      t.jobs_.push_back(std::move(r));
    }
  } catch (const json::exception& e) {
    return dataLoss("job table " + t.path_ + " is malformed (" + e.what() +
                    "); fix or move it away to start with an empty table");
  }
  return t;
}

Result<JobTable> JobTable::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    JobTable t;
    t.path_ = path;
    return t;
  }
  std::ifstream in(path);
  if (!in) return fileError("open", path, errno);
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return dataLoss("job table " + path +
                    " is not valid JSON; fix or move it away to start with an empty table");
  }
  return fromJson(j, path);
}

Status JobTable::save() const { return writeFileAtomically(path_, toJson().dump(2) + "\n"); }

}  // namespace groupsgd::jobs
