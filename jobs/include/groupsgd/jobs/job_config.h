// A job's configuration (docs/jobs.md): one JSON object, the job's "name" plus any of the
// daemon's job-level options, read by the option table's reader on top of defaults (the
// daemon's own configuration) and checked as a whole. Every problem is named, not just
// the first: unknown keys, values of the wrong type, out-of-range values, daemon-level
// keys (listen, control_socket, ...), a bad name, and the cross-option checks of
// validate().
// Thread rule: pure functions; any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::jobs {

// The daemon configuration this room is built from (daemon/).
using daemon::DaemonConfig;

// Options that belong to the daemon, not to a job: a job file naming one is refused.
bool isDaemonLevelOption(const std::string& key);

// A job name: 1..64 of [A-Za-z0-9_.-], not starting with '.' or '-'.
bool isValidJobName(const std::string& name);

// The job's configuration: defaults, then the job's keys; job_name is set from "name".
// On failure every problem is in the status message, joined with "; ".
Result<DaemonConfig> parseJobConfig(const nlohmann::json& job, const DaemonConfig& defaults);

// The largest "arbiter_weight" a job may ask for (the smallest is anything above 0).
inline constexpr double kMaxArbiterWeight = 1000;

// A job-only key: the job's weight at the daemon's device arbiter (crossover policy),
// when the job file sets "arbiter_weight" (parseJobConfig checked it); else nullopt and
// the arbiter's own arbiter_weights (or 1) apply.
std::optional<double> jobArbiterWeight(const nlohmann::json& job);

}  // namespace groupsgd::jobs
