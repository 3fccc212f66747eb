// The job table of a multi-job daemon (docs/jobs.md, "Restart"): every job submitted,
// with its configuration, its state and, once it has ended, its summary. Kept in
// <state_dir>/jobs.json, rewritten atomically (temp file, fsync, rename) on every change,
// so a restarted daemon resumes the running jobs and still reports the ended ones.
// Thread rule: a plain value; used on the daemon's main thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd::jobs {

// running: hosted now (or, in the file, to be resumed at start); finished: a stop
// condition ended it; stopped: an operator stopped it; failed: it could not start or run.
enum class JobState { kRunning, kFinished, kStopped, kFailed };
const char* jobStateName(JobState s);
bool parseJobState(const std::string& text, JobState* out);

struct JobRecord {
  std::string name;
  std::uint64_t id = 0;
  JobState state = JobState::kRunning;
  nlohmann::json config;            // as submitted (with "name")
  nlohmann::json summary;           // null until the job ends
  std::string error;                // kFailed: why
  std::int64_t submitted_unix = 0;  // seconds since the epoch
  std::int64_t ended_unix = 0;      // 0 while running
  std::uint32_t starts = 0;         // 1 + the daemon restarts it was resumed after
};

class JobTable {
 public:
  // Reads path; a missing file is an empty table, an unreadable or malformed one an error
  // naming the file (kDataLoss: the operator decides, nothing is overwritten).
  static Result<JobTable> load(const std::string& path);
  // Writes the whole table atomically to its path.
  Status save() const;

  const std::string& path() const { return path_; }
  std::vector<JobRecord>& jobs() { return jobs_; }
  const std::vector<JobRecord>& jobs() const { return jobs_; }
  JobRecord* find(const std::string& name);
  // A new id, never reused (ids of ended jobs stay theirs).
  std::uint64_t nextId() { return next_id_++; }

  nlohmann::json toJson() const;
  static Result<JobTable> fromJson(const nlohmann::json& j, std::string path);

 private:
  std::string path_;
  std::uint64_t next_id_ = 1;
  std::vector<JobRecord> jobs_;
};

}  // namespace groupsgd::jobs
