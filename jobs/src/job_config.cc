#include "groupsgd/jobs/job_config.h"

#include "groupsgd/daemon/config_options.h"

namespace groupsgd::jobs {
namespace {

using nlohmann::json;

// Set by the daemon for all of its jobs, or by the daemon for each job (job_id,
// checkpoint_dir, summary_file).
const char* const kDaemonLevel[] = {
    "job_id",
    "job_name",
    "role",
    "coordinator",
    "node_groups",
    "listen",
    "bind_host",
    "endpoint_file",
    "summary_file",
    "json",
    "log_level",
    "control_socket",
    "control_admin_gid",
    "metrics_listen",
    "checkpoint_dir",
    "give_up_s",
    "serve",
    "state_dir",
    "max_group_slots",
    "curve",
    "external_model_file",
    "replication_listen",  // a --serve daemon's standby link; each job's is set at launch
    "primary",
};

// Applies one member at a time so that every bad member is reported.
void applyEach(const json& obj, const std::string& prefix, DaemonConfig* cfg,
               std::vector<std::string>* problems) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string key = prefix + it.key();
    if (prefix.empty() && (it.key() == "name" || it.key() == "arbiter_weight")) continue;
    if (isDaemonLevelOption(key)) {
      problems->push_back("'" + key + "' is a daemon setting, not a job setting");
      continue;
    }
    if (daemon::isOptionObject(key) && it->is_object()) {
      applyEach(*it, key + ".", cfg, problems);
      continue;
    }
    json single = json::object();
    single[json::json_pointer("/" + it.key())] = *it;
    if (!prefix.empty()) {
      // Nested: rebuild {"a": {"b": value}} so the reader sees the shape it expects.
      json nested = json::object();
      nested[prefix.substr(0, prefix.size() - 1)] = single;
      single = nested;
    }
    if (Status s = daemon::applyJson(single, cfg); !s) problems->push_back(s.message());
  }
}

}  // namespace

bool isDaemonLevelOption(const std::string& key) {
  for (const char* d : kDaemonLevel) {
    const std::string k = d;
    if (key == k || key.rfind(k + ".", 0) == 0) return true;
  }
  return false;
}

bool isValidJobName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<DaemonConfig> parseJobConfig(const json& job, const DaemonConfig& defaults) {
  if (!job.is_object()) return invalidArgument("a job configuration is a JSON object");
  std::vector<std::string> problems;
  DaemonConfig cfg = defaults;
  cfg.serve = false;
  const auto name = job.find("name");
  if (name == job.end() || !name->is_string()) {
    problems.push_back("'name' (a string) is missing");
  } else if (!isValidJobName(name->get<std::string>())) {
    problems.push_back("name '" + name->get<std::string>() +
                       "' is not 1..64 of [A-Za-z0-9_.-] (not starting with '.' or '-')");
  } else {
    cfg.job_name = name->get<std::string>();
  }
  applyEach(job, "", &cfg, &problems);
  if (const auto w = job.find("arbiter_weight"); w != job.end()) {
    if (!w->is_number() || !(w->get<double>() > 0) || w->get<double>() > kMaxArbiterWeight) {
      problems.push_back("arbiter_weight must be a number in (0, " +
                         std::to_string(static_cast<int>(kMaxArbiterWeight)) + "], got " +
                         w->dump());
    }
  }
  // Ranges one by one (each option on top of the valid defaults), then the checks across
  // options, which report the first they find.
  const std::size_t before_ranges = problems.size();
  for (const auto& o : daemon::daemonOptions()) {
    if (!o.range.any()) continue;
    DaemonConfig probe = defaults;
    o.read(o.write(cfg), &probe);
    if (Status s = daemon::checkRanges(probe); !s) problems.push_back(s.message());
  }
  if (problems.size() == before_ranges) {
    if (Status s = validate(cfg); !s) problems.push_back(s.message());
  }
  if (!problems.empty()) {
    std::string text;
    for (const auto& p : problems) text += (text.empty() ? "" : "; ") + p;
    return invalidArgument(text);
  }
  return cfg;
}

std::optional<double> jobArbiterWeight(const json& job) {
  const auto w = job.find("arbiter_weight");
  if (w == job.end() || !w->is_number()) return std::nullopt;
  return w->get<double>();
}

}  // namespace groupsgd::jobs
